"""Metrics port and its EMF adapter (powertools), with the seed's metric names.

In Lambda each metric is an EMF line on stdout, which CloudWatch reads. The dev server sets
``FLOWLEDGER_METRICS_FILE`` (for itself and its function workers), and the same records are
appended to that file instead, so the terminal shows the request log and not the metrics.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Protocol

NAMESPACE = "Flowledger"
METRICS_FILE_VARIABLE = "FLOWLEDGER_METRICS_FILE"
_append_lock = threading.Lock()


class MetricsSink(Protocol):
    def emit(self, name: str, value: float, unit: str, dimensions: Mapping[str, str]) -> None: ...


class EmfMetrics:
    """One EMF record per metric, so each carries its own dimensions (CloudWatch reads stdout)."""

    def emit(self, name: str, value: float, unit: str, dimensions: Mapping[str, str]) -> None:
        path = os.environ.get(METRICS_FILE_VARIABLE)
        if path:
            append_record(path, emf_record(name, value, unit, dimensions))
            return
        from aws_lambda_powertools.metrics import MetricUnit, single_metric

        with single_metric(name=name, unit=MetricUnit(unit), value=value, namespace=NAMESPACE) as metric:
            for key, dimension in dimensions.items():
                metric.add_dimension(name=key, value=dimension)


def emf_record(name: str, value: float, unit: str, dimensions: Mapping[str, str]) -> dict[str, object]:
    """The EMF record powertools would print for this metric (so the file reads as CloudWatch would)."""
    return {
        "_aws": {
            "Timestamp": int(time.time() * 1000),
            "CloudWatchMetrics": [
                {"Namespace": NAMESPACE, "Dimensions": [list(dimensions)], "Metrics": [{"Name": name, "Unit": unit}]}
            ],
        },
        **dimensions,
        name: value,
    }


def append_record(path: str, record: Mapping[str, object]) -> None:
    """Append one JSON line; a line this short is one ``write``, so processes sharing the file never interleave."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    with _append_lock:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
