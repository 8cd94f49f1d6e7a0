"""The bounds of the tabular engine, in one place, with defaults a Lambda of 1 GB stays well inside."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class TabularLimits:
    """Bounds on what is converted and on what one query may cost and return."""

    # the file
    max_bytes: int = 100 * MIB
    max_xlsx_uncompressed_bytes: int = 400 * MIB  # a workbook is a ZIP: bound what it inflates to
    max_rows: int = 2_000_000
    max_columns: int = 200
    max_cell_chars: int = 32_768
    max_column_name_chars: int = 128
    # the work
    convert_threads: int = 2
    # One thread makes float sums add in one order, so a replayed plan gives bit-identical numbers.
    query_threads: int = 1
    memory_limit_mb: int = 512
    convert_seconds: float = 120.0
    query_seconds: float = 10.0
    # the answer
    max_result_cell_chars: int = 1_000
    max_result_bytes: int = 256 * 1024


DEFAULT_LIMITS = TabularLimits()
