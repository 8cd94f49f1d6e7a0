"""Time-sortable identifiers (ULID layout: 48-bit milliseconds, 80 random bits, Crockford base32)."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id(prefix: str, now_ms: int | None = None) -> str:
    """``prefix`` + a 26-character ULID; ids made later sort after ids made earlier (per ms)."""
    value = ((now_ms if now_ms is not None else time.time_ns() // 1_000_000) << 80) | secrets.randbits(80)
    return prefix + crockford(value)


def crockford(value: int, length: int = 26) -> str:
    """``value``'s low ``5 * length`` bits in Crockford base32, as a ULID writes its 128 bits."""
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))
