"""Matching components to advisories, keeping findings in step, and triage.

Matching runs per project version: after each SBOM load for all of its components, and after
a feed import only for the packages whose advisories changed. The project version row is
locked for the duration, so an SBOM load and a feed import never match one version at once.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from packageurl import PackageURL

from trustrank.accounts.principal import Principal
from trustrank.inventory.models import Component, ProjectVersion, Sbom
from trustrank.parsers.cvss import severity_label
from trustrank.parsers.cyclonedx_vulns import EmbeddedVulnerability, vulnerability_from_json
from trustrank.vulns.engine.ecosystems import PackageKey, component_package
from trustrank.vulns.engine.matching import (
    AdvisoryIndex,
    AdvisoryRef,
    Match,
    Verdict,
    affected_from_osv,
    alias_groups,
    canonical_id,
)
from trustrank.vulns.models import (
    OPEN_STATES,
    Advisory,
    AdvisoryPackage,
    AuditEvent,
    ComponentPackage,
    EpssLatest,
    Finding,
    FindingComment,
    FindingSource,
    Justification,
    KevEntry,
    MatchStatus,
    TriageState,
)
from trustrank.vulns.services.audit import Actor, audit_event_record

log = logging.getLogger(__name__)

SUBJECT = "vulns.finding"
# Stand-in CVSS when an advisory gives only a label (or nothing): keeps the order sensible.
LABEL_SCORES = {"critical": 9.5, "high": 8.0, "medium": 5.5, "low": 2.5, "none": 0.0}
UNKNOWN_SCORE = 5.0
_FINDING_UPDATE_FIELDS = [
    "component",
    "component_purl",
    "component_name",
    "component_version",
    "ecosystem",
    "package_name",
    "advisory",
    "vuln_id",
    "aliases",
    "cve_id",
    "title",
    "match_status",
    "match_reason",
    "fixed_versions",
    "cvss_score",
    "severity",
    "severity_score",
    "in_kev",
    "kev_date_added",
    "epss",
    "epss_percentile",
    "vex_evidence",
    "last_seen",
    "source",
    "updated_at",
]


# --- component identity --------------------------------------------------------------------


def component_key(*, purl: str, group: str, name: str, version: str) -> str:
    """What makes "the same component" across two SBOMs of a project version: its purl
    without qualifiers (tools disagree on ?type=jar), else group/name@version."""
    if purl:
        try:
            p = PackageURL.from_string(purl)
            return PackageURL(
                type=p.type, namespace=p.namespace, name=p.name, version=p.version
            ).to_string()
        except ValueError:
            return purl
    return f"{group}/{name}@{version}" if group else f"{name}@{version}"


def finding_fingerprint(*, project_version_id: int, component_key: str, vuln_key: str) -> str:
    return hashlib.sha256(
        f"{project_version_id}\x1f{component_key}\x1f{vuln_key}".encode()
    ).hexdigest()


# --- what the matcher wants to exist ---------------------------------------------------------


@dataclass
class _Row:
    component_id: int
    key: str
    purl: str
    name: str
    version: str
    package: PackageKey | None


@dataclass
class _Desired:
    """One finding the current inventory and feeds call for."""

    row: _Row
    ids: set[str]
    matches: list[Match] = field(default_factory=list)
    embedded: list[EmbeddedVulnerability] = field(default_factory=list)


def embedded_vulnerabilities(sbom: Sbom) -> list[EmbeddedVulnerability]:
    """The SBOM's own `vulnerabilities` (VDR/VEX), as parsed when it was loaded."""
    return [vulnerability_from_json(v) for v in sbom.vulnerabilities or ()]


# --- the match -------------------------------------------------------------------------------


