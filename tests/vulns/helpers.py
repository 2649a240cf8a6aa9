"""Test helpers: build small CycloneDX/OSV documents and run jobs through the real handlers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from ingest.models import IngestJob
from ingest.services import job_create, job_run
from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.inventory.models import ProjectVersion

DATA = Path(__file__).resolve().parent.parent / "data"
ADVISORIES = DATA / "advisories"
SBOMS = DATA / "sbom"


def principal_for(team: Team) -> Principal:
    return Principal(scopes_by_team={team.pk: frozenset(Scope.values)})


def bom(
    components: list[tuple[str, str, str]],
    *,
    vulnerabilities: list[dict[str, Any]] | None = None,
    serial: str = "",
) -> bytes:
    """components: (name, version, purl)."""
    doc: dict[str, Any] = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "components": [
            {"type": "library", "name": n, "version": v, "purl": p, "bom-ref": p}
            for n, v, p in components
        ],
    }
    if serial:
        doc["serialNumber"] = serial
    if vulnerabilities:
        doc["vulnerabilities"] = vulnerabilities
    return orjson.dumps(doc)


def osv(
    id: str,
    ecosystem: str,
    name: str,
    events: list[dict[str, str]],
    *,
    aliases: list[str] | None = None,
    modified: str = "2024-01-01T00:00:00Z",
    withdrawn: str | None = None,
    severity: str | None = None,
    range_type: str = "ECOSYSTEM",
    summary: str = "",
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": "1.6.0",
        "id": id,
        "modified": modified,
        "published": "2023-01-01T00:00:00Z",
        "aliases": aliases or [],
        "summary": summary or f"{id} in {name}",
        "details": f"Details of {id}.",
        "affected": [
            {
                "package": {"ecosystem": ecosystem, "name": name},
                "ranges": [{"type": range_type, "events": events}],
            }
        ],
        "references": [{"type": "ADVISORY", "url": f"https://example.org/{id}"}],
    }
    if withdrawn:
        doc["withdrawn"] = withdrawn
    if severity:
        doc["severity"] = [{"type": "CVSS_V3", "score": severity}]
    return doc


def run_job(
    team: Team,
    kind: str,
    payload: bytes,
    *,
    params: dict[str, Any] | None = None,
    filename: str = "payload",
) -> IngestJob:
    """Create the job and run it through the real claim/handler path in this process."""
    job = job_create(
        team=team,
        kind=kind,
        payload=payload,
        principal=principal_for(team),
        params=params or {},
        filename=filename,
    )
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    return job


def load_sbom(
    team: Team, payload: bytes, *, project: str = "app", version: str = "1.0"
) -> ProjectVersion:
    """Load an SBOM through its ingest job, which matches its findings in its transaction."""
    job = run_job(
        team,
        "sbom",
        payload,
        params={"projectName": project, "projectVersion": version, "autoCreate": True},
    )
    assert job.status == "done", job.error
    return ProjectVersion.objects.get(project__team=team, project__name=project, version=version)


def import_osv(team: Team, records: list[dict[str, Any]]) -> IngestJob:
    return run_job(team, "osv", orjson.dumps(records), filename="records.json")


CVSS_CRITICAL = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"  # 9.8
CVSS_MEDIUM = "CVSS:3.1/AV:N/AC:L/PR:L/UI:R/S:U/C:L/I:L/A:N"  # 4.6
