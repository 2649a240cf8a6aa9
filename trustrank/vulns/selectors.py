"""Reads of the vulnerability feeds behind a finding: its advisories, KEV entry, EPSS history.
Findings themselves are read through trustrank.findings.selectors."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from trustrank.findings.models import Finding
from trustrank.vulns.models import Advisory, EpssScore, KevEntry


def kev_entry_for(*, cve_id: str) -> KevEntry | None:
    return KevEntry.objects.filter(cve_id=cve_id).first() if cve_id else None


def epss_history_for(*, cve_id: str, limit: int = 90) -> list[EpssScore]:
    if not cve_id:
        return []
    return list(EpssScore.objects.filter(cve_id=cve_id).order_by("-score_date")[:limit])


def advisories_for_finding(*, finding: Finding) -> list[Advisory]:
    """Every stored advisory of the finding's alias group (GHSA, PYSEC, GO… for one CVE)."""
    ids = list(finding.aliases or [finding.vuln_id])
    return list(
        Advisory.objects.filter(Q(id__in=ids) | Q(aliases__overlap=ids)).order_by("id")[:20]
    )


def affected_for_package(
    *, advisory: Advisory, ecosystem: str, package_name: str
) -> list[dict[str, Any]]:
    """The advisory's `affected` entries for the finding's package (ranges, versions)."""
    from trustrank.vulns.engine.ecosystems import advisory_package_key

    out = []
    for entry in advisory.affected or []:
        pkg = entry.get("package") or {}
        if not pkg:
            continue
        key = advisory_package_key(ecosystem=pkg.get("ecosystem", ""), name=pkg.get("name", ""))
        if key.ecosystem == ecosystem and key.name == package_name:
            out.append(entry)
    return out
