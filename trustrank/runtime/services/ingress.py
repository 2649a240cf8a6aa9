"""Operator actions on a service's internet ingress (the service page and the API).

The operator's word wins over the evidence in both directions: True makes the service an
entry point from the internet, False makes it not one even when root spans came from
public addresses or a Kubernetes LoadBalancer Service, Ingress or HTTPRoute reaches it
(the exposure explanation then says who said so, and when). None returns to the evidence.
Each change is an audit event in the team's hash chain and asks for a re-rank. A service a
deployment declares that sends no traces has no Service row: its mark is held on the
deployment (`declared_service_ingress_set`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.findings.services.evidence import evidence_change_record
from trustrank.runtime.engine import EXTERNAL, SERVICE
from trustrank.runtime.models import Deployment, Environment, IngressSetVia, Service


class IngressChangeDenied(PermissionError):
    pass


def _state(holder: Service | Deployment) -> dict[str, object]:
    return {
        "ingress_override": holder.ingress_override,
        "set_by": holder.ingress_set_by_label,
        "set_via": holder.ingress_set_via,
        "set_at": holder.ingress_set_at.isoformat() if holder.ingress_set_at else None,
    }


def ingress_override_text(
    *, value: bool | None, by: str, via: str, at: datetime | None
) -> str:
    """The sentence the exposure explanation gives for an operator's mark."""
    if value is None:
        return ""
    what = "marked ingress" if value else "marked not an entry point"
    via_text = {"api": " via API", "page": " on the service page"}.get(str(via), "")
    when = f" at {at.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if at else ""
    return f"operator {what}{via_text}" + (f" by {by}" if by else "") + when


def declared_of(service: Service) -> QuerySet[Deployment]:
    """The deployment that declares a service (by environment, namespace and name)."""
    return Deployment.objects.filter(environment_id=service.environment_id,
                                     namespace=service.namespace, service_name=service.name)


def ingress_mark_holder(
    *, service: Service | None, declared: Deployment | None
) -> Service | Deployment | None:
    """The row whose ingress mark counts: the Service row's own, else the one set on the
    deployment while the service sent no traces (it counts until the row is marked)."""
    if service is not None and service.ingress_override is not None:
        return service
    if declared is not None and declared.ingress_override is not None:
        return declared
    return service or declared


def _mark(holder: Service | Deployment, *, principal: Principal, value: bool | None,
          via: str) -> None:
    holder.ingress_override = value
    holder.ingress_set_by_label = principal.label[:160]
    holder.ingress_set_via = via
    holder.ingress_set_at = timezone.now()
    fields = ["ingress_override", "ingress_set_by_label", "ingress_set_via", "ingress_set_at"]
    if isinstance(holder, Service):
        user = principal.user
        holder.ingress_set_by = user if user is not None and user.is_authenticated else None
        fields.append("ingress_set_by")
    holder.save(update_fields=fields)


def _record(*, principal: Principal, environment: Environment, subject: str,
            subject_type: str, before: dict[str, object], after: dict[str, object]) -> None:
    team_id = environment.team_id
    # Which services the internet reaches moved: rank the team's findings again.
    evidence_change_record(team_id=team_id, what=f"ingress of {subject} in {environment.name}")
    # Last: the audit writer holds the team's chain lock until commit.
    audit_event_record(
        actor=Actor.of(principal),
        action="ingress_set",
        team_id=team_id,
        subject_type=subject_type,
        subject_id=f"{environment.name}/{subject}",
        environment=environment.name,
        before=before,
        after=after,
    )


def _check(principal: Principal, team_id: int) -> None:
    if not principal.can(Scope.TRIAGE, team_id):
        raise IngressChangeDenied("changing ingress needs the 'triage' scope in this team")


@transaction.atomic
def service_ingress_set(
    *, service: Service, principal: Principal, value: bool | None,
    via: str = IngressSetVia.PAGE,
) -> Service:
    """Confirm (True), deny (False) or return to the evidence (None) a service's ingress."""
    _check(principal, service.environment.team_id)
    if service.kind != SERVICE and service.kind != EXTERNAL:
        raise IngressChangeDenied("the internet node cannot be marked as ingress")
    # Locked so two changes of one service audit their real before and after.
    service = Service.objects.select_for_update().select_related("environment").get(
        pk=service.pk
    )
    declared = declared_of(service).select_for_update().first()
    holder = ingress_mark_holder(service=service, declared=declared)
    before = _state(holder if holder is not None else service)
    _mark(service, principal=principal, value=value, via=via)
    if declared is not None and declared.ingress_override is not None:
        # The row's mark replaces the one set before the first trace: null must return
        # the service to the evidence, not to that older mark.
        declared.ingress_override = None
        declared.save(update_fields=["ingress_override"])
    _record(principal=principal, environment=service.environment, subject=str(service),
            subject_type="runtime.service", before=before, after=_state(service))
    return service


@transaction.atomic
def declared_service_ingress_set(
    *, deployment: Deployment, principal: Principal, value: bool | None,
    via: str = IngressSetVia.API,
) -> Deployment:
    """The same mark for a service a deployment declares that sends no traces: held on
    the deployment, so nothing pretends the service sent a trace (the ranking decides
    "untraced" by its traces, and reads the mark as the operator's word on exposure)."""
    _check(principal, deployment.environment.team_id)
    deployment = Deployment.objects.select_for_update().select_related(
        "environment__team").get(pk=deployment.pk)
    before = _state(deployment)
    _mark(deployment, principal=principal, value=value, via=via)
    name = (f"{deployment.namespace}/{deployment.service_name}" if deployment.namespace
            else deployment.service_name)
    _record(principal=principal, environment=deployment.environment, subject=name,
            subject_type="runtime.deployment", before=before, after=_state(deployment))
    return deployment
