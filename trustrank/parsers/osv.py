"""OSV advisories: bytes (one JSON record, a JSON array, or a zip of records such as osv.dev's
per-ecosystem all.zip) -> frozen records. No database access.

Everything is validated before anything is returned, so a bad record rejects the whole
import instead of leaving half of it stored.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from trustrank.parsers.cvss import Score, score_vector

MAX_ZIP_MEMBERS = 2_000_000
EVENT_KINDS = ("introduced", "fixed", "last_affected", "limit")
RANGE_TYPES = ("SEMVER", "ECOSYSTEM", "GIT")
_FRACTION = re.compile(r"\.(\d+)")


class OsvError(ValueError):
    """The payload is not OSV; the message names the file, the record and the field."""


@dataclass(frozen=True)
class OsvRecord:
    id: str
    aliases: tuple[str, ...]
    summary: str
    details: str
    scores: tuple[Score, ...]
    affected: tuple[dict[str, Any], ...]
    references: tuple[dict[str, str], ...]
    published: datetime | None
    modified: datetime
    withdrawn: datetime | None
    schema_version: str
    database_severity: str
    raw: dict[str, Any]


def parse_timestamp(value: Any, *, where: str) -> datetime:
    """RFC 3339 as OSV writes it, including nanosecond fractions and a Z suffix."""
    if not isinstance(value, str) or not value:
        raise OsvError(f"{where}: expected an RFC 3339 timestamp, got {value!r}")
    text = value.strip().replace("z", "Z")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), text, count=1)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise OsvError(f"{where}: {value!r} is not an RFC 3339 timestamp") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    # An offset beyond any real time zone, or a date that leaves the calendar in UTC, cannot
    # be stored (the worker failed on it).
    offset = parsed.utcoffset() or timedelta(0)
    if abs(offset) > timedelta(hours=14):
        raise OsvError(f"{where}: {value!r} has a time-zone offset beyond 14 hours")
    try:
        return parsed.astimezone(UTC)
    except OverflowError as exc:
        raise OsvError(f"{where}: {value!r} is out of range") from exc


def _list(value: Any, *, where: str) -> list[Any]:
    """An optional array field: absent or null is empty, anything but an array is refused."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise OsvError(f"{where}: must be a list")
    return value


def _validate_affected(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise OsvError(f"{where}: must be an object")
    package = entry.get("package")
    if package is not None and (
        not isinstance(package, dict) or not package.get("ecosystem") or not package.get("name")
    ):
        raise OsvError(f"{where}.package: needs both 'ecosystem' and 'name'")
    for i, rng in enumerate(_list(entry.get("ranges"), where=f"{where}.ranges")):
        rwhere = f"{where}.ranges[{i}]"
        if not isinstance(rng, dict):
            raise OsvError(f"{rwhere}: must be an object")
        if rng.get("type") not in RANGE_TYPES:
            raise OsvError(
                f"{rwhere}.type: {rng.get('type')!r} is not one of {', '.join(RANGE_TYPES)}"
            )
        events = rng.get("events")
        if not isinstance(events, list) or not events:
            raise OsvError(f"{rwhere}.events: must be a non-empty list")
        for j, ev in enumerate(events):
            kinds = [k for k in EVENT_KINDS if k in ev] if isinstance(ev, dict) else []
            if len(kinds) != 1 or not isinstance(ev[kinds[0]], str):
                raise OsvError(
                    f"{rwhere}.events[{j}]: each event has exactly one of "
                    f"{', '.join(EVENT_KINDS)} with a string value"
                )
    versions = entry.get("versions")
    if versions is not None and (
        not isinstance(versions, list) or not all(isinstance(v, str) for v in versions)
    ):
        raise OsvError(f"{where}.versions: must be a list of strings")
    return entry


def record_from_dict(doc: Any, *, source: str) -> OsvRecord:
    if not isinstance(doc, dict):
        raise OsvError(f"{source}: an OSV record must be a JSON object")
    rid = doc.get("id")
    if not isinstance(rid, str) or not rid.strip():
        raise OsvError(f"{source}: the record has no 'id'")
    where = f"{source} ({rid})"
    aliases = doc.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise OsvError(f"{where}: 'aliases' must be a list of strings")
    affected = doc.get("affected") or []
    if not isinstance(affected, list):
        raise OsvError(f"{where}: 'affected' must be a list")
    scores = []
    for i, sev in enumerate(_list(doc.get("severity"), where=f"{where}.severity")):
        if not isinstance(sev, dict) or not isinstance(sev.get("score"), str):
            raise OsvError(f"{where}.severity[{i}]: needs 'type' and a string 'score'")
        scores.append(score_vector(type=str(sev.get("type", "")), vector=sev["score"]))
    references = tuple(
        {"type": str(r.get("type", "")), "url": str(r.get("url", ""))}
        for r in _list(doc.get("references"), where=f"{where}.references")
        if isinstance(r, dict) and r.get("url")
    )
    db_specific = (
        doc.get("database_specific") if isinstance(doc.get("database_specific"), dict) else {}
    )
    return OsvRecord(
        id=rid.strip(),
        aliases=tuple(a.strip() for a in aliases if a.strip()),
        summary=str(doc.get("summary") or ""),
        details=str(doc.get("details") or ""),
        scores=tuple(scores),
        affected=tuple(
            _validate_affected(a, f"{where}.affected[{i}]") for i, a in enumerate(affected)
        ),
        references=references,
        published=parse_timestamp(doc["published"], where=f"{where}.published")
        if doc.get("published")
        else None,
        modified=parse_timestamp(doc.get("modified"), where=f"{where}.modified"),
        withdrawn=parse_timestamp(doc["withdrawn"], where=f"{where}.withdrawn")
        if doc.get("withdrawn")
        else None,
        schema_version=str(doc.get("schema_version") or ""),
        database_severity=str((db_specific or {}).get("severity") or ""),
        raw=doc,
    )


def _records_from_json(data: bytes, *, source: str) -> Iterator[OsvRecord]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise OsvError(f"{source}: not valid JSON ({exc})") from exc
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield record_from_dict(item, source=f"{source}[{i}]")
    else:
        yield record_from_dict(doc, source=source)


def parse_osv(data: bytes, *, filename: str = "payload") -> list[OsvRecord]:
    """All records of the payload, or OsvError naming the first problem."""
    if data[:4] == b"PK\x03\x04":
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as exc:
            raise OsvError(f"{filename}: not a readable zip archive ({exc})") from exc
        names = [n for n in archive.namelist() if n.lower().endswith(".json")]
        if len(names) > MAX_ZIP_MEMBERS:
            raise OsvError(f"{filename}: more than {MAX_ZIP_MEMBERS} members")
        if not names:
            raise OsvError(f"{filename}: the zip archive holds no .json OSV records")
        records: list[OsvRecord] = []
        for name in sorted(names):
            try:
                member = archive.read(name)
            except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError,
                    EOFError) as exc:  # corrupt, encrypted or an unknown compression
                raise OsvError(f"{filename}: member {name} cannot be read ({exc})") from exc
            records.extend(_records_from_json(member, source=name))
        return records
    if not data.strip():
        raise OsvError(f"{filename}: empty payload")
    return list(_records_from_json(data, source=filename))
