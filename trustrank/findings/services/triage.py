"""Triage: people (or their keys) moving a finding of any kind through the VEX states, owning
it and setting its due date, and comments. Every change is one audit event with before, after
and the reason given, and adds one to the finding's version.

Lost updates: a caller that read version N passes `expected_version=N`; the change is made
under the row lock only if the finding is still at N, else TriageConflict carries the finding
as it is now.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import Membership, Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES, VEX_RESPONSES, Justification, TriageState
from trustrank.findings.models import Finding, FindingDue
from trustrank.findings.records import Comment
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.findings.services.reconcile import state_of
from trustrank.lib.numbers import int_or_none


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


class TriageError(ValueError):
    """A change that breaks a rule; `field` names the input at fault when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class TriageForbidden(PermissionError):
    pass


class TriageConflict(Exception):
    """Someone changed the finding after the caller read it: `finding` is how it is now."""

    def __init__(self, finding: Finding, *, expected_version: int) -> None:
        super().__init__(
            f"finding {finding.pk} is at version {finding.version}, "
            f"not {expected_version}: someone changed it since you read it"
        )
        self.finding = finding
        self.expected_version = expected_version


def triage_validate(
    *, state: str, justification: str, response: Iterable[str], reason: str
) -> list[str]:
    """The rules of a triage change, for one finding or many; returns the responses."""
    if state not in TriageState.values:
        raise TriageError(f"state must be one of {', '.join(TriageState.values)}", field="state")
    if state == TriageState.NOT_AFFECTED and justification not in Justification.values:
        raise TriageError(
            "not_affected needs a justification: one of " + ", ".join(Justification.values),
            field="justification",
        )
    return _validate_parts(justification=justification, response=response, reason=reason)


def _validate_parts(*, justification: str, response: Iterable[str], reason: str) -> list[str]:
    if justification and justification not in Justification.values:
        raise TriageError(
            f"justification must be one of {', '.join(Justification.values)}",
            field="justification",
        )
    responses = list(dict.fromkeys(response))
    bad = [r for r in responses if r not in VEX_RESPONSES]
    if bad:
        raise TriageError(
            f"response {bad[0]!r} is not one of {', '.join(VEX_RESPONSES)}", field="response"
        )
    if not reason.strip():
        raise TriageError("say why: a reason is required for every triage change", field="reason")
    return responses


def assignee_resolve(*, value: Any, team_ids: Iterable[int]) -> Any:
    """The user `value` names (an id or a username), who must be a member of every team in
    `team_ids`; None clears."""
    if value is None or value == "":
        return None
    users = get_user_model().objects
    user = None
    user_id = int_or_none(value, minimum=1)
    if user_id is not None:
        user = users.filter(pk=user_id).first()
    if user is None and isinstance(value, str):
        user = users.filter(username=value).first()
    teams = set(team_ids)
    if user is None:
        raise TriageError(f"no user {value!r} in this team", field="assignee")
    member_of = set(
        Membership.objects.filter(user=user, team_id__in=teams).values_list("team_id", flat=True)
    )
    if member_of != teams:
        raise TriageError(
            f"{user.get_username()} is not a member of the finding's team", field="assignee"
        )
    return user


def triage_apply(
    f: Finding,
    *,
    now: Any,
    state: str | None = None,
    justification: str | None = None,
    response: list[str] | None = None,
    detail: str | None = None,
    assignee: Any = UNSET,
    due_date: Any = UNSET,
) -> None:
    """Set the given triage values on `f` (in memory) and add one to its version."""
    if state is not None:
        f.state = state
        f.auto_resolved = False
        f.resolved_at = now if state not in OPEN_STATES else None
    if justification is not None:
        f.justification = justification
    if response is not None:
        f.response = response
    if detail is not None:
        f.detail = detail
    if assignee is not UNSET:
        f.assignee = assignee
    if due_date is not UNSET:
        # A person chose it (or chose none): ranking runs leave it alone from now on.
        # Kept on the finding's FindingDue (in memory; due_dates_save writes it).
        due = f.due_or_none
        if due is None:
            due = FindingDue(team_id=f.team_id)
            f.due = due  # type: ignore[attr-defined]
        due.due_date = due_date
        due.manual = True
    f.updated_at = now
    f.version += 1


def due_dates_save(findings: Iterable[Finding]) -> None:
    """Store the due dates `triage_apply` set by hand on these findings (one upsert)."""
    rows = [f.due for f in findings]  # type: ignore[attr-defined]
    FindingDue.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["finding"],
        update_fields=["due_date", "manual"],
    )


def finding_triage(
    *,
    finding: Finding,
    principal: Principal,
    state: str | None = None,
    justification: str | None = None,
    response: Iterable[str] | None = None,
    detail: str | None = None,
    reason: str = "",
    expected_version: int | None = None,
    assignee: Any = UNSET,
    due_date: Any = UNSET,
) -> Finding:
    """Change a finding's VEX state, owner or due date; writes one audit event with before,
    after and why. With a state, an absent justification, response or detail is cleared (a
    new analysis replaces the old one); without one, only what is given changes."""
    if not principal.can(Scope.TRIAGE, finding.team_id):
        raise TriageForbidden("changing triage state needs the 'triage' scope in this team")
    if state is not None:
        responses: list[str] | None = triage_validate(
            state=state, justification=justification or "", response=response or (),
            reason=reason,
        )
        justification = justification or ""
        detail = detail or ""
    else:
        if (justification is None and response is None and detail is None
                and assignee is UNSET and due_date is UNSET):
            raise TriageError("nothing to change: give a state, assignee or due date",
                              field="state")
        validated = _validate_parts(
            justification=justification or "", response=response or (), reason=reason
        )
        responses = None if response is None else validated
    user = UNSET
    if assignee is not UNSET:
        user = assignee_resolve(value=assignee, team_ids=[finding.team_id])
    with transaction.atomic():
        f = Finding.objects.select_for_update(of=("self",)).select_related("due").get(
            pk=finding.pk
        )
        if expected_version is not None and f.version != expected_version:
            raise TriageConflict(f, expected_version=expected_version)
        # Taken after the row lock: two analysts racing on one finding get audit events in
        # the order their changes were applied.
        now = timezone.now()
        before = state_of(f)
        triage_apply(
            f, now=now, state=state, justification=justification, response=responses,
            detail=detail, assignee=user, due_date=due_date,
        )
        f.save(
            update_fields=[
                "state", "justification", "response", "detail", "auto_resolved",
                "resolved_at", "updated_at", "version", "assignee",
            ]
        )
        if due_date is not UNSET:
            due_dates_save([f])
        audit_event_record(
            actor=Actor.of(principal),
            action="state_changed" if state is not None else "triage_changed",
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
        raise TriageError("a comment needs text", field="body")
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
