"""Writes of the gate: a team's policy (audited), and the once-only record of a failing answer
that the `gate.failed` notification is sent for."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.gate.evaluate import GateResult, policy_json
from trustrank.gate.models import FailOn, GateFailure, GatePolicy

POLICY_FIELDS = ("fail_on", "new_only")


class GatePolicyForbidden(PermissionError):
    pass


class GatePolicyInvalid(ValueError):
    """Bad policy input: `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def gate_policy_validate(values: Any) -> dict[str, Any]:
    """The fields of a policy change, checked strictly: `fail_on` one of the decisions,
    `new_only` a JSON boolean, nothing else. Absent fields stay as they are."""
    if not isinstance(values, dict):
        raise GatePolicyInvalid({"body": "a JSON object with fail_on and/or new_only"})
    errors: dict[str, str] = {}
    for key in values:
        if key not in POLICY_FIELDS and key != "reason":
            errors[str(key)] = f"unknown field; the policy has {', '.join(POLICY_FIELDS)}"
    clean: dict[str, Any] = {}
    if "fail_on" in values:
        if values["fail_on"] in FailOn.values:
            clean["fail_on"] = values["fail_on"]
        else:
            errors["fail_on"] = f"must be one of {', '.join(FailOn.values)}"
    if "new_only" in values:
        if isinstance(values["new_only"], bool):
            clean["new_only"] = values["new_only"]
        else:
            errors["new_only"] = "must be true or false"
    if "reason" in values and not isinstance(values["reason"], str):
        errors["reason"] = "must be a string"
    if errors:
        raise GatePolicyInvalid(errors)
    return clean


def gate_policy_set(
    *, principal: Principal, team_id: int, values: dict[str, Any], reason: str = ""
) -> GatePolicy:
    """Change the team's gate policy (team admins only). A change is an audit event
    (`gate_policy_changed`, before and after); setting what is already set writes nothing."""
    if not principal.can(Scope.ADMIN, team_id):
        raise GatePolicyForbidden("changing the gate policy needs the 'admin' scope in this team")
    clean = gate_policy_validate(values)
    with transaction.atomic():
        policy, _ = GatePolicy.objects.select_for_update().get_or_create(team_id=team_id)
        before = policy_json(policy)
        for name, value in clean.items():
            setattr(policy, name, value)
        after = policy_json(policy)
        if after == before:
            return policy
        policy.updated_at = timezone.now()
        policy.updated_by_label = principal.label[:160]
        policy.save()
        audit_event_record(
            actor=Actor.of(principal),
            action="gate_policy_changed",
            team_id=team_id,
            subject_type="gate.policy",
            subject_id=str(team_id),
            before=before,
            after=after,
            reason=reason,
        )
    return policy


def gate_failure_record(*, result: GateResult) -> bool:
    """Record a failing, complete answer; True the first time for its (project version,
    ranking run), False after (and for a passing or pending answer). What makes the
    `gate.failed` notification go out once per pair, whichever web process answers."""
    if result.passed or result.pending or result.project_version_id is None:
        return False
    try:
        with transaction.atomic():
            GateFailure.objects.create(
                team_id=result.team_id,
                project_version_id=result.project_version_id,
                ranking_run_id=result.ranking_run_id or 0,
            )
    except IntegrityError:
        return False
    return True


def gate_failed_payload(result: GateResult) -> dict[str, Any]:
    """The body of the `gate.failed` webhook event for a failing answer: which version,
    which run decided, the policy, and each finding that failed it."""
    return {
        "event": "gate.failed",
        "team": result.team,
        "project": result.project,
        "version": result.version,
        "project_uuid": result.project_uuid,
        "environment": result.environment,
        "policy": result.policy,
        "ranking_run": result.ranking_run_id,
        "ranked_at": result.ranked_at.isoformat() if result.ranked_at else None,
        "counts": dict(result.counts),
        "reasons": list(result.reasons),
        "failing": [f.as_json() for f in result.failing],
    }
