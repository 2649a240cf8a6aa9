"""Loading an SBOM (CycloneDX, or SPDX in the same parsed form) into the inventory."""

from __future__ import annotations

from typing import Any

from ingest.errors import IngestRejected
from ingest.models import IngestJob
from ingest.services import ProgressFn
from trustrank.accounts.principal import principal_for_system
from trustrank.inventory.services import ProjectNotFound, project_version_resolve, sbom_store
from trustrank.parsers.bom import BomError
from trustrank.parsers.sbom import parse_sbom
from trustrank.runtime.deployment import DeploymentError, DeploymentRequest, deployment_set
from trustrank.runtime.models import DeploymentSource, HumanImpact
from trustrank.vulns.services.matching import sbom_findings_match


def sbom_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    """Validate, parse and store one SBOM, and match its findings (runs inside the job's
    transaction)."""
    progress(phase="validating and parsing")
    try:
        parsed = parse_sbom(payload, content_type=job.content_type)
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
    deployed = _deploy(job=job, project_version=pv)
    matching = None
    if sbom.matched_at is None:
        # In this job's transaction: the upload is done once its findings are in step. A new
        # SBOM is unmatched; an identical upload matches again only an SBOM whose match
        # never finished.
        progress(phase="matching vulnerabilities")
        matching = sbom_findings_match(project_version_id=pv.pk)
    return {
        "components": sbom.component_count,
        "dependencies": sbom.dependency_count,
        "vulnerabilities": sbom.vulnerability_count,
        "_result": {
            "sbom_id": sbom.pk,
            "project_id": pv.project_id,
            "project_version_uuid": str(pv.uuid),
            **({"deployment": deployed} if deployed else {}),
            "duplicate": not created,
            **({"matching": matching} if matching is not None else {}),
            # Accepted with these problems (the first SBOM_WARNINGS_KEPT, and how many).
            "warnings": sbom.warnings,
            "warning_count": sbom.warning_count,
        },
    }


def _deploy(*, job: IngestJob, project_version: Any) -> dict[str, str] | None:
    """An upload that names its environment and service records that deployment."""
    params = job.params or {}
    service = str(params.get("service") or "")
    if not service:
        return None
    try:
        deployment = deployment_set(
            team=job.team,
            environment=str(params.get("environment") or ""),
            service=service,
            namespace=str(params.get("namespace") or ""),
            request=DeploymentRequest(
                project=str(project_version.uuid),
                human_impact=str(params.get("human_impact") or HumanImpact.MEDIUM),
            ),
            source=DeploymentSource.SBOM,
            principal=principal_for_system(
                team_id=job.team_id, name=f"SBOM job {job.pk}", scopes=frozenset({"sbom:write"})
            ),
        )
    except DeploymentError as exc:
        raise IngestRejected(f"The deployment cannot be recorded: {exc}") from exc
    return {
        "environment": deployment.environment.name,
        "service": deployment.service_name,
        "human_impact": deployment.human_impact,
    }
