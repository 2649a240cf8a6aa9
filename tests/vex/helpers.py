"""VEX test data: a project version whose findings come from the real pipeline (an SBOM with
embedded vulnerabilities, loaded and matched by the real job and matching service)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.vulns.helpers import load_sbom
from trustrank.findings.models import Finding
from trustrank.inventory.models import ProjectVersion

DATA = Path(__file__).resolve().parent.parent / "data" / "vex"

# CycloneDX's VEX example pair: the BOM (3 jackson components) and the VEX about it.
EXAMPLE_BOM = orjson.loads((DATA / "cdx-1.3_bom_for-vex-example.json").read_bytes())
DATABIND = "pkg:maven/com.fasterxml.jackson.core/jackson-databind@2.10.0?type=jar"
CORE = "pkg:maven/com.fasterxml.jackson.core/jackson-core@2.10.0?type=jar"
ANNOTATIONS = "pkg:maven/com.fasterxml.jackson.core/jackson-annotations@2.10.0?type=jar"

# Vulnerabilities a scanner reported in the BOM (VDR, no analysis): id, affected ref, aliases.
VULNS = [
    ("CVE-2020-25649", DATABIND, ["SNYK-JAVA-COMFASTERXMLJACKSONCORE-1048302"]),
    ("CVE-2020-25650", DATABIND, []),
    ("CVE-2020-25651", CORE, []),
    ("CVE-2014-123456", ANNOTATIONS, ["GHSA-aaaa-bbbb-cccc"]),
]


def scanned_bom(vulns: list[tuple[str, str, list[str]]] | None = None) -> bytes:
    doc: dict[str, Any] = {**EXAMPLE_BOM, "specVersion": "1.4"}
    doc["vulnerabilities"] = [
        {
            "id": vid,
            "references": [{"id": a, "source": {"name": "scanner"}} for a in aliases],
            "affects": [{"ref": ref}],
        }
        for vid, ref, aliases in (VULNS if vulns is None else vulns)
    ]
    return orjson.dumps(doc)


def scanned_project(team: Any, *, project: str = "example-app", version: str = "1.0.0",
                    vulns: list[tuple[str, str, list[str]]] | None = None) -> ProjectVersion:
    return load_sbom(team, scanned_bom(vulns), project=project, version=version)


def findings_of(pv: ProjectVersion) -> dict[tuple[str, str], Finding]:
    """(vuln id, component name) -> finding."""
    return {
        (f.vuln_id, f.component_name): f
        for f in Finding.objects.filter(project_version=pv).order_by("pk")
    }
