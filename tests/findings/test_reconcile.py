"""findings_reconcile: one lifecycle for every kind of finding."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.audit import Actor
from trustrank.findings.services.reconcile import (
    FindingSpec,
    InitialTriage,
    finding_fingerprint,
    findings_reconcile,
)
from trustrank.findings.services.triage import finding_triage

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


def spec(name: str, **values) -> FindingSpec:
    return FindingSpec(
        fingerprint=finding_fingerprint("reliability", "test", name),
        title=f"problem {name}",
        severity=values.pop("severity", "high"),
        category="test",
        source="traces",
        values={"environment": "prod", "evidence": {"name": name}, **values},
    )


def scope(team):
    return Finding.objects.filter(team=team, kind="reliability")


def reconcile(team, specs, **kwargs):
    return findings_reconcile(
        team_id=team.pk, kind="reliability", specs=specs, existing=scope(team), actor=SYSTEM,
        **kwargs,
    )


def actions(f: Finding) -> list[str]:
    return list(f.events.order_by("created_at", "pk").values_list("action", flat=True))


def test_create_update_resolve_reopen(team):
    counts = reconcile(team, [spec("a"), spec("b")])
    assert (counts.created, counts.updated, counts.resolved) == (2, 0, 0)
    a = scope(team).get(evidence__name="a")
    assert a.state == "in_triage" and a.severity_score == 8.0 and a.environment == "prod"

    counts = reconcile(team, [spec("a", severity="low")])  # b's evidence is gone
    assert (counts.created, counts.updated, counts.resolved) == (0, 1, 1)
    b = scope(team).get(evidence__name="b")
    assert b.state == "resolved" and b.auto_resolved and b.resolved_at is not None
    a.refresh_from_db()
    assert a.severity == "low" and a.severity_score == 2.5

    counts = reconcile(team, [spec("a"), spec("b")])  # b is back
    assert counts.reopened == 1
    b.refresh_from_db()
    assert b.state == "in_triage" and not b.auto_resolved and b.resolved_at is None
    assert actions(b) == ["created", "auto_resolved", "reopened"]
    assert {e.actor_kind for e in AuditEvent.objects.all()} == {"system"}


def test_reconcile_is_idempotent(team):
    reconcile(team, [spec("a")])
    before = AuditEvent.objects.count()
    counts = reconcile(team, [spec("a")])
    assert (counts.created, counts.reopened, counts.resolved) == (0, 0, 0)
    assert AuditEvent.objects.count() == before and scope(team).count() == 1


def test_peoples_decisions_are_never_overwritten(team):
    reconcile(team, [spec("a"), spec("b")])
    principal = Principal(scopes_by_team={team.pk: frozenset({"triage"})})
    b = scope(team).get(evidence__name="b")
    finding_triage(finding=b, principal=principal, state="false_positive", reason="test rig")
    reconcile(team, [spec("a")])  # b disappears: a person's state stays
    reconcile(team, [spec("a"), spec("b")])  # b returns: not reopened either
    b.refresh_from_db()
    assert b.state == "false_positive" and not b.auto_resolved
    assert actions(b) == ["created", "state_changed"]


def test_resolve_missing_can_be_limited(team):
    reconcile(team, [spec("a"), spec("b")])
    reconcile(team, [], resolve_missing=lambda f: f.evidence["name"] == "a",
              resolve_reason=lambda f: f"{f.evidence['name']} went away")
    states = dict(scope(team).values_list("evidence__name", "state"))
    assert states == {"a": "resolved", "b": "in_triage"}
    assert AuditEvent.objects.get(action="auto_resolved").reason == "a went away"


def test_initial_state_from_the_evidence(team):
    initial = InitialTriage(state="not_affected", justification="code_not_present")
    reconcile(team, [FindingSpec(**{**spec("a").__dict__, "initial": initial})])
    a = scope(team).get()
    assert a.state == "not_affected" and a.justification == "code_not_present"
    assert a.resolved_at is not None


def test_fingerprints_are_per_team(team, other_team):
    reconcile(team, [spec("a")])
    findings_reconcile(team_id=other_team.pk, kind="reliability", specs=[spec("a")],
                       existing=scope(other_team), actor=SYSTEM)
    assert Finding.objects.filter(fingerprint=spec("a").fingerprint).count() == 2
    # Resolving one team's scope never touches the other's.
    reconcile(team, [])
    assert scope(other_team).get().state == "in_triage"


def test_last_seen_moves_forward_only(team):
    later = timezone.now() + timedelta(hours=1)
    s = spec("a")
    s.last_seen = later
    reconcile(team, [s])
    reconcile(team, [spec("a")], now=timezone.now())
    assert scope(team).get().last_seen == later
