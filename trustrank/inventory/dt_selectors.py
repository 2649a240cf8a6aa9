"""Reads for the Dependency-Track compatible API (dt_apis.py).

A Dependency-Track "project" is a name + version pair: here a ProjectVersion, whose uuid the
BOM upload's `project` parameter already takes. Its findings are the vulnerability findings
of that version that the current inventory still holds (an auto-resolved finding's
component or advisory is gone, as Dependency-Track drops such a finding), in TrustRank's rank
order. A finding a person closed (resolved, false positive, not affected) is what
Dependency-Track calls suppressed: listed only with `suppressed=true` and left out of the
metrics' severity counts, as Dependency-Track does.
"""

from __future__ import annotations

import uuid as uuid_module
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES, FindingKind
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.inventory.models import ProjectVersion, Sbom
from trustrank.inventory.selectors import QUEUE_ORDER

# Audit actions by which a person (or a bulk change) set a finding's triage: until one, an
# untouched `in_triage` finding is Dependency-Track's NOT_SET.
TRIAGE_ACTIONS = ("state_changed", "triage_changed", "bulk_triaged")

# Dependency-Track's vulnerability sources, told apart by the id's prefix as Dependency-Track
# names them (an OSV mirror stores GHSA ids under GITHUB and CVEs under NVD).
SOURCE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("CVE-", "NVD"),
    ("GHSA-", "GITHUB"),
    ("SNYK-", "SNYK"),
    ("sonatype-", "OSSINDEX"),
    ("OSSINDEX-", "OSSINDEX"),
)
SOURCES = ("NVD", "GITHUB", "VULNDB", "OSSINDEX", "INTERNAL", "OSV", "SNYK", "CX", "UNKNOWN")

# The columns one finding row needs (one query, no per-row reads).
_ROW_FIELDS = (
    "id",
    "state",
    "severity",
    "cvss_score",
    "epss",
    "epss_percentile",
    "in_kev",
    "vuln_id",
    "cve_id",
    "aliases",
    "title",
    "detail",
    "source",
    "justification",
    "first_seen",
    "component_key",
    "component_name",
    "component_version",
    "component_purl",
    "component__group",
    "advisory__published",
    "advisory__raw__database_specific__cwe_ids",
    "ranked__score",
    "ranked__decision",
    "triaged",
)


def vuln_source(*, vuln_id: str, finding_source: str) -> str:
    """Dependency-Track's source name for a vulnerability id."""
    for prefix, source in SOURCE_PREFIXES:
        if vuln_id.startswith(prefix):
            return source
    return "OSV" if finding_source == "osv" else "INTERNAL"


def _source_condition(source: str) -> Q:
    prefixes = [p for p, s in SOURCE_PREFIXES if s == source]
    if prefixes:
        cond = Q()
        for p in prefixes:
            cond |= Q(vuln_id__startswith=p)
        return cond
    known = Q()
    for p, _s in SOURCE_PREFIXES:
        known |= Q(vuln_id__startswith=p)
    if source == "OSV":
        return Q(source="osv") & ~known
    if source == "INTERNAL":
        return ~Q(source="osv") & ~known
    return Q(pk__in=[])


def dt_project_versions(*, principal: Principal) -> QuerySet[ProjectVersion]:
    """The principal's project versions with what a Dependency-Track project shows."""
    newer = ProjectVersion.objects.filter(
        project_id=OuterRef("project_id"), created_at__gt=OuterRef("created_at")
    )
    return (
        ProjectVersion.objects.filter(project__team_id__in=principal.team_ids)
        .select_related("project", "current_sbom")
        .annotate(is_latest=~Exists(newer))
        .order_by("project__name", "version", "pk")
    )


def dt_project_get(*, principal: Principal, uuid: uuid_module.UUID) -> ProjectVersion:
    """The one access helper for a Dependency-Track project: 404 outside the principal's
    teams."""
    pv = dt_project_versions(principal=principal).filter(uuid=uuid).first()
    if pv is None:
        raise Http404("The project could not be found.")
    return pv


def dt_project_lookup(*, principal: Principal, name: str, version: str) -> ProjectVersion:
    """By name and version (blank: the version without one). A name two of the principal's
    teams use answers the oldest."""
    pv = (
        dt_project_versions(principal=principal)
        .filter(project__name=name, version=version)
        .order_by("project__created_at", "pk")
        .first()
    )
    if pv is None:
        raise Http404("The project could not be found.")
    return pv


def dt_finding_rows(
    *, project_version: ProjectVersion, suppressed: bool = False, source: str | None = None
) -> list[dict[str, Any]]:
    """The project version's findings as plain rows, in rank order (the unranked after the
    ranked, by baseline priority): one query. Suppressed (closed) ones only if asked."""
    qs = Finding.objects.filter(
        project_version=project_version, kind=FindingKind.VULNERABILITY, auto_resolved=False
    )
    if not suppressed:
        qs = qs.filter(state__in=OPEN_STATES)
    if source:
        qs = qs.filter(_source_condition(source))
    triaged = AuditEvent.objects.filter(finding_id=OuterRef("pk"), action__in=TRIAGE_ACTIONS)
    qs = qs.annotate(triaged=Exists(triaged)).order_by(*QUEUE_ORDER)
    return list(qs.values(*_ROW_FIELDS))


def sbom_analysis_pending(*, sbom_id: Any) -> bool:
    """Whether vulnerability matching has yet to cover this SBOM: it is its version's current
    inventory and no whole match has run since it was stored. (A superseded SBOM is never
    matched; its upload is done.)"""
    if sbom_id in (None, ""):
        return False
    return Sbom.objects.filter(
        pk=sbom_id,
        matched_at__isnull=True,
        project_version__current_sbom_id=F("pk"),
    ).exists()
