"""Dependency-Track's JSON shapes (Project, Finding, ProjectMetrics, TeamSelf) built from
TrustRank's rows, and serializers that describe them for the OpenAPI schema.

Dates are epoch milliseconds, as Dependency-Track's Jackson writes them (both CI plugins
read them so). Dependency-Track ids that TrustRank has no column for (a component's or a
vulnerability's uuid) are name-based UUIDs: stable across uploads, the same every request.
"""

from __future__ import annotations

import uuid as uuid_module
from datetime import datetime
from typing import Any

from rest_framework import serializers

from trustrank.findings.choices import OPEN_STATES, TriageState, title_line
from trustrank.inventory.dt_selectors import vuln_source
from trustrank.inventory.models import ProjectVersion, Sbom

_NAMESPACE = uuid_module.UUID("6f1c2a5e-3b0d-5d7a-9c44-1f0e7b2d8a61")

SEVERITIES = ("CRITICAL", "HIGH", "MEDIUM", "LOW", "INFO", "UNASSIGNED")
# Dependency-Track's severityRank is the Severity enum's ordinal (CRITICAL 0 … UNASSIGNED 5).
SEVERITY_RANK = {name: i for i, name in enumerate(SEVERITIES)}
# TrustRank's "none" and "unknown" are Dependency-Track's UNASSIGNED: the Maven plugin's
# Severity enum has no INFO.
_SEVERITY = {"critical": "CRITICAL", "high": "HIGH", "medium": "MEDIUM", "low": "LOW"}

_STATE = {
    TriageState.EXPLOITABLE: "EXPLOITABLE",
    TriageState.RESOLVED: "RESOLVED",
    TriageState.RESOLVED_WITH_PEDIGREE: "RESOLVED",
    TriageState.FALSE_POSITIVE: "FALSE_POSITIVE",
    TriageState.NOT_AFFECTED: "NOT_AFFECTED",
}
# Dependency-Track's analysis states that count as audited (its metrics' findingsAudited).
UNAUDITED_STATES = ("NOT_SET", "IN_TRIAGE")

# Dependency-Track's default risk score weights (inheritedRiskScore).
RISK_WEIGHTS = {"critical": 10, "high": 5, "medium": 3, "low": 1, "unassigned": 5}

# Alias id prefixes and the key Dependency-Track gives each in a finding's `aliases`.
_ALIAS_KEYS = (("CVE-", "cveId"), ("GHSA-", "ghsaId"), ("SNYK-", "snykId"),
               ("sonatype-", "sonatypeId"))

# CycloneDX component types -> Dependency-Track's project classifier.
_CLASSIFIERS = {
    "application", "framework", "library", "container", "platform", "operating-system",
    "device", "device-driver", "firmware", "file", "machine-learning-model", "data",
}


