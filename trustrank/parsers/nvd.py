"""NVD CVE API 2.0 pages -> one CVSS severity per CVE, streamed. No database access.

A page (`{"format": "NVD_CVE", "version": "2.0", "vulnerabilities": [{"cve": {...}}]}`, as
the API answers and as the yearly feed files hold it) is read as a stream with ijson, so a
feed file of hundreds of megabytes is never held whole: one CVE record at a time. Plain JSON
or gzip (told by its magic bytes, decompressed as it is read).

Which metric a CVE gets: CVSS v3.1, else v3.0, else v4.0, else v2 (v3.x first, as KEV, EPSS
and most tools quote it, and as `parsers.cvss.best_score` orders an advisory's scores).
Within a version the `Primary` metric (NVD's own, source nvd@nist.gov) wins over a
`Secondary` one (the CNA's). The vector is checked with the `cvss` library and its score is
the one taken; where NVD's `baseScore` differs, the record says so (`score_mismatch`)
rather than failing the page. A vector the library refuses fails the page, naming the CVE.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any, cast

import ijson
from cvss import CVSS2, CVSS3, CVSS4
from cvss.exceptions import CVSSError

from trustrank.parsers.cvss import severity_label
from trustrank.parsers.errors import ParserError

CVE_RE = re.compile(r"^CVE-\d{4}-\d{4,}$")
GZIP_MAGIC = b"\x1f\x8b"
# Metric lists in the order they are preferred, and the CVSS version each holds.
METRIC_KEYS = (
    ("cvssMetricV31", "3.1"),
    ("cvssMetricV30", "3.0"),
    ("cvssMetricV40", "4.0"),
    ("cvssMetricV2", "2.0"),
)
_ITEM = "vulnerabilities.item"
_SCALARS = {"string", "number", "boolean", "null"}


class NvdError(ParserError):
    """Not an NVD CVE API 2.0 page, or a page with a record that cannot be used."""


@dataclass(frozen=True, slots=True)
class NvdSeverity:
    """The CVSS score NVD gives one CVE (its preferred metric, see the module docstring)."""

    cve_id: str
    version: str  # "3.1" | "3.0" | "4.0" | "2.0"
    vector: str
    score: float
    severity: str  # critical | high | medium | low | none
    source: str  # who scored it: nvd@nist.gov, or the CNA's address or id
    source_type: str  # Primary | Secondary
    published: datetime | None
    last_modified: datetime | None
    # NVD's own baseScore when it differs from the score the vector gives.
    stated_score: float | None = None

    @property
    def score_mismatch(self) -> bool:
        return self.stated_score is not None


@dataclass(frozen=True, slots=True)
class NvdCve:
    """One CVE of the page; `severity` is None when NVD has no CVSS metric for it yet."""

    cve_id: str
    severity: NvdSeverity | None


def nvd_time(value: object) -> datetime | None:
    """NVD's timestamps (`2023-10-11T22:15:09.880`) are UTC without an offset."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _v2_label(score: float) -> str:
    # CVSS v2 has three ratings (NVD's): low < 4.0 <= medium < 7.0 <= high.
    if score >= 7.0:
        return "high"
    return "medium" if score >= 4.0 else "low"


def _score(version: str, vector: str) -> float:
    if version == "4.0":
        return float(CVSS4(vector).base_score)
    if version in ("3.1", "3.0"):
        return float(CVSS3(vector).base_score)
    return float(CVSS2(vector).base_score)


