"""Metrics port and its EMF adapter (powertools), with the seed's metric names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

NAMESPACE = "Flowledger"


class MetricsSink(Protocol):
    def emit(self, name: str, value: float, unit: str, dimensions: Mapping[str, str]) -> None: ...


class EmfMetrics:
    """One EMF record per metric, so each carries its own dimensions (CloudWatch reads stdout)."""

    def emit(self, name: str, value: float, unit: str, dimensions: Mapping[str, str]) -> None:
        from aws_lambda_powertools.metrics import MetricUnit, single_metric

        with single_metric(name=name, unit=MetricUnit(unit), value=value, namespace=NAMESPACE) as metric:
            for key, dimension in dimensions.items():
                metric.add_dimension(name=key, value=dimension)