def millis(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def name_uuid(*parts: object) -> str:
    return str(uuid_module.uuid5(_NAMESPACE, ":".join(str(p) for p in parts)))


def dt_severity(severity: str) -> str:
    return _SEVERITY.get(severity, "UNASSIGNED")


def dt_state(state: str, *, triaged: bool) -> str:
    if state == TriageState.IN_TRIAGE:
        return "IN_TRIAGE" if triaged else "NOT_SET"
    return _STATE.get(state, "NOT_SET")  # type: ignore[call-overload]


def _alias_key(vuln_id: str) -> str:
    for prefix, key in _ALIAS_KEYS:
        if vuln_id.startswith(prefix):
            return key
    return "osvId"


def dt_aliases(vuln_id: str, aliases: list[str]) -> list[dict[str, str]]:
    """One object per alias, pairing it with the finding's own id, as Dependency-Track's
    alias rows do ({"ghsaId": …, "cveId": …})."""
    out = []
    for alias in sorted(set(aliases) - {vuln_id}):
        pair = {_alias_key(vuln_id): vuln_id}
        pair[_alias_key(alias)] = alias
        out.append(pair)
    return out


def _cwes(raw: Any) -> list[dict[str, Any]]:
    out = []
    for item in raw if isinstance(raw, list) else []:
        text = str(item).upper().removeprefix("CWE-")
        if text.isdigit():
            out.append({"cweId": int(text), "name": None})
    return out


def dt_finding_data(row: dict[str, Any], *, project_version: ProjectVersion) -> dict[str, Any]:
    """One Dependency-Track Finding, with TrustRank's `decision`, `rank` and `score`."""
    project_uuid = str(project_version.uuid)
    component_uuid = name_uuid("component", project_uuid, row["component_key"])
    vuln_id = row["vuln_id"] or row["cve_id"]
    source = vuln_source(vuln_id=vuln_id, finding_source=row["source"])
    vuln_uuid = name_uuid("vulnerability", source, vuln_id)
    severity = dt_severity(row["severity"])
    state = dt_state(row["state"], triaged=bool(row["triaged"]))
    return {
        "component": {
            "uuid": component_uuid,
            "name": row["component_name"],
            "group": row["component__group"] or None,
            "version": row["component_version"],
            "purl": row["component_purl"] or None,
            "project": project_uuid,
            "projectName": project_version.project.name,
            "projectVersion": project_version.version or None,
        },
        "vulnerability": {
            "uuid": vuln_uuid,
            "source": source,
            "vulnId": vuln_id,
            "title": title_line(row["title"]) or None,
            "description": row["title"] or None,
            "severity": severity,
            "severityRank": SEVERITY_RANK[severity],
            "cvssV3BaseScore": row["cvss_score"],
            "epssScore": row["epss"],
            "epssPercentile": row["epss_percentile"],
            "isKev": row["in_kev"],
            "cwes": _cwes(row["advisory__raw__database_specific__cwe_ids"]),
            "aliases": dt_aliases(vuln_id, list(row["aliases"] or [])),
            "published": millis(row["advisory__published"]),
        },
        "analysis": {
            "state": state,
            "isSuppressed": row["state"] not in OPEN_STATES,
            **({"justification": row["justification"].upper()} if row["justification"] else {}),
        },
        "attribution": {
            "analyzerIdentity": "INTERNAL_ANALYZER" if row["source"] == "osv" else "NONE",
            "attributedOn": millis(row["first_seen"]),
        },
        "matrix": f"{project_uuid}:{component_uuid}:{vuln_uuid}",
        "decision": row["ranked__decision"] or None,
        "rank": row["rank"],
        "score": row["ranked__score"],
        "finding_id": row["id"],
    }


def dt_metrics_data(
    findings: list[dict[str, Any]], *, project_version: ProjectVersion, now: datetime
) -> dict[str, Any]:
    """Dependency-Track's ProjectMetrics counted from `findings` (dt_finding_data of every
    listed finding, suppressed ones included): the severity counts leave the suppressed
    out, as Dependency-Track's do, so they equal what the default findings list shows."""
    counts = {k: 0 for k in ("critical", "high", "medium", "low", "unassigned")}
    audited = suppressed = kev = 0
    vulnerable: set[str] = set()
    for f in findings:
        if f["analysis"]["isSuppressed"]:
            suppressed += 1
            continue
        severity = f["vulnerability"]["severity"]
        key = severity.lower() if severity in SEVERITIES[:4] else "unassigned"
        counts[key] += 1
        vulnerable.add(f["component"]["uuid"])
        kev += bool(f["vulnerability"]["isKev"])
        audited += f["analysis"]["state"] not in UNAUDITED_STATES
    total = sum(counts.values())
    sbom = project_version.current_sbom
    zero_policy = {
        f"policyViolations{part}": 0
        for part in (
            "Fail", "Warn", "Info", "Total", "Audited", "Unaudited",
            "SecurityTotal", "SecurityAudited", "SecurityUnaudited",
            "LicenseTotal", "LicenseAudited", "LicenseUnaudited",
            "OperationalTotal", "OperationalAudited", "OperationalUnaudited",
        )
    }
    return {
        **counts,
        "kev": kev,
        "vulnerabilities": total,
        "vulnerableComponents": len(vulnerable),
        "components": sbom.component_count if sbom is not None else 0,
        "suppressed": suppressed,
        "findingsTotal": total,
        "findingsAudited": audited,
        "findingsUnaudited": total - audited,
        "inheritedRiskScore": float(sum(counts[k] * w for k, w in RISK_WEIGHTS.items())),
        **zero_policy,
        "firstOccurrence": millis(project_version.created_at),
        "lastOccurrence": millis(now),
    }


def _bom_format(sbom: Sbom) -> str:
    """Dependency-Track's name of the uploaded format ("CycloneDX 1.5", "SPDX 2.3")."""
    family = "SPDX" if sbom.format == "spdx" else "CycloneDX"
    return f"{family} {sbom.spec_version}"


def dt_project_data(
    project_version: ProjectVersion, *, metrics: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Dependency-Track's Project for a project version (`is_latest` annotated by
    dt_selectors.dt_project_versions)."""
    sbom = project_version.current_sbom
    kind = str((sbom.described_component or {}).get("type", "")) if sbom is not None else ""
    data: dict[str, Any] = {
        "uuid": str(project_version.uuid),
        "name": project_version.project.name,
        "version": project_version.version or None,
        "classifier": kind.upper().replace("-", "_") if kind in _CLASSIFIERS else "APPLICATION",
        "active": True,
        "isLatest": bool(getattr(project_version, "is_latest", False)),
        "tags": [],
        "lastBomImport": millis(sbom.created_at) if sbom is not None else None,
        "lastBomImportFormat": _bom_format(sbom) if sbom is not None else None,
        "lastVulnerabilityAnalysis": millis(sbom.matched_at) if sbom is not None else None,
    }
    if metrics is not None:
        data["lastInheritedRiskScore"] = metrics["inheritedRiskScore"]
        data["metrics"] = metrics
    return data


# --- for the OpenAPI schema only: the views build their bodies with the functions above ---


class DtComponentSerializer(serializers.Serializer):
    uuid = serializers.UUIDField()
    name = serializers.CharField()
    group = serializers.CharField(allow_null=True)
    version = serializers.CharField()
    purl = serializers.CharField(allow_null=True)
    project = serializers.UUIDField()


class DtVulnerabilitySerializer(serializers.Serializer):
    uuid = serializers.UUIDField()
    source = serializers.ChoiceField(choices=["NVD", "GITHUB", "OSSINDEX", "OSV", "SNYK",
                                              "INTERNAL"])
    vulnId = serializers.CharField()
    title = serializers.CharField(allow_null=True)
    severity = serializers.ChoiceField(choices=SEVERITIES)
    severityRank = serializers.IntegerField()
    cvssV3BaseScore = serializers.FloatField(allow_null=True)
    epssScore = serializers.FloatField(allow_null=True)
    cwes = serializers.ListField(child=serializers.DictField())
    aliases = serializers.ListField(child=serializers.DictField())


class DtAnalysisSerializer(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=["NOT_SET", "EXPLOITABLE", "IN_TRIAGE", "FALSE_POSITIVE", "NOT_AFFECTED",
                 "RESOLVED"]
    )
    isSuppressed = serializers.BooleanField()


class DtAttributionSerializer(serializers.Serializer):
    analyzerIdentity = serializers.CharField()
    attributedOn = serializers.IntegerField(help_text="epoch milliseconds")


class DtFindingSerializer(serializers.Serializer):
    component = DtComponentSerializer()
    vulnerability = DtVulnerabilitySerializer()
    analysis = DtAnalysisSerializer()
    attribution = DtAttributionSerializer()
    matrix = serializers.CharField(help_text="projectUuid:componentUuid:vulnerabilityUuid")
    decision = serializers.CharField(allow_null=True, help_text="TrustRank's SSVC decision")
    rank = serializers.IntegerField(allow_null=True, help_text="TrustRank's contextual rank")
    score = serializers.FloatField(allow_null=True, help_text="TrustRank's 0-100 score")


class DtMetricsSerializer(serializers.Serializer):
    critical = serializers.IntegerField()
    high = serializers.IntegerField()
    medium = serializers.IntegerField()
    low = serializers.IntegerField()
    unassigned = serializers.IntegerField()
    vulnerabilities = serializers.IntegerField()
    vulnerableComponents = serializers.IntegerField()
    components = serializers.IntegerField()
    suppressed = serializers.IntegerField()
    findingsTotal = serializers.IntegerField()
    findingsAudited = serializers.IntegerField()
    findingsUnaudited = serializers.IntegerField()
    inheritedRiskScore = serializers.FloatField()
    firstOccurrence = serializers.IntegerField(help_text="epoch milliseconds")
    lastOccurrence = serializers.IntegerField(help_text="epoch milliseconds")


class DtProjectSerializer(serializers.Serializer):
    uuid = serializers.UUIDField()
    name = serializers.CharField()
    version = serializers.CharField(allow_null=True)
    classifier = serializers.CharField()
    active = serializers.BooleanField()
    isLatest = serializers.BooleanField()
    lastBomImport = serializers.IntegerField(allow_null=True, help_text="epoch milliseconds")
    lastBomImportFormat = serializers.CharField(allow_null=True)
    metrics = DtMetricsSerializer(required=False)


class DtPermissionSerializer(serializers.Serializer):
    name = serializers.CharField()


class DtTeamSelfSerializer(serializers.Serializer):
    uuid = serializers.UUIDField()
    name = serializers.CharField()
    permissions = DtPermissionSerializer(many=True)
