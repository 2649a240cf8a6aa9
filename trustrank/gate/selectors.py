"""Reading what the gate decides on: the team's policy, the project version asked about, and
the SBOM uploads of that version (rows of the ingest job kind, reached through the job
registry: this app sits below `ingest` and never imports it)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.gate.models import FailOn, GatePolicy
from trustrank.inventory.models import Project, ProjectVersion
from trustrank.jobs.models import JobStatus
from trustrank.jobs.registry import job_kind
from trustrank.lib.numbers import int_or_none

# A key that uploads a team's SBOMs (a CI pipeline's) may read that team's gate too.
GATE_READ_SCOPES = (Scope.READ, Scope.SBOM_WRITE)
FIRST_UPLOAD_LOOKBACK_DAYS = 7


class GateNotFound(LookupError):
    """No such project or version among the principal's teams. `param` names what."""

    def __init__(self, param: str, detail: str) -> None:
        super().__init__(detail)
        self.param = param


class GateTeamRequired(ValueError):
    """The name is a project of several of the principal's teams: `team` must say which."""


def gate_policy_for(*, team_id: int) -> GatePolicy:
    """The team's policy, or the default one (unsaved) when it never set one."""
    policy = GatePolicy.objects.filter(team_id=team_id).first()
    return policy or GatePolicy(team_id=team_id, fail_on=FailOn.IMMEDIATE, new_only=False)


def gate_team_ids(*, principal: Principal) -> list[int]:
    return sorted({t for scope in GATE_READ_SCOPES for t in principal.teams_with(scope)})


@dataclass(frozen=True)
class GateTarget:
    """The project version a gate question is about. `project_version` is None while its
    first SBOM upload is still queued or running (`pending_job` names it)."""

    team: Team
    project: str
    version: str
    project_version: ProjectVersion | None
    pending_job: Any = None


def _sbom_jobs(team_id: int) -> QuerySet[Any]:
    model = job_kind("ingest").model
    return model.objects.filter(team_id=team_id, kind="sbom")


def sbom_jobs_of(
    *, team_id: int, project: str, version: str, version_uuid: str = "", since: Any = None
) -> QuerySet[Any]:
    """The SBOM uploads addressed to one project version (by name and version, or by the
    version's uuid as Dependency-Track clients do), newest first. `since` bounds the walk
    of the team's (team, created_at) index."""
    match = Q(params__projectName=project, params__projectVersion=version)
    if version_uuid:
        match |= Q(params__project=version_uuid)
    jobs = _sbom_jobs(team_id).filter(match)
    if since is not None:
        jobs = jobs.filter(created_at__gte=since)
    return jobs.order_by("-created_at")


def _teams(principal: Principal, team_hint: str) -> list[Team]:
    teams = Team.objects.filter(pk__in=gate_team_ids(principal=principal)).order_by("name")
    if team_hint:
        hint_id = int_or_none(team_hint, minimum=1)
        teams = teams.filter(Q(name=team_hint) | Q(pk=hint_id) if hint_id else Q(name=team_hint))
        found = list(teams)
        if not found:
            raise GateNotFound("team", f"no team {team_hint!r} among yours")
        return found
    return list(teams)


def gate_target_find(
    *, principal: Principal, project: str = "", version: str = "", project_uuid: str = "",
    team_hint: str = "",
) -> GateTarget:
    """The project version named by `project` + `version` or by `project_uuid`, in a team the
    principal may read the gate of (another team's project is simply not found)."""
    teams = _teams(principal, team_hint)
    by_id = {t.pk: t for t in teams}
    if project_uuid:
        try:
            wanted = uuid.UUID(project_uuid)
        except ValueError:
            raise GateNotFound("project_uuid", f"no project version {project_uuid!r}") from None
        pv = (
            ProjectVersion.objects.select_related("project")
            .filter(uuid=wanted, project__team_id__in=by_id)
            .first()
        )
        if pv is None:
            raise GateNotFound("project_uuid", f"no project version with uuid {project_uuid}")
        return GateTarget(team=by_id[pv.project.team_id], project=pv.project.name,
                          version=pv.version, project_version=pv)
    loaded = _loaded_target(by_id, project, version)
    if loaded is not None:
        return loaded
    # Not loaded yet: its first upload may still be queued or running (looked for among the
    # last week's uploads: the walk of a busy team's jobs stays short).
    since = timezone.now() - timedelta(days=FIRST_UPLOAD_LOOKBACK_DAYS)
    for team in teams:
        job = sbom_jobs_of(
            team_id=team.pk, project=project, version=version, since=since
        ).first()
        if job is not None and job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
            return GateTarget(team=team, project=project, version=version,
                              project_version=None, pending_job=job)
        if job is not None and job.status == JobStatus.FAILED:
            raise GateNotFound(
                "version",
                f"project {project!r} has no version {version!r}: its SBOM upload "
                f"(job {job.pk}) failed: {job.error}",
            )
        if job is not None and job.status == JobStatus.DONE:
            # The upload finished between the two reads above: the version is there now.
            loaded = _loaded_target(by_id, project, version)
            if loaded is not None:
                return loaded
    if not Project.objects.filter(team_id__in=by_id, name=project).exists():
        raise GateNotFound("project", f"no project {project!r}")
    raise GateNotFound("version", f"project {project!r} has no version {version!r}")


def _loaded_target(by_id: dict[int, Any], project: str, version: str) -> GateTarget | None:
    """The loaded project version of that name in one of the teams `by_id`, or None."""
    versions = list(
        ProjectVersion.objects.select_related("project")
        .filter(project__team_id__in=by_id, project__name=project, version=version)
    )
    if len(versions) > 1:
        raise GateTeamRequired(
            f"project {project!r} version {version!r} exists in several of your teams: "
            "name one with `team`"
        )
    if not versions:
        return None
    pv = versions[0]
    return GateTarget(team=by_id[pv.project.team_id], project=project, version=version,
                      project_version=pv)
