"""Deployments (what version of which project runs as which service) and the code provenance
of the deployed versions' current SBOMs."""

from __future__ import annotations

from typing import cast

from trustrank.inventory.models import Component
from trustrank.ranking.inputs.findings import CHUNK
from trustrank.risk import inputs as ri
from trustrank.risk.libraries import component_key_from_purl
from trustrank.runtime.deployment import deployments_from_telemetry
from trustrank.runtime.models import Deployment, DeploymentSource

# How each deployment source reads in explanations (runtime.models.DeploymentSource).
DEPLOYMENT_SOURCE_WORDS: dict[str, str] = {
    DeploymentSource.SBOM: "sbom upload",
    DeploymentSource.API: "API",
    DeploymentSource.TELEMETRY: "telemetry",
    DeploymentSource.MANUAL: "page",
}


def deployments_read(team_id: int) -> tuple[list[ri.Deployment], set[int]]:
    deployments_from_telemetry(team_id=team_id)
    out = []
    versions: set[int] = set()
    for env, service, pv_id, impact, source, project, version in Deployment.objects.filter(
        environment__team_id=team_id
    ).values_list("environment__name", "service_name", "project_version_id", "human_impact",
                  "source", "project_version__project__name", "project_version__version"):
        out.append(
            ri.Deployment(
                environment=env, service=service, project_version=str(pv_id),
                human_impact=cast(ri.HumanImpact, impact),
                source=DEPLOYMENT_SOURCE_WORDS.get(source, source),
                project_version_name=f"{project}@{version}" if version else project,
            )
        )
        versions.add(pv_id)
    return out, versions


def components_read(version_ids: set[int]) -> tuple[list[ri.ProjectVersion], list[ri.Component]]:
    """Code provenance of the deployed versions' current SBOMs."""
    from trustrank.inventory.models import ProjectVersion

    pvs = ProjectVersion.objects.filter(pk__in=version_ids).values_list("pk", "current_sbom_id")
    sbom_to_pv = {sbom: pv for pv, sbom in pvs if sbom is not None}
    out: dict[tuple[str, str], ri.Component] = {}
    rows = Component.objects.filter(sbom_id__in=list(sbom_to_pv)).values_list(
        "sbom_id", "purl", "name", "hashes", "supplier", "packages"
    )
    for sbom_id, purl, name, hashes, supplier, packages in rows.iterator(chunk_size=CHUNK):
        pv = str(sbom_to_pv[sbom_id])
        key = component_key_from_purl(purl) if purl else name
        out[(pv, key)] = ri.Component(
            project_version=pv, key=key, hashes_present=bool(hashes),
            supplier_known=bool(supplier), packages=tuple(packages or ()),
        )
    versions = [ri.ProjectVersion(key=str(pv)) for pv in sorted(version_ids)]
    return versions, list(out.values())
