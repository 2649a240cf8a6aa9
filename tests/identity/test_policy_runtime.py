"""Caller policies against the calls the runtime graph observed (traces → edges → findings)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.identity.pki import make_pki
from tests.identity.test_services import bundle, upload, writer
from trustrank.findings.models import Finding
from trustrank.identity import services
from trustrank.runtime.models import CallEdgeBucket, Environment, NodeKind, Service

pytestmark = pytest.mark.django_db


def observe(team, caller: str, callee: str, *, calls: int, mtls_calls: int, ns: str = "") -> None:
    now = timezone.now().replace(second=0, microsecond=0)
    env, _ = Environment.objects.get_or_create(
        team=team, name="prod", defaults={"first_seen": now, "last_seen": now}
    )
    nodes = [
        Service.objects.get_or_create(
            environment=env, name=name, namespace=ns,
            defaults={"kind": NodeKind.SERVICE, "first_seen": now, "last_seen": now},
        )[0]
        for name in (caller, callee)
    ]
    CallEdgeBucket.objects.create(
        environment=env, caller=nodes[0], callee=nodes[1], bucket_start=now,
        calls=calls, mtls_calls=mtls_calls, last_seen=now,
    )


def test_observed_calls_are_checked_against_caller_policies(team, other_team):
    pki = make_pki()
    bundle(team, pki.root.pem)
    upload(team, pki.leaf("/ns/web/sa/frontend").pem + pki.leaf("/ns/ops/sa/batch").pem + pki.intermediate.pem)
    services.service_policy_set(
        team=team, environment="prod", service_name="payments",
        allowed_callers=["spiffe://prod.example/ns/web/*"], require_mtls=True,
        principal=writer(team),
    )
    observe(team, "frontend", "payments", calls=120, mtls_calls=120)  # allowed, mTLS
    observe(team, "batch", "payments", calls=10, mtls_calls=10)  # identity outside the list
    observe(team, "legacy", "payments", calls=5, mtls_calls=0)  # no identity, no mTLS
    observe(team, "frontend", "catalog", calls=7, mtls_calls=0)  # catalog has no policy
    observe(other_team, "batch", "payments", calls=9, mtls_calls=0)  # not this team's policy

    result = services.identity_policies_check()
    assert result == {"edges": 4, "violations": 2}
    found = Finding.objects.filter(category="policy_violation").order_by("pk")
    assert [f.evidence["caller_service"] for f in found] == ["batch", "legacy"]
    assert {f.team_id for f in found} == {team.pk}
    batch = found[0]
    assert batch.evidence["caller_spiffe_id"] == "spiffe://prod.example/ns/ops/sa/batch"
    # Checking again updates the same findings.
    services.identity_policies_check()
    assert Finding.objects.filter(category="policy_violation").count() == 2


def test_partial_mtls_counts_as_missing_mtls(team):
    pki = make_pki()
    bundle(team, pki.root.pem)
    upload(team, pki.leaf("/ns/web/sa/frontend").pem + pki.intermediate.pem)
    services.service_policy_set(
        team=team, environment="prod", service_name="payments",
        allowed_callers=["spiffe://prod.example/ns/web/*"], require_mtls=True,
        principal=writer(team),
    )
    observe(team, "frontend", "payments", calls=100, mtls_calls=97)
    assert services.identity_policies_check()["violations"] == 1
