"""Loading a CycloneDX SBOM into the inventory."""

from __future__ import annotations

from typing import Any

from ingest.errors import IngestRejected
from ingest.models import IngestJob
from ingest.services import ProgressFn
from trustrank.inventory.services import ProjectNotFound, project_version_resolve, sbom_store
from trustrank.parsers.cyclonedx import BomError, parse_cyclonedx


def sbom_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    """Validate, parse and store one SBOM (runs inside the job's transaction)."""
    progress(phase="validating and parsing")
    try:
        parsed = parse_cyclonedx(payload)
    except BomError as exc:
        raise IngestRejected(str(exc)) from exc
    params = job.params
    try:
        pv = project_version_resolve(
            team=job.team,
            name=params.get("projectName", ""),
            version=params.get("projectVersion", ""),
            version_uuid=params.get("project", ""),
            auto_create=bool(params.get("autoCreate")),
        )
    except ProjectNotFound as exc:
        raise IngestRejected(str(exc)) from exc
    progress(phase="storing components", done=0, total=len(parsed.components))
    sbom, created = sbom_store(
        project_version=pv, parsed=parsed, digest=job.digest, job_id=job.pk, progress=progress
    )
    return {
        "components": sbom.component_count,
        "dependencies": sbom.dependency_count,
        "vulnerabilities": sbom.vulnerability_count,
        "_result": {
            "sbom_id": sbom.pk,
            "project_id": pv.project_id,
            "project_version_uuid": str(pv.uuid),
            "duplicate": not created,
        },
    }
