"""Feed imports (OSV, CISA KEV, FIRST EPSS; NVD severities are in services/nvd.py) from
parsed records (ingest/loaders/feeds.py parses the job's payload and calls these), and
reading feed sources.

Feeds are global reference data: the job belongs to the team that started it, the data to
everyone. Each handler validates the whole payload before writing anything, so bad input
stores nothing; writes are idempotent upserts, so a re-run after a dead worker is harmless.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from trustrank.findings.services.audit import Actor
from trustrank.lib.locks import advisory_xact_lock
from trustrank.notify.events import notify_kev_added
from trustrank.parsers.cvss import best_score, severity_label
from trustrank.parsers.epss import EpssFile
from trustrank.parsers.kev import KevCatalog
from trustrank.parsers.osv import OsvRecord
from trustrank.vulns.engine.ecosystems import PackageKey, advisory_package_key
from trustrank.vulns.engine.matching import canonical_id
from trustrank.vulns.models import Advisory, AdvisoryPackage, KevEntry
from trustrank.vulns.services.exploit import (
    findings_match_packages,
    findings_refresh_exploit_data,
)

log = logging.getLogger(__name__)

OSV_BATCH = 500
# pg_advisory_xact_lock keys: one importer per feed at a time.
_LOCK_OSV, _LOCK_KEV, _LOCK_EPSS = 7_310_001, 7_310_002, 7_310_003
_ADVISORY_FIELDS = [
    "aliases",
    "cve_id",
    "summary",
    "details",
    "severity",
    "cvss_score",
    "severity_label",
    "affected",
    "references",
    "published",
    "modified",
    "withdrawn",
    "schema_version",
    "raw",
    "imported_at",
    "job",
]

ProgressFn = Callable[..., None]


def _advisory_from(record: OsvRecord, *, job_id: Any) -> Advisory:
    score = best_score(list(record.scores))
    cves = [i for i in (record.id, *record.aliases) if i.upper().startswith("CVE-")]
    return Advisory(
        id=record.id[:128],
        aliases=[a[:128] for a in record.aliases],
        cve_id=canonical_id(cves) if cves else "",
        summary=record.summary,
        details=record.details,
        severity=[
            {"type": s.type, "vector": s.vector, "base_score": s.base_score, "error": s.error}
            for s in record.scores
        ],
        cvss_score=score,
        severity_label=severity_label(score, record.database_severity),
        affected=list(record.affected),
        references=list(record.references),
        published=record.published,
        modified=record.modified,
        withdrawn=record.withdrawn,
        schema_version=record.schema_version[:16],
        raw=record.raw,
        imported_at=timezone.now(),
        job_id=job_id,
    )


def _package_keys(affected: Any) -> set[PackageKey]:
    keys = set()
    for entry in affected or []:
        package = entry.get("package") or {}
        if package.get("ecosystem") and package.get("name"):
            keys.add(advisory_package_key(ecosystem=package["ecosystem"], name=package["name"]))
    return keys


class FeedRefused(ValueError):
    """A feed file that must not replace what is stored (dated in the future, or a KEV
    catalog that would drop most entries); the message says why and what to do."""


def _latest_acceptable() -> datetime:
    """Records dated after this are refused: a far-future `modified` would make every later
    genuine version of the record look older and be skipped (a feed-wide withdrawal)."""
    return timezone.now() + timedelta(seconds=settings.TRUSTRANK_FEED_MAX_CLOCK_SKEW_SECONDS)


def osv_future_refusals(records: list[OsvRecord]) -> tuple[list[OsvRecord], list[str]]:
    """The records dated no later than now (plus the allowed skew), and why the others were
    refused."""
    limit = _latest_acceptable()
    kept: list[OsvRecord] = []
    reasons: list[str] = []
    for r in records:
        for name, value in (("modified", r.modified), ("published", r.published)):
            if value is not None and value > limit:
                reasons.append(f"{r.id}: {name} {value.isoformat()} is in the future")
                break
        else:
            kept.append(r)
    return kept, reasons


def advisories_import(
    *, records: list[OsvRecord], job_id: Any, progress: ProgressFn
) -> dict[str, Any]:
    """Upsert OSV records by id (a newer `modified` wins), then re-match only the packages
    whose advisories changed. Commits in batches (OSV_BATCH), each idempotent."""
    parsed_count = len(records)
    records, refused = osv_future_refusals(records)
    if refused:
        log.warning("OSV import %s refused %d future-dated records", job_id, len(refused))
    newest: dict[str, OsvRecord] = {}
    for r in records:
        if r.id not in newest or r.modified > newest[r.id].modified:
            newest[r.id] = r
    ordered = sorted(newest.values(), key=lambda r: r.id)
    counts: dict[str, Any] = {
        "records": parsed_count,
        "inserted": 0,
        "updated": 0,
        "unchanged": 0,
        "withdrawn": 0,
        "refused_future": len(refused),
    }
    changed: set[PackageKey] = set()
    progress(done=0, total=len(ordered), phase="advisories")
    for start in range(0, len(ordered), OSV_BATCH):
        batch = ordered[start : start + OSV_BATCH]
        with transaction.atomic():
            advisory_xact_lock(_LOCK_OSV)
            ids = [r.id for r in batch]
            existing = {
                a["id"]: a
                for a in Advisory.objects.filter(id__in=ids).values(
                    "id", "modified", "job_id", "affected"
                )
            }
            writes: list[Advisory] = []
            for r in batch:
                old = existing.get(r.id)
                # Re-writing what this same job wrote on an earlier attempt keeps a re-run
                # after a dead worker from skipping the matching step.
                if old is not None and r.modified < old["modified"]:
                    counts["unchanged"] += 1
                    continue
                if old is not None and r.modified == old["modified"] and old["job_id"] != job_id:
                    counts["unchanged"] += 1
                    continue
                writes.append(_advisory_from(r, job_id=job_id))
                counts["updated" if old else "inserted"] += 1
                if r.withdrawn is not None:
                    counts["withdrawn"] += 1
                if old is not None:
                    changed |= _package_keys(old["affected"])
                changed |= _package_keys(r.affected)
            if writes:
                Advisory.objects.bulk_create(
                    writes,
                    update_conflicts=True,
                    unique_fields=["id"],
                    update_fields=_ADVISORY_FIELDS,
                )
                written = [a.id for a in writes]
                AdvisoryPackage.objects.filter(advisory_id__in=written).delete()
                AdvisoryPackage.objects.bulk_create(
                    [
                        AdvisoryPackage(advisory_id=a.id, ecosystem=k.ecosystem, name=k.name[:512])
                        for a in writes
                        for k in _package_keys(a.affected)
                    ],
                    ignore_conflicts=True,
                )
        progress(done=min(start + OSV_BATCH, len(ordered)), total=len(ordered), phase="advisories")
    progress(phase="matching")
    matched = findings_match_packages(keys=changed, actor=Actor.system(f"OSV import {job_id}"))
    counts["packages_changed"] = len(changed)
    counts.update({f"findings_{k}": v for k, v in matched.items()})
    if refused:
        counts["_result"] = {"refused": refused[:100]}
    return counts


_CATALOG_DATE = re.compile(r"^(\d{4})\.(\d{1,2})\.(\d{1,2})")


def _kev_catalog_date(value: str) -> datetime | None:
    """CISA's catalogVersion is the release date, 'YYYY.MM.DD'."""
    match = _CATALOG_DATE.match(value)
    if match is None:
        return None
    try:
        year, month, day = (int(g) for g in match.groups())
        return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None


