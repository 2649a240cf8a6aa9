"""Loading vulnerability feeds (OSV, CISA KEV, FIRST EPSS, NVD severities) into the vulns app.

Each loader parses the whole payload before anything is written, so bad input stores
nothing; the writes are idempotent upserts, so a re-run after a dead worker is harmless.
Feeds are shared by every team: each import that changes them is an audit event (no team)
naming who submitted it.
"""

from __future__ import annotations

from typing import Any

from ingest.errors import IngestRejected
from ingest.models import IngestJob
from ingest.services import ProgressFn
from trustrank.findings.choices import ActorKind
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.parsers.epss import EpssError, parse_epss
from trustrank.parsers.kev import KevError, parse_kev
from trustrank.parsers.nvd import NvdError, NvdPage
from trustrank.parsers.osv import OsvError, parse_osv
from trustrank.vulns.services.feeds import (
    FeedRefused,
    advisories_import,
    epss_scores_import,
    kev_catalog_import,
)
from trustrank.vulns.services.nvd import nvd_severities_import


def _audit(job: IngestJob, counts: dict[str, Any]) -> None:
    if job.requested_by_key_id is not None:
        actor = Actor(label=job.requested_by_label or "api key", kind=ActorKind.API_KEY,
                      api_key_id=job.requested_by_key_id)
    elif job.requested_by_user_id is not None:
        actor = Actor(label=job.requested_by_label or "user", kind=ActorKind.USER,
                      user=job.requested_by_user)
    else:
        actor = Actor.system(job.requested_by_label or "feed import")
    audit_event_record(
        actor=actor,
        action="feed_imported",
        team_id=None,
        subject_type=f"feed.{job.kind}",
        subject_id=str(job.pk),
        after={k: v for k, v in counts.items() if not k.startswith("_")},
        reason=f"{job.kind} import of {job.filename or 'an upload'} ({job.digest[:12]})",
    )


def osv_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    try:
        records = parse_osv(payload, filename=job.filename or "payload")
    except OsvError as exc:
        raise IngestRejected(f"OSV import refused: {exc}") from exc
    counts = advisories_import(records=records, job_id=job.pk, progress=progress)
    _audit(job, counts)
    return counts


def kev_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    try:
        catalog = parse_kev(payload)
    except KevError as exc:
        raise IngestRejected(f"KEV import refused: {exc}") from exc
    try:
        counts = kev_catalog_import(
            catalog=catalog, progress=progress,
            allow_shrink=bool((job.params or {}).get("allow_shrink")),
        )
    except FeedRefused as exc:
        raise IngestRejected(str(exc)) from exc
    _audit(job, counts)
    return counts


def epss_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    try:
        parsed = parse_epss(payload)
    except EpssError as exc:
        raise IngestRejected(f"EPSS import refused: {exc}") from exc
    try:
        counts = epss_scores_import(parsed=parsed, progress=progress)
    except FeedRefused as exc:
        raise IngestRejected(str(exc)) from exc
    _audit(job, counts)
    return counts


def nvd_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    """One NVD CVE API 2.0 page (plain or gzip), streamed into the store in the job's
    transaction: a page found bad half-way stores nothing."""
    page = NvdPage(payload, filename=job.filename or "payload")
    try:
        counts = nvd_severities_import(pages=[page], progress=progress)
    except NvdError as exc:
        raise IngestRejected(f"NVD import refused: {exc}") from exc
    result = counts.setdefault("_result", {})
    result.update({k: page.header.get(k) for k in ("totalResults", "startIndex", "timestamp")})
    _audit(job, counts)
    return counts
