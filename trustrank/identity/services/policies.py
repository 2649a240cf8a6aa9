"""Caller policies: set one, evaluate it against observed calls, check them all."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.identity import engine
from trustrank.identity.models import Identity, ServicePolicy
from trustrank.identity.services.environments import environment_lock, environment_validate
from trustrank.identity.services.findings import (
    _Desired,
    _identity_findings,
    _reconcile,
    identity_finding_fingerprint,
)


def team_for_triage(*, principal: Principal, team_hint: str = "") -> Team:
    """The team a person sets a caller policy for (the 'triage' scope)."""
    teams = Team.objects.filter(pk__in=principal.teams_with(Scope.TRIAGE))
    if team_hint:
        team = teams.filter(name=team_hint).first()
        if team is None:
            raise PermissionError(f"you may not set policies for team {team_hint!r}")
        return team
    found = list(teams[:2])
    if not found:
        raise PermissionError("setting a caller policy needs the 'triage' scope")
    if len(found) > 1:
        raise ValueError("you belong to several teams: name one in the team field")
    return found[0]


@transaction.atomic
def service_policy_set(
    *,
    team: Team,
    environment: str,
    service_name: str,
    namespace: str = "",
    allowed_callers: Sequence[str],
    require_mtls: bool,
    principal: Principal,
) -> ServicePolicy:
    if not principal.can(Scope.TRIAGE, team.pk):
        raise PermissionError("setting a caller policy needs the 'triage' scope")
    environment = environment_validate(environment)
    service_name = service_name.strip()
    if not service_name:
        raise ValueError("a policy needs a service name")
    patterns = [p.strip() for p in allowed_callers if p.strip()]
    for pattern in patterns:
        if not pattern.startswith("spiffe://"):
            raise ValueError(f"allowed caller {pattern!r} must be a SPIFFE ID or pattern (spiffe://…)")
    policy, created = ServicePolicy.objects.update_or_create(
        team=team,
        environment=environment,
        service_name=service_name[:200],
        namespace=namespace.strip()[:200],
        defaults={"allowed_callers": patterns, "require_mtls": require_mtls},
    )
    audit_event_record(
        actor=Actor.of(principal),
        action="policy_created" if created else "policy_updated",
        team_id=team.pk,
        subject_type="identity.policy",
        subject_id=f"{policy.service_name}/{policy.namespace}",
        environment=environment,
        after={
            "service_name": policy.service_name,
            "namespace": policy.namespace,
            "allowed_callers": patterns,
            "require_mtls": require_mtls,
        },
    )
    # Check the calls already observed against the new policy without waiting for beat.
    from trustrank.identity.tasks import identity_policies_check

    transaction.on_commit(identity_policies_check.delay)
    return policy


@transaction.atomic
def identity_policy_evaluate(
    *,
    team_id: int,
    environment: str,
    edges: list[engine.ObservedEdge],
    actor: Actor | None = None,
) -> list[Finding]:
    """Check observed call edges (plain data) against the callees' caller policies and
    record a finding for each violating edge. Violations are evidence of something that
    happened, so a later call list without the edge does not resolve them."""
    environment_lock(team_id=team_id, environment=environment)
    policies = {
        (p.service_name, p.namespace): engine.CallerPolicy(
            service=p.service_name,
            namespace=p.namespace,
            allowed_callers=tuple(p.allowed_callers),
            require_mtls=p.require_mtls,
        )
        for p in ServicePolicy.objects.filter(team_id=team_id, environment=environment)
    }
    desired: list[_Desired] = []
    for edge in edges:
        policy = policies.get((edge.callee_service, edge.callee_namespace)) or policies.get(
            (edge.callee_service, "")
        )
        if policy is None:
            continue
        reasons = engine.edge_policy_violations(edge, policy)
        if reasons:
            desired.append(
                _Desired(engine.policy_finding(edge, reasons), None, edge.caller_spiffe_id or "")
            )
    fingerprints = [
        identity_finding_fingerprint(
            environment=environment, category=d.spec.kind, key=d.spec.key
        )
        for d in desired
    ]
    existing = _identity_findings(team_id=team_id, environment=environment).filter(
        fingerprint__in=fingerprints
    )
    _reconcile(
        team_id=team_id, environment=environment, desired=desired, existing=existing,
        resolve_missing=False, now=timezone.now(),
        actor=actor or Actor.system("caller policy check"),
    )
    return list(
        Finding.objects.filter(team_id=team_id, fingerprint__in=fingerprints).order_by("pk")
    )


def identity_policies_check(*, window: timedelta | None = None) -> dict[str, int]:
    """Check the calls the runtime graph observed against every caller policy.

    For each environment that has a policy, the service-to-service calls of the last window
    become ObservedEdges: the caller's SPIFFE ID is that of the identity mapped to the caller
    service (its strongest valid one), and a call counts as mTLS only when every observed
    call in the window carried mTLS evidence.
    """
    from trustrank.runtime.selectors import observed_calls

    window = window or timedelta(seconds=settings.TRUSTRANK_IDENTITY_POLICY_WINDOW_SECONDS)
    since = timezone.now() - window
    checked = violations = 0
    scopes = ServicePolicy.objects.values_list("team_id", "environment").distinct()
    for team_id, environment in scopes:
        calls = observed_calls(team_id=team_id, environment=environment, since=since)
        if not calls:
            continue
        spiffe_by_service: dict[tuple[str, str], str] = {}
        identities = Identity.objects.filter(
            team_id=team_id,
            environment=environment,
            best_certificate__isnull=False,
            strength__gt=0,
        ).exclude(service_name="")
        for identity in identities.order_by("strength"):  # strongest last, so it wins
            key = (identity.service_name, identity.service_namespace)
            spiffe_by_service[key] = identity.spiffe_id
            spiffe_by_service.setdefault((identity.service_name, ""), identity.spiffe_id)
        edges = [
            engine.ObservedEdge(
                caller_service=call.caller,
                callee_service=call.callee,
                caller_spiffe_id=spiffe_by_service.get((call.caller, call.caller_namespace))
                or spiffe_by_service.get((call.caller, "")),
                mtls=call.calls > 0 and call.mtls_calls >= call.calls,
                caller_namespace=call.caller_namespace,
                callee_namespace=call.callee_namespace,
            )
            for call in calls
        ]
        found = identity_policy_evaluate(team_id=team_id, environment=environment, edges=edges)
        checked += len(edges)
        violations += len(found)
    return {"edges": checked, "violations": violations}

