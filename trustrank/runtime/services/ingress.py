"""Operator actions on a service's internet ingress."""

from __future__ import annotations

from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.runtime.engine import EXTERNAL, SERVICE
from trustrank.runtime.models import Service


class IngressChangeDenied(PermissionError):
    pass


def service_ingress_set(
    *, service: Service, principal: Principal, value: bool | None
) -> Service:
    """Confirm (True), deny (False) or return to the evidence (None) a service's ingress."""
    if not principal.can("triage", service.environment.team_id):
        raise IngressChangeDenied("changing ingress needs the 'triage' scope in this team")
    if service.kind != SERVICE and service.kind != EXTERNAL:
        raise IngressChangeDenied("the internet node cannot be marked as ingress")
    service.ingress_override = value
    user = principal.user if principal.user is not None and principal.user.is_authenticated \
        else None
    service.ingress_set_by = user
    service.ingress_set_at = timezone.now()
    service.save(update_fields=["ingress_override", "ingress_set_by", "ingress_set_at"])
    return service