@dataclass
class MatchCounts:
    components: int = 0
    advisories_considered: int = 0
    created: int = 0
    updated: int = 0
    reopened: int = 0
    resolved: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def _advisories_for(keys: set[PackageKey]) -> list[dict[str, Any]]:
    if not keys:
        return []
    ids: set[str] = set()
    by_eco: dict[str, set[str]] = defaultdict(set)
    for k in keys:
        by_eco[k.ecosystem].add(k.name)
    for eco, names in by_eco.items():
        name_list = sorted(names)
        for i in range(0, len(name_list), 1000):
            ids.update(
                AdvisoryPackage.objects.filter(
                    ecosystem=eco, name__in=name_list[i : i + 1000]
                ).values_list("advisory_id", flat=True)
            )
    fields = (
        "id",
        "aliases",
        "affected",
        "withdrawn",
        "cve_id",
        "summary",
        "cvss_score",
        "severity_label",
        "modified",
    )
    ordered = sorted(ids)
    out: list[dict[str, Any]] = []
    for i in range(0, len(ordered), 5000):
        out.extend(Advisory.objects.filter(id__in=ordered[i : i + 5000]).values(*fields))
    return out


def _exploit_data(cves: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    kev: dict[str, Any] = {}
    epss: dict[str, Any] = {}
    ordered = sorted(cves)
    for i in range(0, len(ordered), 5000):
        chunk = ordered[i : i + 5000]
        kev.update(KevEntry.objects.filter(cve_id__in=chunk).values_list("cve_id", "date_added"))
        for c, e, p in EpssLatest.objects.filter(cve_id__in=chunk).values_list(
            "cve_id", "epss", "percentile"
        ):
            epss[c] = (e, p)
    return kev, epss


def findings_match_project_version(
    *,
    project_version_id: int,
    only_packages: set[PackageKey] | None = None,
    actor: Actor | None = None,
    now: datetime | None = None,
) -> dict[str, int]:
    """Bring the findings of one project version in line with its current SBOM and the feeds.

    With `only_packages`, only components of those packages are re-evaluated (a feed update);
    otherwise the whole inventory, including the SBOM's embedded vulnerabilities.
    """
    now = now or timezone.now()
    actor = actor or Actor.system("matching")
    counts = MatchCounts()
    with transaction.atomic():
        pv = (
            ProjectVersion.objects.select_for_update()
            .select_related("project")
            .filter(pk=project_version_id)
            .first()
        )
        if pv is None:
            return counts.as_dict()
        sbom = Sbom.objects.filter(pk=pv.current_sbom_id).first() if pv.current_sbom_id else None
        rows: list[_Row] = []
        if sbom is not None:
            for cid, purl, group, name, version in Component.objects.filter(
                sbom_id=sbom.pk
            ).values_list("id", "purl", "group", "name", "version"):
                pkg = component_package(purl) if purl else None
                rows.append(
                    _Row(
                        component_id=cid,
                        key=component_key(purl=purl, group=group, name=name, version=version),
                        purl=purl,
                        name=name,
                        version=version,
                        package=pkg.key if pkg else None,
                    )
                )
            if only_packages is None:
                _index_components(sbom_id=sbom.pk, rows=rows)
        counts.components = len(rows)
        present_keys = {r.key for r in rows}

        if only_packages is not None:
            wanted = [r for r in rows if r.package is not None and r.package in only_packages]
        else:
            wanted = [r for r in rows if r.package is not None]
        advisories = _advisories_for({r.package for r in wanted if r.package})
        counts.advisories_considered = len(advisories)
        adv_by_id = {a["id"]: a for a in advisories}
        index = AdvisoryIndex.build(
            AdvisoryRef(
                id=a["id"],
                aliases=tuple(a["aliases"]),
                affected=tuple(affected_from_osv(x) for x in a["affected"]),
                withdrawn=a["withdrawn"] is not None,
            )
            for a in advisories
        )
        # Per component: the OSV matches and embedded vulnerabilities, grouped by alias.
        per_row: dict[int, list[tuple[set[str], Any]]] = defaultdict(list)
        row_by_id = {r.component_id: r for r in rows}
        for r in wanted:
            pkg = component_package(r.purl)
            if pkg is None:
                continue
            for m in index.match_package(r.component_id, pkg, r.version):
                a = adv_by_id[m.advisory_id]
                per_row[r.component_id].append(({a["id"], *a["aliases"]}, m))
        if only_packages is None and sbom is not None:
            by_ref: dict[str, int] = {}
            for cid, bom_ref, purl in Component.objects.filter(sbom_id=sbom.pk).values_list(
                "id", "bom_ref", "purl"
            ):
                if bom_ref:
                    by_ref.setdefault(bom_ref, cid)
                if purl:
                    by_ref.setdefault(purl, cid)
            for vuln in embedded_vulnerabilities(sbom):
                for ref in vuln.affects:
                    target = by_ref.get(ref)
                    if target is not None:
                        per_row[target].append(({vuln.id, *vuln.aliases}, vuln))

        desired: dict[str, _Desired] = {}
        for cid, items in per_row.items():
            row = row_by_id[cid]
            for alias_ids, members in alias_groups(items):
                vuln_key = canonical_id(alias_ids)
                fp = finding_fingerprint(
                    project_version_id=pv.pk, component_key=row.key, vuln_key=vuln_key
                )
                d = desired.get(fp) or _Desired(row=row, ids=set())
                d.ids |= alias_ids
                for item in members:
                    (d.matches if isinstance(item, Match) else d.embedded).append(item)
                desired[fp] = d

        all_cves = {canonical_id(d.ids) for d in desired.values()}
        kev, epss = _exploit_data({c for c in all_cves if c.startswith("CVE-")})

        # Filtered here rather than in SQL: a big feed import changes tens of thousands of
        # packages, far more than one query may carry as parameters.
        existing = {
            f.fingerprint: f
            for f in Finding.objects.filter(project_version=pv)
            if only_packages is None or PackageKey(f.ecosystem, f.package_name) in only_packages
        }

        to_create: list[Finding] = []
        to_update: list[Finding] = []
        events: list[AuditEvent] = []
        for fp, d in desired.items():
            values = _finding_values(d, adv_by_id=adv_by_id, kev=kev, epss=epss)
            f = existing.get(fp)
            if f is None:
                f = Finding(
                    team_id=pv.project.team_id,
                    fingerprint=fp,
                    project_id=pv.project_id,
                    project_version_id=pv.pk,
                    component_key=d.row.key,
                    first_seen=now,
                    **values,
                    last_seen=now,
                )
                analysis = _vex_analysis(d)
                if analysis is not None:
                    f.state = analysis.state
                    f.justification = (
                        analysis.justification
                        if analysis.justification in Justification.values
                        else ""
                    )
                    f.response = list(analysis.response)
                    f.detail = analysis.detail
                to_create.append(f)
                continue
            for name, value in values.items():
                setattr(f, name, value)
            f.last_seen = now
            f.updated_at = now
            to_update.append(f)
            if f.auto_resolved and f.state == TriageState.RESOLVED:
                before = _state_of(f)
                f.state = TriageState.IN_TRIAGE
                f.resolved_at = None
                f.auto_resolved = False
                counts.reopened += 1
                events.append(
                    _event(
                        f,
                        "reopened",
                        actor,
                        before,
                        _state_of(f),
                        now,
                        f"{f.component_name}@{f.component_version} is affected again "
                        f"({f.match_reason or 'reported by the SBOM'})",
                    )
                )

        Finding.objects.bulk_create(to_create, batch_size=500)
        counts.created = len(to_create)
        for f in to_create:
            events.append(
                _event(
                    f,
                    "created",
                    actor,
                    {},
                    {**_state_of(f), "match_status": f.match_status},
                    now,
                    _created_reason(f),
                )
            )
        # Resolve what is no longer there: the component left the SBOM, or the advisory no
        # longer covers its version (withdrawn, ranges changed).
        for fp, f in existing.items():
            if fp in desired or f.state not in OPEN_STATES:
                continue
            if only_packages is not None and f.vex_evidence.get("vulnerability"):
                continue  # still reported by the SBOM itself; a feed update cannot clear that
            before = _state_of(f)
            f.state = TriageState.RESOLVED
            f.resolved_at = now
            f.auto_resolved = True
            f.updated_at = now
            to_update.append(f)
            counts.resolved += 1
            events.append(
                _event(
                    f,
                    "auto_resolved",
                    actor,
                    before,
                    _state_of(f),
                    now,
                    _resolution_reason(
                        f, present_keys=present_keys, sbom=sbom, pv=pv, adv_by_id=adv_by_id
                    ),
                )
            )
        if to_update:
            Finding.objects.bulk_update(
                to_update,
                [*_FINDING_UPDATE_FIELDS, "state", "resolved_at", "auto_resolved"],
                batch_size=500,
            )
        counts.updated = len(to_update) - counts.resolved
        AuditEvent.objects.bulk_create(events, batch_size=1000)
    return counts.as_dict()


def _index_components(*, sbom_id: int, rows: list[_Row]) -> None:
    objs = [
        ComponentPackage(
            component_id=r.component_id,
            sbom_id=sbom_id,
            ecosystem=r.package.ecosystem,
            name=r.package.name[:512],
        )
        for r in rows
        if r.package is not None
    ]
    ComponentPackage.objects.bulk_create(objs, batch_size=1000, ignore_conflicts=True)


def _vex_analysis(d: _Desired) -> Any:
    for vuln in d.embedded:
        if vuln.analysis is not None:
            return vuln.analysis
    return None


def _finding_values(
    d: _Desired, *, adv_by_id: dict[str, dict[str, Any]], kev: dict[str, Any], epss: dict[str, Any]
) -> dict[str, Any]:
    ids = sorted(d.ids)
    vuln_key = canonical_id(ids)
    affected = [m for m in d.matches if m.verdict is Verdict.AFFECTED]
    chosen: Match | None = (affected or d.matches)[0] if (affected or d.matches) else None
    adv = adv_by_id.get(chosen.advisory_id) if chosen is not None else None
    # The advisory with a score beats one without, for what the finding shows.
    for m in d.matches:
        other = adv_by_id[m.advisory_id]
        if adv is None or (adv["cvss_score"] is None and other["cvss_score"] is not None):
            adv = other
    embedded = d.embedded[0] if d.embedded else None
    cvss = adv["cvss_score"] if adv else None
    label = adv["severity_label"] if adv else ""
    if cvss is None and embedded is not None and embedded.best_score is not None:
        cvss = embedded.best_score
    if not label or label == "unknown":
        label = severity_label(cvss, embedded.best_severity if embedded else "")
    if chosen is not None:
        status = MatchStatus.AFFECTED if affected else MatchStatus.UNKNOWN
        reason = (affected[0] if affected else chosen).reason
    else:
        status, reason = MatchStatus.REPORTED, "listed in the SBOM's vulnerabilities"
    fixed: list[str] = []
    for m in d.matches:
        fixed.extend(v for v in m.fixed if v not in fixed)
    kev_date = kev.get(vuln_key)
    epss_pair = epss.get(vuln_key)
    row = d.row
    return {
        "component_id": row.component_id,
        "component_purl": row.purl[:2048],
        "component_name": row.name[:512],
        "component_version": row.version[:255],
        "ecosystem": row.package.ecosystem if row.package else "",
        "package_name": row.package.name[:512] if row.package else "",
        "advisory_id": adv["id"] if adv else None,
        "vuln_id": vuln_key[:128],
        "aliases": ids,
        "cve_id": vuln_key if vuln_key.startswith("CVE-") else "",
        "title": (adv["summary"] if adv else "")
        or (embedded.description[:500] if embedded else ""),
        "match_status": status,
        "match_reason": reason,
        "fixed_versions": fixed,
        "cvss_score": cvss,
        "severity": label or "unknown",
        "severity_score": cvss if cvss is not None else LABEL_SCORES.get(label, UNKNOWN_SCORE),
        "in_kev": kev_date is not None,
        "kev_date_added": kev_date,
        "epss": epss_pair[0] if epss_pair else None,
        "epss_percentile": epss_pair[1] if epss_pair else None,
        "vex_evidence": _evidence(d.embedded),
        "source": FindingSource.OSV if d.matches else FindingSource.SBOM,
    }


def _evidence(embedded: list[EmbeddedVulnerability]) -> dict[str, Any]:
    if not embedded:
        return {}
    v = embedded[0]
    return {
        "vulnerability": v.raw,
        "analysis": v.analysis.as_dict() if v.analysis else None,
        "source": v.source,
    }


def _state_of(f: Finding) -> dict[str, Any]:
    return {
        "state": f.state,
        "justification": f.justification,
        "response": list(f.response or []),
        "detail": f.detail,
    }


def _event(
    f: Finding,
    action: str,
    actor: Actor,
    before: dict[str, Any],
    after: dict[str, Any],
    at: datetime,
    reason: str,
) -> AuditEvent:
    return AuditEvent(
        team_id=f.team_id,
        subject_type=SUBJECT,
        subject_id=f.pk,
        action=action,
        actor=actor.user if actor.user is not None and actor.user.is_authenticated else None,
        actor_label=actor.label[:160],
        before=before,
        after=after,
        reason=reason,
        created_at=at,
    )


def _created_reason(f: Finding) -> str:
    base = f"{f.vuln_id} matched {f.component_name}@{f.component_version}: {f.match_reason}"
    if f.vex_evidence.get("analysis"):
        base += f"; initial state {f.state} from the SBOM's VEX analysis"
    return base


def _resolution_reason(
    f: Finding,
    *,
    present_keys: set[str],
    sbom: Sbom | None,
    pv: ProjectVersion,
    adv_by_id: dict[str, dict[str, Any]],
) -> str:
    what = f"{f.component_name}@{f.component_version}"
    if f.component_key not in present_keys:
        if sbom is None:
            return f"{what} is gone: {pv} has no current SBOM"
        label = sbom.serial_number or sbom.digest[:12]
        return (
            f"{what} is no longer in the current SBOM of {pv} "
            f"(SBOM {label}, loaded {sbom.created_at:%Y-%m-%d %H:%M} UTC)"
        )
    adv = adv_by_id.get(f.advisory_id or "")
    if adv is not None and adv["withdrawn"] is not None:
        return f"advisory {adv['id']} was withdrawn on {adv['withdrawn']:%Y-%m-%d}"
    if f.advisory_id and adv is None:
        return f"advisory {f.advisory_id} no longer names package {f.package_name}"
    if adv is not None:
        return (
            f"{what} is outside the affected ranges of {adv['id']} "
            f"(modified {adv['modified']:%Y-%m-%d})"
        )
    return f"{f.vuln_id} is no longer reported for {what} by the SBOM"


def findings_match_packages(*, keys: set[PackageKey], actor: Actor | None = None) -> dict[str, int]:
    """After a feed update: re-match the project versions whose current SBOM contains any of
    these packages, restricted to them. Never a full rescan."""
    totals: dict[str, int] = defaultdict(int)
    if not keys:
        return dict(totals)
    sbom_ids: set[int] = set()
    by_eco: dict[str, list[str]] = defaultdict(list)
    for k in keys:
        by_eco[k.ecosystem].append(k.name)
    for eco, names in by_eco.items():
        for i in range(0, len(names), 1000):
            sbom_ids.update(
                ComponentPackage.objects.filter(
                    ecosystem=eco, name__in=names[i : i + 1000]
                ).values_list("sbom_id", flat=True)
            )
    pv_ids = set(
        ProjectVersion.objects.filter(current_sbom_id__in=sbom_ids).values_list("pk", flat=True)
    )
    # Open findings whose package changed but whose component left the index still need a look.
    for eco, names in by_eco.items():
        for i in range(0, len(names), 1000):
            pv_ids.update(
                Finding.objects.filter(
                    ecosystem=eco, package_name__in=names[i : i + 1000], state__in=OPEN_STATES
                )
                .values_list("project_version_id", flat=True)
                .distinct()
            )
    for pv_id in sorted(pv_ids):
        result = findings_match_project_version(
            project_version_id=pv_id, only_packages=keys, actor=actor
        )
        for name, value in result.items():
            totals[name] += value
    totals["project_versions"] = len(pv_ids)
    return dict(totals)


def findings_refresh_exploit_data() -> dict[str, int]:
    """Copy KEV membership and the latest EPSS onto findings, set-based, only where changed.
    The baseline priority is a generated column and follows by itself."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE vulns_finding f SET in_kev = TRUE, kev_date_added = k.date_added
            FROM vulns_keventry k
            WHERE k.cve_id = f.cve_id AND f.cve_id <> ''
              AND (NOT f.in_kev OR f.kev_date_added IS DISTINCT FROM k.date_added)
            """
        )
        kev_on = cur.rowcount
        cur.execute(
            """
            UPDATE vulns_finding f SET in_kev = FALSE, kev_date_added = NULL
            WHERE f.in_kev AND NOT EXISTS (SELECT 1 FROM vulns_keventry k WHERE k.cve_id = f.cve_id)
            """
        )
        kev_off = cur.rowcount
        cur.execute(
            """
            UPDATE vulns_finding f SET epss = e.epss, epss_percentile = e.percentile
            FROM vulns_epsslatest e
            WHERE e.cve_id = f.cve_id AND f.cve_id <> ''
              AND (f.epss IS DISTINCT FROM e.epss
                   OR f.epss_percentile IS DISTINCT FROM e.percentile)
            """
        )
        epss_changed = cur.rowcount
    return {
        "findings_kev_added": kev_on,
        "findings_kev_removed": kev_off,
        "findings_epss_changed": epss_changed,
    }


