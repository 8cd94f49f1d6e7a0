"""OpenTelemetry traces in: OTLP/HTTP bodies decoded (``decode``), their spans read as flow steps (``mapping``),
written as flows (``ingest``) and answered (``receiver``).

The metric names live here, free of protobuf, so the CDK app can alarm on them without importing the receiver.
"""

REFUSED_METRIC = "otlp.spans.refused"  # spans and log records answered as refused (partial_success): alarmed
RECORDED_METRIC = "otlp.spans.recorded"
METRIC_SERVICE = "reasoning"  # the dimension the receiver's metrics carry: the function that serves it
