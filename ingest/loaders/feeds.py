"""Loading vulnerability feeds (OSV, CISA KEV, FIRST EPSS) into the vulns app.

Each loader parses the whole payload before anything is written, so bad input stores
nothing; the writes are idempotent upserts, so a re-run after a dead worker is harmless.
"""

from __future__ import annotations

from typing import Any

from ingest.errors import IngestRejected
from ingest.models import IngestJob
from ingest.services import ProgressFn
from trustrank.parsers.epss import EpssError, parse_epss
from trustrank.parsers.kev import KevError, parse_kev
from trustrank.parsers.osv import OsvError, parse_osv
from trustrank.vulns.services.feeds import (
    advisories_import,
    epss_scores_import,
    kev_catalog_import,
)


def osv_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    try:
        records = parse_osv(payload, filename=job.filename or "payload")
    except OsvError as exc:
        raise IngestRejected(f"OSV import refused: {exc}") from exc
    return advisories_import(records=records, job_id=job.pk, progress=progress)


def kev_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    try:
        catalog = parse_kev(payload)
    except KevError as exc:
        raise IngestRejected(f"KEV import refused: {exc}") from exc
    return kev_catalog_import(catalog=catalog, progress=progress)


def epss_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    try:
        parsed = parse_epss(payload)
    except EpssError as exc:
        raise IngestRejected(f"EPSS import refused: {exc}") from exc
    return epss_scores_import(parsed=parsed, progress=progress)