# --- triage ------------------------------------------------------------------------------------


class TriageError(ValueError):
    pass


class TriageForbidden(PermissionError):
    pass


def _actor_for(principal: Principal) -> Actor:
    user = (
        principal.user if principal.user is not None and principal.user.is_authenticated else None
    )
    return Actor(label=principal.label, user=user)


def finding_triage(
    *,
    finding: Finding,
    principal: Principal,
    state: str,
    justification: str = "",
    response: Iterable[str] = (),
    detail: str = "",
    reason: str = "",
) -> Finding:
    """Change a finding's VEX state; writes one audit event with before, after and why."""
    if not principal.can("triage", finding.team_id):
        raise TriageForbidden("changing triage state needs the 'triage' scope in this team")
    if state not in TriageState.values:
        raise TriageError(f"state must be one of {', '.join(TriageState.values)}")
    if state == TriageState.NOT_AFFECTED and justification not in Justification.values:
        raise TriageError(
            "not_affected needs a justification: one of " + ", ".join(Justification.values)
        )
    if justification and justification not in Justification.values:
        raise TriageError(f"justification must be one of {', '.join(Justification.values)}")
    from trustrank.parsers.cyclonedx_vulns import VEX_RESPONSES

    responses = list(dict.fromkeys(response))
    bad = [r for r in responses if r not in VEX_RESPONSES]
    if bad:
        raise TriageError(f"response {bad[0]!r} is not one of {', '.join(VEX_RESPONSES)}")
    if not reason.strip():
        raise TriageError("say why: a reason is required for every triage change")
    now = timezone.now()
    with transaction.atomic():
        f = Finding.objects.select_for_update().get(pk=finding.pk)
        before = _state_of(f)
        f.state = state
        f.justification = (
            justification if state == TriageState.NOT_AFFECTED or justification else ""
        )
        f.response = responses
        f.detail = detail
        f.auto_resolved = False
        f.resolved_at = now if state not in OPEN_STATES else None
        f.save(
            update_fields=[
                "state",
                "justification",
                "response",
                "detail",
                "auto_resolved",
                "resolved_at",
                "updated_at",
            ]
        )
        after = _state_of(f)
        audit_event_record(
            team_id=f.team_id,
            subject_type=SUBJECT,
            subject_id=f.pk,
            action="state_changed",
            actor=_actor_for(principal),
            before=before,
            after=after,
            reason=reason.strip(),
            at=now,
        )
    return f


def finding_comment_add(*, finding: Finding, principal: Principal, body: str) -> FindingComment:
    if not principal.can("triage", finding.team_id):
        raise TriageForbidden("commenting needs the 'triage' scope in this team")
    body = body.strip()
    if not body:
        raise TriageError("a comment needs text")
    actor = _actor_for(principal)
    with transaction.atomic():
        comment = FindingComment.objects.create(
            finding=finding, author=actor.user, author_label=actor.label[:160], body=body
        )
        audit_event_record(
            team_id=finding.team_id,
            subject_type=SUBJECT,
            subject_id=finding.pk,
            action="commented",
            actor=actor,
            after={"comment_id": comment.pk, "body": body},
        )
    return comment
