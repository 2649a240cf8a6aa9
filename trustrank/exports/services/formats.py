"""The JSON writer (rows in, bytes out in chunks of about 64 KiB, never the whole file) and the
helpers every format shares. The CSV is written by PostgreSQL (csv_copy.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from trustrank.exports.services.rows import COLUMNS

CHUNK_BYTES = 64 * 1024
Progress = Callable[[int], None]


def public_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in COLUMNS}


def _factor_value(value: Any) -> str:
    # As PostgreSQL's ->> writes a JSON value (the CSV export formats it there).
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return orjson.dumps(value).decode()
    return str(value)


def explanation_text(factors: list[dict[str, Any]] | None) -> str:
    """The factors, compact: `name=value (+effect); …`, largest effect first."""
    if not factors:
        return ""
    ordered = sorted(factors, key=lambda f: -abs(float(f.get("effect") or 0.0)))
    return "; ".join(
        f"{f.get('name')}={_factor_value(f.get('value'))} ({float(f.get('effect') or 0.0):+.2f})"
        for f in ordered
    )


def _counting(
    rows: Iterable[dict[str, Any]], progress: Progress | None
) -> Iterator[dict[str, Any]]:
    n = 0
    for row in rows:
        yield row
        n += 1
        if progress is not None and n % 1000 == 0:
            progress(n)
    if progress is not None:
        progress(n)


def json_chunks(
    rows: Iterable[dict[str, Any]], meta: dict[str, Any], progress: Progress | None = None
) -> Iterator[bytes]:
    """{"export": {metadata}, "findings": [...]}, written a row at a time."""
    head = orjson.dumps({"export": meta})
    parts = [head[:-1], b',"findings":[']
    size = 0
    first = True
    for row in _counting(rows, progress):
        body = orjson.dumps(public_row(row), option=orjson.OPT_NON_STR_KEYS)
        parts.append(body if first else b"," + body)
        first = False
        size += len(body) + 1
        if size >= CHUNK_BYTES:
            yield b"".join(parts)
            parts, size = [], 0
    parts.append(b"]}\n")
    yield b"".join(parts)