def _kev_release_date(value: str) -> datetime | None:
    try:
        released = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return released if released.tzinfo else released.replace(tzinfo=UTC)


def kev_catalog_import(
    *, catalog: KevCatalog, progress: ProgressFn, allow_shrink: bool = False
) -> dict[str, Any]:
    """Replace the KEV catalog with this one (an older catalog than the stored one is ignored)
    and refresh KEV membership on findings."""
    limit = _latest_acceptable()
    for name, when in (
        ("catalogVersion", _kev_catalog_date(catalog.catalog_version)),
        ("dateReleased", _kev_release_date(catalog.date_released)),
    ):
        # A catalog "from the future" would make every genuine catalog look older and be
        # skipped from then on.
        if when is not None and when > limit:
            raise FeedRefused(
                f"KEV import refused: {name} {when.date().isoformat()} is in the future"
            )
    advisory_xact_lock(_LOCK_KEV)
    stored = (
        KevEntry.objects.exclude(catalog_version="")
        .order_by("-catalog_version")
        .values_list("catalog_version", flat=True)
        .first()
    )
    if stored and catalog.catalog_version and catalog.catalog_version < stored:
        return {
            "entries": len(catalog.entries),
            "skipped_older_catalog": 1,
            "_result": {"catalog_version": catalog.catalog_version, "stored": stored},
        }
    current = KevEntry.objects.count()
    kept = len({e.cve_id for e in catalog.entries})
    if (
        current
        and kept < current * (1 - settings.TRUSTRANK_FEED_KEV_MAX_SHRINK)
        and not allow_shrink
    ):
        raise FeedRefused(
            f"KEV import refused: the catalog has {kept} entries where {current} are stored "
            f"(more than {settings.TRUSTRANK_FEED_KEV_MAX_SHRINK:.0%} would be removed). If "
            "that is right, import it again with --allow-shrink (allow_shrink=true on the API)."
        )
    now = timezone.now()
    progress(done=0, total=len(catalog.entries), phase="kev")
    objs = {
        e.cve_id: KevEntry(
            cve_id=e.cve_id,
            vendor_project=e.vendor_project[:255],
            product=e.product[:255],
            vulnerability_name=e.vulnerability_name,
            date_added=e.date_added,
            short_description=e.short_description,
            required_action=e.required_action,
            due_date=e.due_date,
            known_ransomware_campaign_use=e.known_ransomware_campaign_use[:32],
            notes=e.notes,
            cwes=list(e.cwes),
            catalog_version=catalog.catalog_version[:32],
            updated_at=now,
        )
        for e in catalog.entries
    }
    known = set(KevEntry.objects.values_list("cve_id", flat=True))
    KevEntry.objects.bulk_create(
        list(objs.values()),
        update_conflicts=True,
        unique_fields=["cve_id"],
        update_fields=[
            "vendor_project",
            "product",
            "vulnerability_name",
            "date_added",
            "short_description",
            "required_action",
            "due_date",
            "known_ransomware_campaign_use",
            "notes",
            "cwes",
            "catalog_version",
            "updated_at",
        ],
        batch_size=2000,
    )
    # The catalog is published whole: an entry CISA removed is no longer known-exploited.
    removed, _ = KevEntry.objects.exclude(cve_id__in=list(objs)).delete()
    progress(done=len(objs), total=len(objs), phase="findings")
    refreshed = findings_refresh_exploit_data()
    added = sorted(set(objs) - known)
    notify_kev_added(cve_ids=added)  # one row; the worker finds the teams they hit
    return {
        "entries": len(objs),
        "added": len(added),
        "removed": removed,
        **refreshed,
        "_result": {"catalog_version": catalog.catalog_version},
    }


