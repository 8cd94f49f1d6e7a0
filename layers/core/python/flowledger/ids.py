"""Time-sortable identifiers (ULID layout: 48-bit milliseconds, 80 random bits, Crockford base32)."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id(prefix: str, now_ms: int | None = None) -> str:
    """``prefix`` + a 26-character ULID; ids made later sort after ids made earlier (per ms)."""
    value = ((now_ms if now_ms is not None else time.time_ns() // 1_000_000) << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return prefix + "".join(reversed(chars))
