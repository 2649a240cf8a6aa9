"""Which code runs where: deployments of project versions to services.

A deployment is recorded from three places — an SBOM upload that names its environment and
service, the deployment API (or a person on the service page), and telemetry: a service whose
OpenTelemetry `service.name` and `service.version` name exactly one project version of the
team. What a person or a pipeline said is never overwritten by telemetry.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.findings.services.evidence import evidence_change_record
from trustrank.inventory.models import ProjectVersion
from trustrank.runtime.models import (
    Deployment,
    DeploymentSource,
    Environment,
    HumanImpact,
    NodeKind,
)

_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")


class DeploymentError(ValueError):
    """A deployment that cannot be recorded; the message names what is wrong."""


class DeploymentForbidden(PermissionError):
    pass


class DeploymentNotFound(LookupError):
    pass


@dataclass(frozen=True)
class DeploymentRequest:
    project: str
    version: str = ""
    human_impact: str = HumanImpact.MEDIUM


def _check_name(value: str, what: str, *, max_length: int) -> str:
    value = value.strip()
    if not value or len(value) > max_length or not _NAME.match(value):
        raise DeploymentError(
            f"{what} must be 1–{max_length} printable characters, got {value[:40]!r}"
        )
    return value


def _project_version(*, team: Team, project: str, version: str) -> ProjectVersion:
    qs = ProjectVersion.objects.select_related("project").filter(project__team=team)
    try:
        as_uuid = uuid.UUID(project)
    except ValueError:
        as_uuid = None
    if as_uuid is not None:
        pv = qs.filter(uuid=as_uuid).first()
        if pv is not None:
            return pv
    pv = qs.filter(project__name=project, version=version).first()
    if pv is None:
        raise DeploymentError(
            f"project {project!r} version {version!r} is not known in team {team.name}: "
            "upload its SBOM first"
        )
    return pv


def _environment(*, team: Team, name: str) -> Environment:
    now = timezone.now()
    env, _ = Environment.objects.get_or_create(
        team=team, name=name, defaults={"first_seen": now, "last_seen": now}
    )
    return env


@transaction.atomic
def deployment_set(
    *,
    team: Team,
    environment: str,
    service: str,
    namespace: str = "",
    request: DeploymentRequest,
    source: str,
    principal: Principal,
) -> Deployment:
    """Record that `service` in `environment` runs a project version of the team."""
    if not principal.can(Scope.SBOM_WRITE, team.pk) and not principal.can(Scope.TRIAGE, team.pk):
        raise DeploymentForbidden("recording a deployment needs the 'sbom:write' scope")
    environment = _check_name(environment, "environment", max_length=120)
    service = _check_name(service, "service", max_length=200)
    namespace = namespace.strip()
    if namespace:
        namespace = _check_name(namespace, "namespace", max_length=120)
    if request.human_impact not in HumanImpact.values:
        raise DeploymentError(
            f"human_impact must be one of {', '.join(HumanImpact.values)}, "
            f"got {request.human_impact!r}"
        )
    project = _check_name(request.project, "project", max_length=255)
    pv = _project_version(team=team, project=project, version=request.version.strip())
    env = _environment(team=team, name=environment)
    deployment, _ = Deployment.objects.update_or_create(
        environment=env,
        namespace=namespace,
        service_name=service,
        defaults={
            "project_version": pv,
            "human_impact": request.human_impact,
            "source": source,
            "set_by": principal.label[:160],
        },
    )
    # Evidence like an SBOM (page, API or SBOM metadata alike): ranked again after the debounce.
    evidence_change_record(team_id=team.pk, what=f"deployment of {service} in {environment}")
    return deployment


def deployment_get_for_principal(
    *, principal: Principal, environment: str, service: str, namespace: str = ""
) -> Deployment:
    deployment = (
        Deployment.objects.filter(
            environment__team_id__in=principal.team_ids,
            environment__name=environment,
            service_name=service,
            namespace=namespace,
        )
        .select_related("environment__team", "project_version__project")
        .first()
    )
    if deployment is None:
        raise DeploymentNotFound(f"no deployment recorded for {service} in {environment}")
    return deployment


def deployment_list(*, team_id: int) -> QuerySet[Deployment]:
    return Deployment.objects.filter(environment__team_id=team_id).select_related(
        "environment", "project_version__project"
    )


# One statement: every ranking run asks, for every service of the team. Read into Python
# and looked up there (100,000 services, 20,000 versions), it took 0.36-0.46 s of each run
# at 10M findings. A recorded deployment is the conflict, and is left as it is.
_FROM_TELEMETRY_SQL = """
INSERT INTO runtime_deployment (environment_id, namespace, service_name, project_version_id,
                                human_impact, source, set_by, updated_at, ingress_override,
                                ingress_set_by_label, ingress_set_via, ingress_set_at)
SELECT s.environment_id, s.namespace, s.name, named.version_id, %(impact)s, %(source)s,
       %(set_by)s, now(), NULL, '', '', NULL
  FROM runtime_service s
  JOIN runtime_environment e ON e.id = s.environment_id
  JOIN (SELECT p.name, v.version, min(v.id) AS version_id
          FROM inventory_projectversion v
          JOIN inventory_project p ON p.id = v.project_id
         WHERE p.team_id = %(team)s
         GROUP BY p.name, v.version
        HAVING count(*) = 1) named
    ON named.name = s.name AND named.version = s.version
 WHERE e.team_id = %(team)s AND s.kind = %(kind)s AND s.version <> ''
ON CONFLICT (environment_id, namespace, service_name) DO NOTHING
"""


def deployments_from_telemetry(*, team_id: int) -> int:
    """Services whose `service.name`/`service.version` name exactly one project version of
    the team get that deployment (source telemetry), unless one is recorded already. Returns
    how many were recorded."""
    with connection.cursor() as cur:
        cur.execute(_FROM_TELEMETRY_SQL, {
            "team": team_id, "kind": NodeKind.SERVICE, "source": DeploymentSource.TELEMETRY,
            "impact": HumanImpact.MEDIUM,
            "set_by": "system: service.name and service.version",
        })
        return max(cur.rowcount, 0)
