"""Operator actions on a service's internet ingress (the service page and the API).

The operator's word wins over the evidence in both directions: True makes the service an
entry point from the internet, False makes it not one even when root spans came from
public addresses or a Kubernetes LoadBalancer Service, Ingress or HTTPRoute reaches it
(the exposure explanation then says who said so, and when). None returns to the evidence.
Each change is an audit event in the team's hash chain and asks for a re-rank.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.findings.services.evidence import evidence_change_record
from trustrank.runtime.engine import EXTERNAL, SERVICE
from trustrank.runtime.models import IngressSetVia, Service


class IngressChangeDenied(PermissionError):
    pass


def _state(service: Service) -> dict[str, object]:
    return {
        "ingress_override": service.ingress_override,
        "set_by": service.ingress_set_by_label,
        "set_via": service.ingress_set_via,
        "set_at": service.ingress_set_at.isoformat() if service.ingress_set_at else None,
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


@transaction.atomic
def service_ingress_set(
    *, service: Service, principal: Principal, value: bool | None,
    via: str = IngressSetVia.PAGE,
) -> Service:
    """Confirm (True), deny (False) or return to the evidence (None) a service's ingress."""
    team_id = service.environment.team_id
    if not principal.can(Scope.TRIAGE, team_id):
        raise IngressChangeDenied("changing ingress needs the 'triage' scope in this team")
    if service.kind != SERVICE and service.kind != EXTERNAL:
        raise IngressChangeDenied("the internet node cannot be marked as ingress")
    # Locked so two changes of one service audit their real before and after.
    service = Service.objects.select_for_update().select_related("environment").get(
        pk=service.pk
    )
    before = _state(service)
    service.ingress_override = value
    user = principal.user if principal.user is not None and principal.user.is_authenticated \
        else None
    service.ingress_set_by = user
    service.ingress_set_by_label = principal.label[:160]
    service.ingress_set_via = via
    service.ingress_set_at = timezone.now()
    service.save(update_fields=["ingress_override", "ingress_set_by", "ingress_set_by_label",
                                "ingress_set_via", "ingress_set_at"])
    # Which services the internet reaches moved: rank the team's findings again.
    evidence_change_record(team_id=team_id,
                           what=f"ingress of {service} in {service.environment.name}")
    # Last: the audit writer holds the team's chain lock until commit.
    audit_event_record(
        actor=Actor.of(principal),
        action="ingress_set",
        team_id=team_id,
        subject_type="runtime.service",
        subject_id=f"{service.environment.name}/{service}",
        environment=service.environment.name,
        before=before,
        after=_state(service),
    )
    return service
