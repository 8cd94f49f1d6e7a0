"""OpenTelemetry traces in: OTLP/HTTP bodies decoded (``decode``) and their spans read as flow steps (``mapping``)."""