def epss_scores_import(*, parsed: EpssFile, progress: ProgressFn) -> dict[str, Any]:
    """Store one day of EPSS scores (history by date) and move the latest score forward."""
    if parsed.score_date > _latest_acceptable().date():
        # A future score date would stay "latest" over every genuine file after it.
        raise FeedRefused(
            f"EPSS import refused: score_date {parsed.score_date.isoformat()} is in the future"
        )
    advisory_xact_lock(_LOCK_EPSS)
    progress(done=0, total=len(parsed.rows), phase="epss")
    with connection.cursor() as cur:
        cur.execute(
            "CREATE TEMP TABLE IF NOT EXISTS vulns_epss_in "
            "(cve_id text, epss double precision, percentile double precision) ON COMMIT DROP"
        )
        cur.execute("TRUNCATE vulns_epss_in")
        with cur.cursor.copy("COPY vulns_epss_in (cve_id, epss, percentile) FROM STDIN") as copy:
            for row in parsed.rows:
                copy.write_row(row)
        # DISTINCT ON: a CVE listed twice in one file must not hit ON CONFLICT twice.
        cur.execute(
            """
            INSERT INTO vulns_epssscore (cve_id, score_date, epss, percentile, model_version)
            SELECT DISTINCT ON (cve_id) cve_id, %s, epss, percentile, %s FROM vulns_epss_in
            ORDER BY cve_id
            ON CONFLICT (cve_id, score_date) DO UPDATE
              SET epss = EXCLUDED.epss, percentile = EXCLUDED.percentile,
                  model_version = EXCLUDED.model_version
            """,
            [parsed.score_date, parsed.model_version[:32]],
        )
        stored = cur.rowcount
        cur.execute(
            """
            INSERT INTO vulns_epsslatest (cve_id, score_date, epss, percentile, model_version)
            SELECT DISTINCT ON (cve_id) cve_id, %s, epss, percentile, %s FROM vulns_epss_in
            ORDER BY cve_id
            ON CONFLICT (cve_id) DO UPDATE
              SET score_date = EXCLUDED.score_date, epss = EXCLUDED.epss,
                  percentile = EXCLUDED.percentile, model_version = EXCLUDED.model_version
              WHERE vulns_epsslatest.score_date <= EXCLUDED.score_date
            """,
            [parsed.score_date, parsed.model_version[:32]],
        )
        latest = cur.rowcount
    progress(done=len(parsed.rows), total=len(parsed.rows), phase="findings")
    refreshed = findings_refresh_exploit_data()
    return {
        "rows": len(parsed.rows),
        "stored": stored,
        "latest_moved": latest,
        **refreshed,
        "_result": {
            "score_date": parsed.score_date.isoformat(),
            "model_version": parsed.model_version,
        },
    }


