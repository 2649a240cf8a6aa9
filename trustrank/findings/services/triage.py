"""Triage: people (or their keys) moving a finding of any kind through the VEX states, and
comments. Every change is one audit event with before, after and the reason given."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.models import (
    OPEN_STATES,
    VEX_RESPONSES,
    Comment,
    Finding,
    Justification,
    TriageState,
)
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.findings.services.reconcile import state_of


class TriageError(ValueError):
    pass


class TriageForbidden(PermissionError):
    pass


def triage_validate(
    *, state: str, justification: str, response: Iterable[str], reason: str
) -> list[str]:
    """The rules of a triage change, for one finding or many; returns the responses."""
    if state not in TriageState.values:
        raise TriageError(f"state must be one of {', '.join(TriageState.values)}")
    if state == TriageState.NOT_AFFECTED and justification not in Justification.values:
        raise TriageError(
            "not_affected needs a justification: one of " + ", ".join(Justification.values)
        )
    if justification and justification not in Justification.values:
        raise TriageError(f"justification must be one of {', '.join(Justification.values)}")
    responses = list(dict.fromkeys(response))
    bad = [r for r in responses if r not in VEX_RESPONSES]
    if bad:
        raise TriageError(f"response {bad[0]!r} is not one of {', '.join(VEX_RESPONSES)}")
    if not reason.strip():
        raise TriageError("say why: a reason is required for every triage change")
    return responses


def finding_triage(
    *,
    finding: Finding,
    principal: Principal,
    state: str,
    justification: str = "",
    response: Iterable[str] = (),
    detail: str = "",
    reason: str = "",
) -> Finding:
    """Change a finding's VEX state; writes one audit event with before, after and why."""
    if not principal.can(Scope.TRIAGE, finding.team_id):
        raise TriageForbidden("changing triage state needs the 'triage' scope in this team")
    responses = triage_validate(
        state=state, justification=justification, response=response, reason=reason
    )
    with transaction.atomic():
        f = Finding.objects.select_for_update().get(pk=finding.pk)
        # Taken after the row lock: two analysts racing on one finding get audit events in
        # the order their changes were applied.
        now = timezone.now()
        before = state_of(f)
        f.state = state
        f.justification = (
            justification if state == TriageState.NOT_AFFECTED or justification else ""
        )
        f.response = responses
        f.detail = detail
        f.auto_resolved = False
        f.resolved_at = now if state not in OPEN_STATES else None
        f.updated_at = now
        f.save(
            update_fields=[
                "state",
                "justification",
                "response",
                "detail",
                "auto_resolved",
                "resolved_at",
                "updated_at",
            ]
        )
        audit_event_record(
            actor=Actor.of(principal),
            action="state_changed",
            team_id=f.team_id,
            finding_id=f.pk,
            environment=f.environment,
            before=before,
            after=state_of(f),
            reason=reason.strip(),
            at=now,
        )
    return f


def finding_comment_add(*, finding: Finding, principal: Principal, body: str) -> Comment:
    if not principal.can(Scope.TRIAGE, finding.team_id):
        raise TriageForbidden("commenting needs the 'triage' scope in this team")
    body = body.strip()
    if not body:
        raise TriageError("a comment needs text")
    actor = Actor.of(principal)
    with transaction.atomic():
        comment = Comment.objects.create(
            finding=finding, author=actor.user, author_label=actor.label, body=body
        )
        audit_event_record(
            actor=actor,
            action="commented",
            team_id=finding.team_id,
            finding_id=finding.pk,
            environment=finding.environment,
            after={"comment_id": comment.pk, "body": body},
        )
    return comment
