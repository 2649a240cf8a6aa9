"""Matching components to advisories, and keeping vulnerability findings in step.

Matching runs per project version: within each SBOM load's job for all of its components
(`sbom_findings_match`), and after a feed import only for the packages whose advisories
changed. The project version row is
locked for the duration, so an SBOM load and a feed import never match one version at once.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models.functions import Substr
from django.utils import timezone
from packageurl import PackageURL

from trustrank.findings.choices import FindingKind
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor
from trustrank.findings.services.evidence import evidence_change_record
from trustrank.findings.services.reconcile import FindingSpec, InitialTriage, findings_reconcile
from trustrank.findings.services.reconcile import finding_fingerprint as _fingerprint
from trustrank.inventory.models import Component, ProjectVersion, Sbom
from trustrank.parsers.cyclonedx_vulns import EmbeddedVulnerability, vulnerability_from_json
from trustrank.vulns.engine.ecosystems import PackageKey, component_package
from trustrank.vulns.engine.matching import (
    AdvisoryIndex,
    AdvisoryRef,
    Match,
    affected_from_osv,
    alias_groups,
    canonical_id,
)
from trustrank.vulns.models import Advisory, AdvisoryPackage, ComponentPackage, EpssLatest, KevEntry
from trustrank.vulns.services.nvd import nvd_severities_for
from trustrank.vulns.services.reasons import (
    _FINDING_UPDATE_FIELDS,
    _created_reason,
    _Desired,
    _finding_values,
    _resolution_reason,
    _Row,
    _vex_analysis,
)


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
    return _fingerprint(project_version_id, component_key, vuln_key)


def embedded_vulnerabilities(sbom: Sbom) -> list[EmbeddedVulnerability]:
    """The SBOM's own `vulnerabilities` (VDR/VEX), as parsed when it was loaded."""
    return [vulnerability_from_json(v) for v in sbom.vulnerabilities or ()]


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


# How much of an advisory's details the match reads: enough for a first line.
DETAILS_HEAD_CHARS = 400


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
        "severity",
        "modified",
    )
    ordered = sorted(ids)
    out: list[dict[str, Any]] = []
    for i in range(0, len(ordered), 5000):
        # An advisory without a summary (PYSEC records) is titled by its details' first
        # line: the head of the text is enough, and keeps megabytes of details off the match.
        out.extend(
            Advisory.objects.filter(id__in=ordered[i : i + 5000]).values(
                *fields, details_head=Substr("details", 1, DETAILS_HEAD_CHARS)
            )
        )
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
        nvd = nvd_severities_for({c for c in all_cves if c.startswith("CVE-")})

        # Filtered here rather than in SQL: a big feed import changes tens of thousands of
        # packages, far more than one query may carry as parameters.
        existing = {
            f.fingerprint: f
            for f in Finding.objects.filter(project_version=pv)
            if only_packages is None or PackageKey(f.ecosystem, f.package_name) in only_packages
        }

        specs = []
        for fp, d in desired.items():
            values = _finding_values(d, adv_by_id=adv_by_id, kev=kev, epss=epss, nvd=nvd)
            title = values.pop("title")
            source = values.pop("source")
            analysis = _vex_analysis(d)
            specs.append(
                FindingSpec(
                    fingerprint=fp,
                    title=title,
                    severity=values["severity"],
                    source=source,
                    values={
                        "project_id": pv.project_id,
                        "project_version_id": pv.pk,
                        "component_key": d.row.key,
                        **values,
                    },
                    initial=None
                    if analysis is None
                    else InitialTriage(
                        state=analysis.state,
                        justification=analysis.justification,
                        response=tuple(analysis.response),
                        detail=analysis.detail,
                    ),
                    created_reason=_created_reason(values, initial=analysis is not None),
                    reopened_reason=(
                        f"{values['component_name']}@{values['component_version']} is affected "
                        f"again ({values['match_reason'] or 'reported by the SBOM'})"
                    ),
                )
            )

        def resolvable(f: Finding) -> bool:
            # Still reported by the SBOM itself: a feed update cannot clear that.
            return only_packages is None or not f.vex_evidence.get("vulnerability")

        result = findings_reconcile(
            team_id=pv.project.team_id,
            kind=FindingKind.VULNERABILITY,
            specs=specs,
            existing=existing.values(),
            actor=actor,
            now=now,
            resolve_missing=resolvable,
            # Resolve what is no longer there: the component left the SBOM, or the advisory
            # no longer covers its version (withdrawn, ranges changed).
            resolve_reason=lambda f: _resolution_reason(
                f, present_keys=present_keys, sbom=sbom, pv=pv, adv_by_id=adv_by_id
            ),
            value_fields=_FINDING_UPDATE_FIELDS,
        )
        counts.created = result.created
        counts.updated = result.updated
        counts.reopened = result.reopened
        counts.resolved = result.resolved
        if only_packages is None and sbom is not None:
            Sbom.objects.filter(pk=sbom.pk).update(matched_at=now)
    return counts.as_dict()


def sbom_findings_match(*, project_version_id: int) -> dict[str, int]:
    """Match a project version's current SBOM whole, and record the evidence change that asks
    its team's ranking to run. The SBOM load's job calls it in its own transaction, so an
    upload is done only once its findings are in step: a worker killed between the two
    cannot leave an SBOM stored and never matched (the Dependency-Track token would answer
    `processing: true` for ever)."""
    counts = findings_match_project_version(project_version_id=project_version_id)
    team_id = (
        ProjectVersion.objects.filter(pk=project_version_id)
        .values_list("project__team_id", flat=True)
        .first()
    )
    if team_id is not None:
        evidence_change_record(
            team_id=team_id, what=f"SBOM of project version {project_version_id}"
        )
    return counts


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

