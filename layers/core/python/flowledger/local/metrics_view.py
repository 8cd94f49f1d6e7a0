"""``GET /metrics`` on the dev server: the counters of the metrics file since the server started.

The server and its function workers append EMF records to ``metrics.jsonl`` in the data dir
(``flowledger.metrics``); this view folds the lines written since start into one entry per metric
name and dimension set: how many records, their sum, minimum, maximum and unit. It reads only the
lines added since its last call, so a long-running server does not re-read the file.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# A file grown past this at start is moved to ``metrics.jsonl.1`` (one generation kept).
ROTATE_BYTES = 20 * 1024 * 1024


@dataclass
class _Counter:
    unit: str
    count: int = 0
    total: float = 0.0
    minimum: float = float("inf")
    maximum: float = float("-inf")

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)


class MetricsView:
    """Counters of the EMF records appended to ``path`` after this object was made."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.exists() and path.stat().st_size > ROTATE_BYTES:
            path.replace(path.with_name(path.name + ".1"))
        self._offset = path.stat().st_size if path.exists() else 0
        self._since = datetime.now(UTC).isoformat(timespec="seconds")
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], _Counter] = {}
        self._lock = threading.Lock()

    def summary(self) -> dict[str, Any]:
        """Every metric seen since start, by name then dimensions."""
        with self._lock:
            self._read_new_lines()
            metrics = [
                {
                    "name": name,
                    "dimensions": dict(dimensions),
                    "unit": counter.unit,
                    "count": counter.count,
                    "sum": counter.total,
                    "min": counter.minimum,
                    "max": counter.maximum,
                }
                for (name, dimensions), counter in sorted(self._counters.items())
            ]
        return {"file": str(self.path), "since": self._since, "metrics": metrics}

    def _read_new_lines(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        complete = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._offset += complete
        for line in data[:complete].splitlines():
            self._fold(line)

    def _fold(self, line: bytes) -> None:
        try:
            record = json.loads(line)
            directive = record["_aws"]["CloudWatchMetrics"][0]
            keys = [key for group in directive["Dimensions"] for key in group]
            dimensions = tuple(sorted((key, str(record[key])) for key in keys))
            for metric in directive["Metrics"]:
                name = metric["Name"]
                value = float(record[name])
                self._counters.setdefault((name, dimensions), _Counter(unit=metric.get("Unit", ""))).add(value)
        except (ValueError, KeyError, IndexError, TypeError):
            return  # a line that is not an EMF record counts for nothing
