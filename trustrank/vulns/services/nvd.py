"""NVD severities: importing NVD CVE API 2.0 pages (ingest/loaders/feeds.py parses the job's
payload and streams the CVEs here), and giving their CVSS to the vulnerability findings
whose advisory carries none.

Where a finding's severity comes from (`Finding.severity_source`): the advisory's CVSS
always wins; NVD's score of the finding's CVE is taken only when neither the advisory nor
the SBOM gives one (a Go or PyPI advisory has none), and replaces a bare severity label.
Applied when a finding is matched (`nvd_severities_for`, read by the matching service) and
after each import to the findings that already exist (`findings_apply_nvd`, set-based).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connection
from django.utils import timezone

from trustrank.lib.locks import advisory_xact_lock
from trustrank.parsers.nvd import NvdCve
from trustrank.vulns.models import NvdSeverity

log = logging.getLogger(__name__)

ProgressFn = Callable[..., None]
# pg_advisory_xact_lock key: one NVD importer at a time (the other feeds use 7_310_00x).
_LOCK_NVD = 7_310_004
PROGRESS_EVERY = 5_000
# How many CVEs whose stated baseScore differs from their vector's are named in the result.
MISMATCHES_SHOWN = 50


def nvd_severities_for(cves: Iterable[str]) -> dict[str, tuple[float, str, str]]:
    """CVE -> (score, vector, severity label) of the CVEs NVD has scored."""
    out: dict[str, tuple[float, str, str]] = {}
    ordered = sorted(set(cves))
    for i in range(0, len(ordered), 5000):
        for cve, score, vector, label in NvdSeverity.objects.filter(
            cve_id__in=ordered[i : i + 5000]
        ).values_list("cve_id", "score", "vector", "severity"):
            out[cve] = (score, vector, label)
    return out


_APPLY_SQL = """
UPDATE findings_finding f
   SET severity = n.severity, severity_score = n.score, cvss_score = n.score,
       cvss_vector = n.vector, severity_source = 'nvd', updated_at = now()
  FROM vulns_nvdseverity n
 WHERE n.cve_id = f.cve_id AND f.cve_id <> '' AND f.kind = 'vulnerability'
   -- Only findings without a CVSS of their own (advisory, SBOM), or NVD's already.
   AND (f.severity_source = 'nvd'
        OR (f.cvss_score IS NULL AND f.severity_source IN ('', 'label')))
   AND (f.severity_source <> 'nvd' OR f.cvss_score IS DISTINCT FROM n.score
        OR f.cvss_vector <> n.vector OR f.severity <> n.severity)
   {only}
"""


def findings_apply_nvd(*, only_imported: bool = False) -> int:
    """Give NVD's severity to every vulnerability finding whose advisory has no CVSS, in one
    UPDATE … FROM (indexed on the finding's CVE); with `only_imported`, only the CVEs of the
    import running in this transaction (its temporary table). Returns the rows changed."""
    only = "AND n.cve_id IN (SELECT cve_id FROM vulns_nvd_in)" if only_imported else ""
    with connection.cursor() as cur:
        cur.execute(_APPLY_SQL.format(only=only))
        return int(cur.rowcount)


def _copy_rows(
    cur: Any, cves: Iterable[NvdCve], progress: ProgressFn, counts: dict[str, Any]
) -> list[str]:
    mismatches: list[str] = []
    with cur.cursor.copy(
        "COPY vulns_nvd_in (cve_id, version, vector, score, severity, source, source_type, "
        "published, last_modified) FROM STDIN"
    ) as copy:
        for cve in cves:
            counts["cves"] += 1
            s = cve.severity
            if s is None:
                counts["without_cvss"] += 1
            else:
                copy.write_row((
                    s.cve_id, s.version, s.vector[:255], s.score, s.severity, s.source,
                    s.source_type, s.published, s.last_modified,
                ))
                counts["with_cvss"] += 1
                counts[f"cvss_v{s.version}"] = counts.get(f"cvss_v{s.version}", 0) + 1
                if s.score_mismatch:
                    counts["score_mismatches"] += 1
                    if len(mismatches) < MISMATCHES_SHOWN:
                        mismatches.append(
                            f"{s.cve_id}: NVD states {s.stated_score:g}, "
                            f"{s.vector} gives {s.score:g}"
                        )
            if counts["cves"] % PROGRESS_EVERY == 0:
                progress(done=counts["cves"], phase="nvd")
    return mismatches


def nvd_severities_import(
    *, pages: Iterable[Iterable[NvdCve]], progress: ProgressFn
) -> dict[str, Any]:
    """Upsert NVD's severity per CVE from one or more pages (a newer `lastModified` wins, an
    older record is ignored), then bring the findings of those CVEs in line.

    Run inside one transaction (the job's): the CVEs stream through COPY into a temporary
    table, so a page that turns out bad half-way stores nothing, and a large page is never
    held in memory whole."""
    advisory_xact_lock(_LOCK_NVD)
    counts: dict[str, Any] = {
        "cves": 0, "with_cvss": 0, "without_cvss": 0, "score_mismatches": 0,
    }
    mismatches: list[str] = []
    progress(done=0, phase="nvd")
    with connection.cursor() as cur:
        cur.execute(
            "CREATE TEMP TABLE IF NOT EXISTS vulns_nvd_in (cve_id text, version text, "
            "vector text, score double precision, severity text, source text, "
            "source_type text, published timestamptz, last_modified timestamptz) "
            "ON COMMIT DROP"
        )
        cur.execute("TRUNCATE vulns_nvd_in")
        for page in pages:
            mismatches += _copy_rows(cur, page, progress, counts)
        cur.execute("ANALYZE vulns_nvd_in")
        # DISTINCT ON: a CVE on two pages must not hit ON CONFLICT twice; the newest wins.
        cur.execute(
            """
            INSERT INTO vulns_nvdseverity (cve_id, version, vector, score, severity, source,
                                           source_type, published, last_modified, updated_at)
            SELECT DISTINCT ON (cve_id) cve_id, version, vector, score, severity, source,
                   source_type, published, last_modified, %s
              FROM vulns_nvd_in
             ORDER BY cve_id, last_modified DESC NULLS LAST
            ON CONFLICT (cve_id) DO UPDATE
               SET version = EXCLUDED.version, vector = EXCLUDED.vector,
                   score = EXCLUDED.score, severity = EXCLUDED.severity,
                   source = EXCLUDED.source, source_type = EXCLUDED.source_type,
                   published = EXCLUDED.published, last_modified = EXCLUDED.last_modified,
                   updated_at = EXCLUDED.updated_at
             WHERE vulns_nvdseverity.last_modified IS NULL
                OR EXCLUDED.last_modified IS NULL
                OR vulns_nvdseverity.last_modified <= EXCLUDED.last_modified
            """,
            [timezone.now()],
        )
        counts["stored"] = cur.rowcount
    progress(done=counts["cves"], total=counts["cves"], phase="findings")
    counts["findings_updated"] = findings_apply_nvd(only_imported=True)
    if mismatches:
        log.warning("NVD import: %d CVEs state a baseScore their vector does not give",
                    counts["score_mismatches"])
        counts["_result"] = {"score_mismatches": mismatches}
    return counts
