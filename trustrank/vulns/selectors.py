"""Reads for findings and feeds. Every finding query is scoped to the principal's teams."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.vulns.models import (
    Advisory,
    AuditEvent,
    EpssScore,
    Finding,
    FindingComment,
    KevEntry,
)
from trustrank.vulns.services.findings import SUBJECT

# Counting stops here on the list page: "10,000+" is as useful as the exact figure and
# costs a bounded index scan instead of a full count over a million rows.
COUNT_CAP = 10_000


def finding_list(*, principal: Principal) -> QuerySet[Finding]:
    return (
        Finding.objects.filter(team_id__in=principal.team_ids)
        .select_related("project", "project_version")
        .order_by("-baseline_priority", "-id")
    )


def finding_get(*, principal: Principal, finding_id: Any) -> Finding:
    try:
        pk = int(finding_id)
    except (TypeError, ValueError) as exc:
        raise Http404("no such finding") from exc
    finding = (
        Finding.objects.filter(pk=pk, team_id__in=principal.team_ids)
        .select_related("project", "project_version", "advisory", "component")
        .first()
    )
    if finding is None:
        raise Http404("no such finding")
    return finding


def finding_audit_trail(*, finding: Finding) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(
        subject_type=SUBJECT, subject_id=finding.pk, team_id=finding.team_id
    ).order_by("created_at", "id")


def finding_comments(*, finding: Finding) -> QuerySet[FindingComment]:
    return FindingComment.objects.filter(finding=finding).order_by("created_at", "id")


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


def capped_count(qs: QuerySet[Any], *, cap: int = COUNT_CAP) -> tuple[int, bool]:
    """(count, capped): counts at most cap + 1 rows."""
    n = qs.order_by()[: cap + 1].count()
    return min(n, cap), n > cap
