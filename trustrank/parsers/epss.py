"""FIRST EPSS daily CSV (gzipped or not) -> rows. No database access.

The file starts with a comment line `#model_version:v2025.03.14,score_date:2025-09-29T00:00:00Z`,
then the header `cve,epss,percentile`.
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass
from datetime import date, datetime

CVE_RE = re.compile(r"^CVE-\d{4}-\d{4,}$")


class EpssError(ValueError):
    pass


@dataclass(frozen=True)
class EpssFile:
    model_version: str
    score_date: date
    # (cve, epss probability, percentile): plain tuples, there are 300,000 of them.
    rows: list[tuple[str, float, float]]


def _comment(line: str) -> tuple[str, date]:
    fields = {}
    for part in line.lstrip("#").split(","):
        key, _, value = part.partition(":")
        fields[key.strip()] = value.strip()
    model = fields.get("model_version", "")
    raw_date = fields.get("score_date", "")
    if not model or not raw_date:
        raise EpssError("line 1: expected '#model_version:…,score_date:…', got " + repr(line[:120]))
    try:
        score_date = datetime.fromisoformat(raw_date.replace("Z", "+00:00")).date()
    except ValueError:
        try:
            score_date = date.fromisoformat(raw_date[:10])
        except ValueError as exc:
            raise EpssError(f"line 1: score_date {raw_date!r} is not a date") from exc
    return model, score_date


def parse_epss(data: bytes) -> EpssFile:
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise EpssError(f"not a readable gzip file ({exc})") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EpssError(f"not UTF-8 text ({exc})") from exc
    lines = text.splitlines()
    if not lines or not lines[0].startswith("#"):
        raise EpssError("line 1: the EPSS comment line '#model_version:…,score_date:…' is missing")
    model, score_date = _comment(lines[0])
    if len(lines) < 2 or [h.strip() for h in lines[1].split(",")] != ["cve", "epss", "percentile"]:
        raise EpssError("line 2: expected the header 'cve,epss,percentile'")
    rows: list[tuple[str, float, float]] = []
    append = rows.append
    cve_match = CVE_RE.match
    for number, line in enumerate(lines[2:], start=3):
        if not line:
            continue
        parts = line.split(",")
        if len(parts) != 3 or not cve_match(parts[0]):
            raise EpssError(
                f"line {number}: expected 'CVE-YYYY-NNNN,epss,percentile', got {line[:120]!r}"
            )
        try:
            epss, pct = float(parts[1]), float(parts[2])
        except ValueError as exc:
            raise EpssError(f"line {number}: epss and percentile must be numbers") from exc
        if not (0.0 <= epss <= 1.0 and 0.0 <= pct <= 1.0):
            raise EpssError(f"line {number}: epss and percentile must lie between 0 and 1")
        append((parts[0], epss, pct))
    return EpssFile(model_version=model, score_date=score_date, rows=rows)
