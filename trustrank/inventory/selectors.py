"""Reads for the inventory; every one is scoped to what the principal may see."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.inventory.models import Component, Project, ProjectVersion, Sbom


def project_list(*, principal: Principal) -> QuerySet[Project]:
    versions = ProjectVersion.objects.select_related("current_sbom").order_by("-updated_at")
    return (
        Project.objects.filter(team_id__in=principal.team_ids)
        .select_related("team")
        .prefetch_related(Prefetch("versions", queryset=versions))
        .order_by("name")
    )


def project_get(*, principal: Principal, project_id: int) -> Project:
    """The one access helper for a project: 404 for anything outside the principal's teams."""
    project = project_list(principal=principal).filter(pk=project_id).first()
    if project is None:
        raise Http404("No such project.")
    return project


def project_sbom_history(*, project: Project) -> QuerySet[Sbom]:
    return (
        Sbom.objects.filter(project_version__project=project)
        .select_related("project_version", "job")
        .order_by("-created_at")
    )


def project_components(*, project: Project, version: str | None = None) -> QuerySet[Component]:
    """Components of the current SBOM of each version of the project (or of one version)."""
    current = ProjectVersion.objects.filter(project=project, current_sbom__isnull=False)
    if version is not None:
        current = current.filter(version=version)
    sbom_ids = current.values("current_sbom_id")
    return (
        Component.objects.filter(sbom_id__in=sbom_ids)
        .select_related("sbom__project_version")
        .order_by("name", "version", "pk")
    )
