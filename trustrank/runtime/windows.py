"""The time window a services or edges page or API reads (`?window=15m`)."""

from __future__ import annotations

import re
from datetime import timedelta

_WINDOW_RE = re.compile(r"^(\d{1,6})([smhd])$")
_WINDOW_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
MAX_WINDOW = timedelta(days=400)


def window_parse(raw: str | None, *, default: str = "1h") -> timedelta | None:
    """`15m`, `1h`, `7d` -> timedelta; `all` -> None (no lower bound). ValueError otherwise."""
    value = (raw or default).strip().lower()
    if value == "all":
        return None
    match = _WINDOW_RE.match(value)
    if not match:
        raise ValueError(
            f"window must look like 15m, 1h, 24h or 7d (or 'all'), got {value[:20]!r}"
        )
    delta = timedelta(**{_WINDOW_UNITS[match.group(2)]: int(match.group(1))})
    if delta <= timedelta(0) or delta > MAX_WINDOW:
        raise ValueError(f"window must be between 1s and {MAX_WINDOW.days}d, got {value!r}")
    return delta
