"""Cells a spreadsheet would run: neutralised in every table Flowledger shows or exports.

A cell that starts with ``=``, ``+``, ``-``, ``@``, tab or carriage return is read as a formula by
spreadsheet programs, so a table answer pasted or exported into one could run ``=HYPERLINK(...)``
from a stranger's upload. Following OWASP's CSV injection guidance, such a cell is shown with a
single quote in front. The stored file keeps the original: this is how a cell is shown, not stored.
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralised(text: str) -> str:
    """``text`` as a table shows it: prefixed with ``'`` when a spreadsheet would read it as a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text
