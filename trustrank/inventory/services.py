"""Writes for the inventory: resolving projects and loading parsed SBOMs."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from django.utils import timezone

from trustrank.accounts.models import Team
from trustrank.inventory.models import Component, ComponentDependency, Project, ProjectVersion, Sbom
from trustrank.lib.db import copy_rows
from trustrank.parsers.bom import ParsedBom
from trustrank.parsers.cyclonedx_vulns import vulnerability_to_json

log = logging.getLogger(__name__)


class ProjectNotFound(LookupError):
    pass


def project_version_resolve(
    *,
    team: Team,
    name: str = "",
    version: str = "",
    version_uuid: str = "",
    auto_create: bool = False,
) -> ProjectVersion:
    """Find (or, with auto_create, create) the project version an upload is for.

    Dependency-Track addresses it either by `project` uuid or by name + version.
    """
    if version_uuid:
        pv = (
            ProjectVersion.objects.select_related("project")
            .filter(uuid=version_uuid, project__team=team)
            .first()
        )
        if pv is None:
            raise ProjectNotFound(f"no project with uuid {version_uuid} in team {team.name}")
        return pv
    if not name:
        raise ProjectNotFound("name the project: projectName (and projectVersion), or project uuid")
    pv = (
        ProjectVersion.objects.select_related("project")
        .filter(project__team=team, project__name=name, version=version)
        .first()
    )
    if pv is not None:
        return pv
    if not auto_create:
        raise ProjectNotFound(
            f"project {name!r} version {version!r} does not exist in team {team.name}; "
            "create it or upload with autoCreate=true"
        )
    project, _ = Project.objects.get_or_create(team=team, name=name)
    pv, _ = ProjectVersion.objects.get_or_create(project=project, version=version)
    return pv


# How many of an SBOM's warnings are kept (with their count): a container image's SPDX can
# carry thousands of the same complaint about its files.
SBOM_WARNINGS_KEPT = 20


def sbom_store(
    *,
    project_version: ProjectVersion,
    parsed: ParsedBom,
    digest: str,
    job_id: Any = None,
    progress: Any = None,
) -> tuple[Sbom, bool]:
    """Store a parsed SBOM for a project version; identical content is stored once.

    Returns (sbom, created). Must run inside a transaction: the project version row is locked
    so two uploads for it are applied one after the other.
    """
    pv = ProjectVersion.objects.select_for_update().get(pk=project_version.pk)
    existing = Sbom.objects.filter(project_version=pv, digest=digest).first()
    if existing is not None:
        return existing, False
    warnings = list(parsed.warnings)
    if parsed.vulnerabilities_error:
        warnings.append(f"vulnerabilities not read: {parsed.vulnerabilities_error}")
    sbom = Sbom.objects.create(
        project_version=pv,
        job_id=job_id,
        digest=digest,
        format=parsed.format,
        spec_version=parsed.spec_version,
        serial_number=parsed.serial_number[:255],
        bom_version=parsed.version,
        bom_timestamp=parsed.timestamp,
        tools=list(parsed.tools),
        described_component=parsed.described_component,
        component_count=len(parsed.components),
        dependency_count=len(parsed.dependencies),
        vulnerability_count=parsed.vulnerability_count,
        vulnerabilities=[vulnerability_to_json(v) for v in parsed.vulnerabilities],
        services=[s.as_dict() for s in parsed.services],
        warnings=warnings[:SBOM_WARNINGS_KEPT],
        warning_count=len(warnings),
    )
    if parsed.vulnerabilities_error:
        # The inventory is good; only the embedded VEX is unusable, so the advisory feeds
        # still apply and the upload is not refused.
        log.warning("SBOM %s: vulnerabilities not read: %s", sbom.pk, parsed.vulnerabilities_error)
    _copy_components(sbom.pk, parsed, progress=progress)
    if progress is not None:
        progress(phase="storing dependencies", done=0, total=len(parsed.dependencies))
    _copy_dependencies(sbom.pk, parsed)
    if _supersedes(new=sbom, current=pv.current_sbom):
        pv.current_sbom = sbom
        pv.updated_at = timezone.now()
        pv.save(update_fields=["current_sbom", "updated_at"])
    return sbom, True


def _supersedes(*, new: Sbom, current: Sbom | None) -> bool:
    """The newest upload becomes the current inventory, except an older revision of the same
    document (same serialNumber, lower version) arriving late."""
    if current is None:
        return True
    if new.serial_number and new.serial_number == current.serial_number:
        return new.bom_version >= current.bom_version
    return True


# Progress is reported every this many components (the job page shows n/N while it runs).
_PROGRESS_EVERY = 5000


def _counted(rows: Any, *, progress: Any, total: int) -> Any:
    for done, row in enumerate(rows, start=1):
        if done % _PROGRESS_EVERY == 0:
            progress(done=done, total=total)
        yield row
    progress(done=total, total=total)


def _copy_components(sbom_id: int, parsed: ParsedBom, *, progress: Any = None) -> None:
    table = Component._meta.db_table
    columns = (
        "sbom_id",
        "bom_ref",
        "parent_ref",
        "type",
        "group",
        "name",
        "version",
        "purl",
        "cpe",
        "hashes",
        "licenses",
        "supplier",
        "scope",
        "packages",
    )
    rows = (
        (
            sbom_id,
            c.bom_ref[:1024],
            c.parent_ref[:1024],
            c.type[:32],
            c.group[:512],
            c.name[:512],
            c.version[:255],
            c.purl[:2048],
            c.cpe[:1024],
            orjson.dumps(c.hashes).decode(),
            orjson.dumps(c.licenses).decode(),
            c.supplier[:512],
            c.scope[:16],
            orjson.dumps(c.packages).decode(),
        )
        for c in parsed.components
    )
    if progress is not None:
        rows = _counted(rows, progress=progress, total=len(parsed.components))
    copy_rows(table=table, columns=columns, rows=rows)


def _copy_dependencies(sbom_id: int, parsed: ParsedBom) -> None:
    table = ComponentDependency._meta.db_table
    rows = ((sbom_id, ref[:1024], dep[:1024]) for ref, dep in parsed.dependencies)
    copy_rows(table=table, columns=("sbom_id", "ref", "depends_on"), rows=rows)