def _pick(metrics: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(version, metric) NVD's preferred metric: by version order, Primary before
    Secondary, then the first listed."""
    for key, version in METRIC_KEYS:
        entries = [m for m in metrics.get(key) or () if isinstance(m, dict)]
        entries = [m for m in entries if isinstance(m.get("cvssData"), dict)]
        if not entries:
            continue
        primary = [m for m in entries if m.get("type") == "Primary"]
        return version, (primary or entries)[0]
    return None


def severity_from_metrics(
    cve_id: str,
    metrics: dict[str, Any],
    *,
    published: datetime | None = None,
    last_modified: datetime | None = None,
) -> NvdSeverity | None:
    """The CVE's severity from its `metrics` object; None without a usable metric.
    Raises NvdError for a vector the `cvss` library refuses."""
    picked = _pick(metrics)
    if picked is None:
        return None
    version, metric = picked
    data = metric["cvssData"]
    vector = str(data.get("vectorString") or "").strip()
    if not vector:
        raise NvdError(f"{cve_id}: the CVSS v{version} metric has no vectorString")
    try:
        score = _score(version, vector)
    except (CVSSError, ValueError, KeyError, IndexError) as exc:
        raise NvdError(f"bad CVSS v{version} vector at {cve_id}: {vector!r} ({exc})") from exc
    stated = data.get("baseScore")
    mismatch = (
        float(stated)
        if isinstance(stated, int | float) and abs(float(stated) - score) > 0.05
        else None
    )
    return NvdSeverity(
        cve_id=cve_id,
        version=version,
        vector=vector,
        score=score,
        severity=_v2_label(score) if version == "2.0" else severity_label(score),
        source=str(metric.get("source") or "")[:128],
        source_type=str(metric.get("type") or "")[:16],
        published=published,
        last_modified=last_modified,
        stated_score=mismatch,
    )


def open_payload(payload: bytes | IO[bytes]) -> IO[bytes]:
    """A binary stream of the page's JSON from its start: gzip is told by its magic bytes,
    not a name. A file object is rewound, so a page can be read more than once."""
    stream: IO[bytes] = io.BytesIO(payload) if isinstance(payload, bytes | bytearray) else payload
    stream.seek(0)
    head = stream.read(2)
    stream.seek(0)
    if head == GZIP_MAGIC:
        return cast(IO[bytes], gzip.GzipFile(fileobj=stream, mode="rb"))
    return stream


class NvdPage:
    """Iterate a page's CVEs (`NvdCve`), streamed.

    Two passes over the stream: the header (`format`, `version`, …) is read first, up to
    the `vulnerabilities` array where NVD writes it (to the end only if a key is missing
    there); then the records, one `vulnerabilities[]` item at a time, built by ijson's C
    backend (an event loop in Python read 7 MB/s, a fifth of this).

    After the iteration: `header` (resultsPerPage, startIndex, totalResults, format,
    version, timestamp) and `cves` (how many records were read). Raises NvdError, naming
    `filename`, for input that is not JSON, not an NVD_CVE 2.0 page or has a bad record.
    """

    def __init__(self, payload: bytes | IO[bytes], *, filename: str = "payload") -> None:
        self.payload = payload
        self.filename = filename or "payload"
        self.header: dict[str, Any] = {}
        self.cves = 0

    def _fail(self, message: str) -> NvdError:
        return NvdError(f"{self.filename}: {message}")

    def __iter__(self) -> Iterator[NvdCve]:
        try:
            self._read_header(open_payload(self.payload))
            items = ijson.items(open_payload(self.payload), _ITEM, use_float=True)
            for item in items:
                self.cves += 1
                yield self._record(item)
        except (ijson.JSONError, ijson.IncompleteJSONError) as exc:
            # yajl's messages run over several lines with a caret drawing.
            detail = " ".join(str(exc).split())[:160]
            raise self._fail(f"not JSON ({detail})") from exc
        except (gzip.BadGzipFile, EOFError, OSError) as exc:
            raise self._fail(f"not a readable gzip file ({exc})") from exc
        except UnicodeDecodeError as exc:
            raise self._fail(f"not UTF-8 JSON ({exc})") from exc

    def _read_header(self, stream: IO[bytes]) -> None:
        events = ijson.parse(stream, use_float=True)
        first = next(events, None)
        if first is None or first[1] != "start_map":
            raise self._fail("not an NVD CVE API 2.0 page (the top level is no object)")
        for prefix, event, value in events:
            if prefix and "." not in prefix and event in _SCALARS:
                self.header[prefix] = value
            elif prefix == "vulnerabilities" and event == "start_array":
                self.header["vulnerabilities"] = True
                if "format" in self.header and "version" in self.header:
                    break
        fmt, version = self.header.get("format"), self.header.get("version")
        if fmt is not None and fmt != "NVD_CVE":
            raise self._fail(f"not an NVD CVE API page (format {fmt!r}, expected 'NVD_CVE')")
        if version is not None and str(version) != "2.0":
            raise self._fail(f"NVD CVE API version {version!r} is not supported (only 2.0)")
        if fmt is None or version is None or "vulnerabilities" not in self.header:
            raise self._fail(
                "not an NVD CVE API 2.0 page (needs \"format\": \"NVD_CVE\", "
                "\"version\": \"2.0\" and \"vulnerabilities\")"
            )

    def _record(self, item: Any) -> NvdCve:
        """One `vulnerabilities[]` item: its id, dates, status and metrics are read."""
        cve = item.get("cve") if isinstance(item, dict) else None
        fields = cve if isinstance(cve, dict) else {}
        cve_id = str(fields.get("id") or "").strip().upper()
        if not CVE_RE.match(cve_id):
            raise self._fail(
                f"record {self.cves} has no CVE id (cve.id {fields.get('id')!r})"
            )
        if str(fields.get("vulnStatus") or "") == "Rejected":
            return NvdCve(cve_id, None)
        metrics = fields.get("metrics")
        try:
            severity = severity_from_metrics(
                cve_id,
                metrics if isinstance(metrics, dict) else {},
                published=nvd_time(fields.get("published")),
                last_modified=nvd_time(fields.get("lastModified")),
            )
        except NvdError as exc:
            raise self._fail(str(exc)) from exc
        return NvdCve(cve_id, severity)


def parse_nvd(payload: bytes, *, filename: str = "payload") -> list[NvdCve]:
    """The whole page at once (tests, small pages): the CVEs, after the header is checked."""
    return list(NvdPage(payload, filename=filename))