# --- starting imports ----------------------------------------------------------------------------

FEED_KINDS = ("osv", "kev", "epss", "nvd")


class FeedSourceError(ValueError):
    pass


def feed_payload_read(*, kind: str, path: str) -> tuple[bytes, str]:
    """The bytes one import job stores for a file, a directory or a zip.

    A directory of OSV records is packed into one zip, so the job keeps one payload and the
    worker never reads the submitter's filesystem.
    """
    import io
    import zipfile
    from pathlib import Path

    if kind not in FEED_KINDS:
        raise FeedSourceError(f"unknown feed {kind!r}: use one of {', '.join(FEED_KINDS)}")
    p = Path(path)
    if p.is_dir():
        if kind != "osv":
            raise FeedSourceError(f"{path} is a directory; a {kind} import takes one file")
        files = sorted(f for f in p.rglob("*.json") if f.is_file())
        if not files:
            raise FeedSourceError(f"{path} holds no .json OSV records")
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for f in files:
                archive.write(f, arcname=str(f.relative_to(p)))
        return buf.getvalue(), f"{p.name}.zip"
    if not p.is_file():
        raise FeedSourceError(f"{path} is neither a file nor a directory")
    return p.read_bytes(), p.name


def feed_fetch(*, kind: str, source: str, timeout: float = 120.0) -> tuple[bytes, str]:
    """Read a configured feed source: an http(s) URL or a local path."""
    if source.startswith(("http://", "https://")):
        import urllib.request

        with urllib.request.urlopen(source, timeout=timeout) as resp:  # noqa: S310 - http(s) only
            return resp.read(), source.rsplit("/", 1)[-1] or kind
    return feed_payload_read(kind=kind, path=source)


def feeds_team() -> Any:
    """The team that owns imports nobody in particular started (command, schedule)."""
    from django.conf import settings

    from trustrank.accounts.models import Team

    team, _ = Team.objects.get_or_create(name=settings.TRUSTRANK_FEEDS_TEAM)
    return team
