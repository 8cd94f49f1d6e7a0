"""Small text helpers the commands print with."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``1 event``, ``1,234 events``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
