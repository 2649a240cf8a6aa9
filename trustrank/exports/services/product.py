"""The products a VEX document speaks of: project versions (what Dependency-Track calls a
project), named as their current SBOM describes them (its metadata.component: purl, cpe,
bom-ref) so that a VEX statement can be matched to the SBOM it qualifies.

A CycloneDX VEX document describes one project version (its `metadata.component`), as
Dependency-Track's `/api/v1/vex/cyclonedx/project/{uuid}` does: an export in that format
takes the `project_version` filter, or a selection whose vulnerability findings all belong
to one project version; anything else is refused naming `project_version`.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from trustrank.exports.services.params import ExportParamError, ExportRequest
from trustrank.findings.models import Finding
from trustrank.inventory.models import ProjectVersion


def product_data(pv: ProjectVersion) -> dict[str, Any]:
    """What a document needs to name one project version (JSON, kept in the metadata)."""
    sbom = pv.current_sbom
    described: dict[str, Any] = dict(sbom.described_component or {}) if sbom else {}
    serial = (sbom.serial_number if sbom else "") or ""
    sbom_link = ""
    if serial.startswith("urn:uuid:"):
        # A BOM-Link to the SBOM this VEX qualifies (CycloneDX: urn:cdx:serial/version).
        sbom_link = f"urn:cdx:{serial.removeprefix('urn:uuid:')}/{sbom.bom_version}"  # type: ignore[union-attr]
    return {
        "project_version_id": pv.pk,
        "uuid": str(pv.uuid),
        "name": pv.project.name,
        "version": pv.version,
        "purl": described.get("purl", ""),
        "cpe": described.get("cpe", ""),
        # The SBOM's own bom-ref for it when it gave one, so the two documents agree.
        "bom_ref": described.get("bom-ref") or f"urn:uuid:{pv.uuid}",
        "sbom": sbom_link,
    }


def _project_versions(qs: QuerySet[Finding], limit: int) -> list[int]:
    ids = (
        qs.order_by()
        .exclude(project_version_id=None)
        .values_list("project_version_id", flat=True)
        .distinct()[:limit]
    )
    return sorted(int(i) for i in ids)


def vex_product_of(req: ExportRequest, qs: QuerySet[Finding]) -> dict[str, Any]:
    """The one project version a CycloneDX VEX export describes (see the module's docstring);
    ExportParamError naming `project_version` when the selection does not name one."""
    given = req.filters.get("project_version")
    pv_ids = sorted({int(v) for v in given}) if given else _project_versions(qs, 6)
    if len(pv_ids) != 1:
        found = (
            "matches no vulnerability finding of a project version"
            if not pv_ids
            else f"spans several project versions (ids {', '.join(map(str, pv_ids[:5]))}"
            + (", …)" if len(pv_ids) > 5 else ")")
        )
        raise ExportParamError(
            "project_version",
            "project_version: a CycloneDX VEX document describes one project version, and "
            f"this selection {found}; give project_version=<id>",
        )
    pv = (
        ProjectVersion.objects.select_related("project", "current_sbom")
        .filter(pk=pv_ids[0], project__team_id=req.team_id)
        .first()
    )
    if pv is None:
        raise ExportParamError(
            "project_version", f"project_version: no project version {pv_ids[0]} of your team"
        )
    return product_data(pv)


def csaf_products_of(qs: QuerySet[Finding]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The project versions and the (project version, component) pairs a CSAF document's
    product tree names: read with DISTINCT in the database, one row per product."""
    pv_ids = (
        qs.order_by().exclude(project_version_id=None)
        .values_list("project_version_id", flat=True).distinct()
    )
    versions = [
        product_data(pv)
        for pv in ProjectVersion.objects.select_related("project", "current_sbom")
        .filter(pk__in=list(pv_ids))
        .order_by("project__name", "version", "id")
    ]
    pairs = [
        dict(pair)
        for pair in qs.order_by()
        .values("project_version_id", "component_purl", "component_name", "component_version",
                "component__cpe")
        .distinct()
        .order_by("project_version_id", "component_purl", "component_name", "component_version")
    ]
    return versions, pairs


def products_by_version(qs: QuerySet[Finding]) -> dict[int, dict[str, Any]]:
    """product_data of every project version the findings belong to, by its id (one
    DISTINCT query and one read of the versions)."""
    pv_ids = (
        qs.order_by().exclude(project_version_id=None)
        .values_list("project_version_id", flat=True).distinct()
    )
    return {
        pv.pk: product_data(pv)
        for pv in ProjectVersion.objects.select_related("project", "current_sbom")
        .filter(pk__in=list(pv_ids))
    }
