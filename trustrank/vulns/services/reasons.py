"""What a match writes on its finding: the field values, the evidence, and the reasons
recorded when a finding opens or resolves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trustrank.findings.choices import (
    LABEL_SCORES,
    UNKNOWN_SCORE,
    FindingSource,
    MatchStatus,
    SeveritySource,
    title_line,
)
from trustrank.findings.models import Finding
from trustrank.inventory.models import ProjectVersion, Sbom
from trustrank.parsers.cvss import severity_label
from trustrank.parsers.cyclonedx_vulns import EmbeddedVulnerability
from trustrank.vulns.engine.ecosystems import PackageKey
from trustrank.vulns.engine.matching import Match, Verdict, canonical_id

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
    "match_status",
    "match_reason",
    "fixed_versions",
    "cvss_score",
    "cvss_vector",
    "severity_source",
    "in_kev",
    "kev_date_added",
    "epss",
    "epss_percentile",
    "vex_evidence",
]


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


def _vex_analysis(d: _Desired) -> Any:
    for vuln in d.embedded:
        if vuln.analysis is not None:
            return vuln.analysis
    return None


def _title(adv: dict[str, Any] | None, embedded: EmbeddedVulnerability | None) -> str:
    """The advisory's summary; without one, the first line of its details, then the SBOM's
    description of the vulnerability."""
    if adv is not None and adv.get("summary"):
        return str(adv["summary"])
    return title_line(adv.get("details_head", "") if adv else "") or (
        embedded.description[:500] if embedded is not None else ""
    )


def advisory_vector(adv: dict[str, Any] | None, score: float | None) -> str:
    """The advisory's vector behind `score` (`parsers.cvss.best_score` took v3, then v4,
    then v2)."""
    if adv is None or score is None:
        return ""
    for wanted in ("CVSS_V3", "CVSS_V4", "CVSS_V2"):
        for s in adv.get("severity") or ():
            if s.get("type") == wanted and s.get("base_score") == score:
                return str(s.get("vector") or "")[:255]
    return ""


def _severity_rank(adv: dict[str, Any]) -> int:
    """2: the advisory has a CVSS score, 1: only a severity label, 0: neither."""
    if adv["cvss_score"] is not None:
        return 2
    return 1 if adv["severity_label"] not in ("", "unknown") else 0


def _finding_values(
    d: _Desired,
    *,
    adv_by_id: dict[str, dict[str, Any]],
    kev: dict[str, Any],
    epss: dict[str, Any],
    nvd: dict[str, tuple[float, str, str]] | None = None,
) -> dict[str, Any]:
    """`nvd`: CVE -> (score, vector, label) of NVD (`nvd_severities_for`), taken when
    neither the advisory nor the SBOM gives a CVSS score."""
    ids = sorted(d.ids)
    vuln_key = canonical_id(ids)
    affected = [m for m in d.matches if m.verdict is Verdict.AFFECTED]
    chosen: Match | None = (affected or d.matches)[0] if (affected or d.matches) else None
    adv = adv_by_id.get(chosen.advisory_id) if chosen is not None else None
    # The advisory with a score beats one without, for what the finding shows; failing that,
    # one with a severity label (a reviewed GHSA's `database_specific.severity`) beats one
    # with none (a Go or PyPA record aliasing it).
    for m in d.matches:
        other = adv_by_id[m.advisory_id]
        if adv is None or _severity_rank(other) > _severity_rank(adv):
            adv = other
    embedded = d.embedded[0] if d.embedded else None
    cvss = adv["cvss_score"] if adv else None
    label = adv["severity_label"] if adv else ""
    vector = advisory_vector(adv, cvss)
    source = SeveritySource.ADVISORY if cvss is not None else SeveritySource.NONE
    if cvss is None and embedded is not None and embedded.best_score is not None:
        cvss, source = embedded.best_score, SeveritySource.SBOM
    from_nvd = (nvd or {}).get(vuln_key) if cvss is None else None
    if from_nvd is not None:
        cvss, vector, label = from_nvd
        source = SeveritySource.NVD
    if not label or label == "unknown":
        label = severity_label(cvss, embedded.best_severity if embedded else "")
    if source == SeveritySource.NONE and label not in ("", "unknown"):
        source = SeveritySource.LABEL
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
        "title": _title(adv, embedded),
        "match_status": status,
        "match_reason": reason,
        "fixed_versions": fixed,
        "cvss_score": cvss,
        "cvss_vector": vector,
        "severity_source": source.value,
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


def _created_reason(values: dict[str, Any], *, initial: bool) -> str:
    base = (
        f"{values['vuln_id']} matched {values['component_name']}@{values['component_version']}: "
        f"{values['match_reason']}"
    )
    if initial:
        base += "; initial state from the SBOM's VEX analysis"
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

