"""Findings, audit events, mapping and caller policy, through the services."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings
from django.utils import timezone

from ingest import submit
from tests.identity.helpers import run_queued_jobs
from tests.identity.pki import issue, make_pki, now, rsa_key, sha1_leaf
from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.identity import services
from trustrank.identity.engine import ObservedEdge
from trustrank.identity.models import Certificate, Identity, MappingSource

pytestmark = pytest.mark.django_db


def writer(team) -> Principal:
    return Principal(scopes_by_team={team.pk: frozenset({"certs:write", "read", "triage"})})


def upload(team, body: bytes, env: str = "prod", service: str = "", namespace: str = "") -> None:
    submit.certificates_submit(principal=writer(team), team=team, body=body, environment=env,
                                 service=service, namespace=namespace)
    jobs = run_queued_jobs()
    assert all(j.status == "done" for j in jobs), [j.error for j in jobs]


def bundle(team, body: bytes, env: str = "prod", trust_domain: str = "") -> None:
    submit.trust_bundle_submit(principal=writer(team), team=team, body=body, environment=env,
                                 trust_domain=trust_domain)
    jobs = run_queued_jobs()
    assert all(j.status == "done" for j in jobs), [j.error for j in jobs]


def open_kinds(team) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for f in Finding.objects.filter(team=team, kind="identity", state__in=OPEN_STATES):
        found.setdefault(f.category, set()).add(f.spiffe_id or f.fingerprint)
    return found


def test_findings_for_each_problem(team) -> None:
    pki = make_pki()
    bundle(team, pki.root.pem)
    start = now() - dt.timedelta(days=40)
    expired = pki.leaf("/ns/a/sa/expired", not_before=start, not_after=start + dt.timedelta(days=10))
    expiring = pki.leaf("/ns/a/sa/expiring", days=365, not_before=now() - dt.timedelta(days=353))
    weak = pki.leaf("/ns/a/sa/weak", key=rsa_key(1024))
    forged = issue("forged", uris=("spiffe://prod.example/ns/a/sa/healthy",))
    healthy = pki.leaf("/ns/a/sa/healthy")
    spire_agent = pki.leaf("/spire/agent/join_token/abc")
    upload(team, b"".join(c.pem for c in (expired, expiring, weak, forged, healthy, spire_agent))
           + pki.intermediate.pem)
    kinds = open_kinds(team)
    assert kinds["expired"] == {"spiffe://prod.example/ns/a/sa/expired"}
    assert kinds["expiring"] == {"spiffe://prod.example/ns/a/sa/expiring"}
    assert kinds["weak_key"] == {"spiffe://prod.example/ns/a/sa/weak"}
    assert kinds["chain_invalid"] == {"spiffe://prod.example/ns/a/sa/healthy"}  # the forged one
    assert kinds["unmapped"] == {"spiffe://prod.example/spire/agent/join_token/abc"}
    finding = Finding.objects.get(category="chain_invalid")
    assert finding.certificate is not None
    assert finding.certificate.subject.startswith("CN=forged")
    assert finding.evidence["reason"]
    healthy_identity = Identity.objects.get(spiffe_id="spiffe://prod.example/ns/a/sa/healthy")
    assert healthy_identity.strength == 100
    # Every finding was opened with an audit event.
    assert AuditEvent.objects.filter(action="created").count() == Finding.objects.count()


def test_weak_signature_finding_for_sha1(team) -> None:
    root = issue("RSA Root", ca=True, path_length=1, key=rsa_key(2048),
                 uris=("spiffe://prod.example",))
    bundle(team, root.pem)
    upload(team, sha1_leaf(root, "spiffe://prod.example/legacy"))
    cert = Certificate.objects.get(role="leaf")
    # The verifier refuses SHA-1, openssl at security level 1 too: strength 0, two findings.
    assert cert.strength == 0
    assert set(open_kinds(team)) >= {"weak_signature", "chain_invalid"}


def test_expiry_window_is_configurable(team) -> None:
    pki = make_pki()
    with override_settings(TRUSTRANK_IDENTITY_EXPIRY_WINDOW_DAYS=5):
        upload(team, pki.leaf("/soon", days=365, not_before=now() - dt.timedelta(days=353)).pem)
    assert "expiring" not in open_kinds(team)
    with override_settings(TRUSTRANK_IDENTITY_EXPIRY_WINDOW_DAYS=30):
        services.identity_environments_reevaluate()
    assert "expiring" in open_kinds(team)


def test_strength_settings_are_honoured(team) -> None:
    pki = make_pki()
    bundle(team, pki.root.pem)
    with override_settings(TRUSTRANK_IDENTITY_STRENGTH={"valid_spiffe": 90}):
        upload(team, pki.leaf("/svc").pem + pki.intermediate.pem)
    assert Identity.objects.get().strength == 90


def test_findings_resolve_when_fixed_and_reopen(team) -> None:
    pki = make_pki()
    upload(team, pki.leaf("/svc").pem + pki.intermediate.pem)  # no bundle yet
    finding = Finding.objects.get(category="chain_invalid", certificate__role="leaf")
    assert "no trust bundle" in finding.title
    bundle(team, pki.root.pem)
    finding.refresh_from_db()
    assert finding.state == "resolved" and finding.auto_resolved and finding.resolved_at
    bundle(team, make_pki("other.example").root.pem)
    finding.refresh_from_db()
    assert finding.state == "in_triage" and not finding.auto_resolved
    actions = list(finding.events.order_by("created_at", "pk").values_list("action", flat=True))
    assert actions == ["created", "auto_resolved", "reopened"]


def test_time_passing_expires_certificates(team) -> None:
    pki = make_pki()
    bundle(team, pki.root.pem)
    upload(team, pki.leaf("/svc", days=40).pem + pki.intermediate.pem)
    assert Identity.objects.get().strength == 100
    services.identity_environments_reevaluate(now=timezone.now() + dt.timedelta(days=45))
    identity = Identity.objects.get()
    assert identity.strength == 0 and identity.best_certificate is None
    assert "expired" in open_kinds(team)


def test_audit_events_are_append_only(team) -> None:
    from django.db import DatabaseError, transaction

    upload(team, make_pki().leaf("/svc").pem)
    event = AuditEvent.objects.first()
    assert event is not None
    event.action = "tampered"
    with pytest.raises(ValueError, match="append-only"):
        event.save()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.all().update(action="x")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("DELETE FROM findings_auditevent")


def test_metadata_mapping_beats_rule_and_manual_beats_both(team) -> None:
    pki = make_pki()
    upload(team, pki.leaf("/ns/shop/sa/cart-sa").pem, service="cart", namespace="shop")
    identity = Identity.objects.get()
    assert (identity.service_name, identity.mapping_source) == ("cart", MappingSource.METADATA)
    services.identity_map_set(identity=identity, service_name="basket", namespace="shop",
                              principal=writer(team))
    upload(team, pki.leaf("/ns/shop/sa/cart-sa").pem, service="cart")  # a new certificate
    identity.refresh_from_db()
    assert (identity.service_name, identity.mapping_source) == ("basket", MappingSource.MANUAL)
    event = AuditEvent.objects.get(action="mapping_set")
    assert event.after["service_name"] == "basket"
    assert event.subject_id == identity.spiffe_id and event.actor_kind == "system"
    # Clearing the manual mapping goes back to the rules.
    services.identity_map_set(identity=identity, service_name="", namespace="",
                              principal=writer(team))
    identity.refresh_from_db()
    assert identity.mapping_source == MappingSource.METADATA


def test_manual_mapping_resolves_unmapped_finding(team) -> None:
    upload(team, make_pki().leaf("/spire/agent/x509pop/node1").pem)
    identity = Identity.objects.get()
    assert identity.mapping_source == MappingSource.NONE
    finding = Finding.objects.get(category="unmapped")
    services.identity_map_set(identity=identity, service_name="node-agent", namespace="",
                              principal=writer(team))
    finding.refresh_from_db()
    assert finding.state == "resolved" and finding.auto_resolved


def test_mapping_needs_triage(team) -> None:
    upload(team, make_pki().leaf("/svc").pem)
    viewer = Principal(scopes_by_team={team.pk: frozenset({"read"})})
    with pytest.raises(PermissionError):
        services.identity_map_set(identity=Identity.objects.get(), service_name="x",
                                  namespace="", principal=viewer)


def known_services(team_id: int, environment: str) -> list[tuple[str, str]]:
    return [("payments", "pay")]


@override_settings(
    TRUSTRANK_IDENTITY_SERVICE_CATALOG="tests.identity.test_services.known_services"
)
def test_service_catalog_limits_rule_mapping(team) -> None:
    pki = make_pki()
    upload(team, pki.leaf("/ns/pay/sa/payments").pem + pki.leaf("/ns/pay/sa/ghost").pem)
    mapped = dict(Identity.objects.values_list("spiffe_id", "service_name"))
    assert mapped == {
        "spiffe://prod.example/ns/pay/sa/payments": "payments",
        "spiffe://prod.example/ns/pay/sa/ghost": "",
    }
    assert open_kinds(team)["unmapped"] == {"spiffe://prod.example/ns/pay/sa/ghost"}


@override_settings(TRUSTRANK_IDENTITY_MAPPING_RULES=[r"^/workload/(?P<service>[^/]+)$"])
def test_mapping_rule_setting(team) -> None:
    pki = make_pki()
    upload(team, pki.leaf("/workload/api").pem + pki.leaf("/other/api").pem)
    mapped = dict(Identity.objects.values_list("spiffe_id", "service_name"))
    assert mapped["spiffe://prod.example/workload/api"] == "api"
    assert mapped["spiffe://prod.example/other/api"] == ""


def test_policy_evaluation_writes_findings(team) -> None:
    principal = writer(team)
    services.service_policy_set(
        team=team, environment="prod", service_name="payments", namespace="",
        allowed_callers=["spiffe://prod.example/ns/web/*"], require_mtls=True, principal=principal,
    )
    edges = [
        ObservedEdge("frontend", "payments", "spiffe://prod.example/ns/web/sa/frontend", True),
        ObservedEdge("batch", "payments", "spiffe://prod.example/ns/ops/sa/batch", True),
        ObservedEdge("legacy", "payments", None, False),
        ObservedEdge("frontend", "catalog", None, False),  # no policy for catalog
    ]
    found = services.identity_policy_evaluate(team_id=team.pk, environment="prod", edges=edges)
    assert [f.evidence["caller_service"] for f in found] == ["batch", "legacy"]
    legacy = found[1]
    assert len(legacy.evidence["reasons"]) == 2 and legacy.severity == "high"
    # Evaluating the same edges again updates, never duplicates.
    again = services.identity_policy_evaluate(team_id=team.pk, environment="prod", edges=edges)
    assert [f.pk for f in again] == [f.pk for f in found]
    assert Finding.objects.filter(category="policy_violation").count() == 2
    assert AuditEvent.objects.filter(action="policy_created").count() == 1
    # Other teams' policies never apply.
    assert services.identity_policy_evaluate(team_id=team.pk + 999, environment="prod",
                                             edges=edges) == []


def test_policy_validation(team) -> None:
    with pytest.raises(ValueError, match="SPIFFE"):
        services.service_policy_set(
            team=team, environment="prod", service_name="payments",
            allowed_callers=["frontend"], require_mtls=False, principal=writer(team),
        )


def test_edge_evidence_for_the_graph(team) -> None:
    from trustrank.identity.engine import edge_identity_strength
    from trustrank.identity.selectors import identity_edge_evidence

    pki = make_pki()
    bundle(team, pki.root.pem)
    upload(team, pki.leaf("/a").pem + pki.leaf("/b").pem + pki.intermediate.pem)
    a = identity_edge_evidence(team_id=team.pk, environment="prod",
                               spiffe_id="spiffe://prod.example/a", mtls=True)
    b = identity_edge_evidence(team_id=team.pk, environment="prod",
                               spiffe_id="spiffe://prod.example/b", mtls=True)
    assert edge_identity_strength(caller=a, callee=b).value == 100
    stranger = identity_edge_evidence(team_id=team.pk + 1, environment="prod",
                                      spiffe_id="spiffe://prod.example/a", mtls=True)
    assert stranger.strength == 0


def test_a_team_with_audit_history_cannot_be_deleted(team) -> None:
    """The audit trail outlives mistakes: deleting a team that has one is refused, and
    nothing of the team is removed."""
    from django.db.models import ProtectedError

    pki = make_pki()
    upload(team, pki.leaf("/spire/agent/x").pem)  # opens findings with audit events
    assert AuditEvent.objects.filter(team=team).exists()
    with pytest.raises(ProtectedError):
        team.delete()
    assert Finding.objects.filter(team=team).exists() and Certificate.objects.exists()


def test_real_corpus_certificates(team) -> None:
    """Real certificates from badssl.com, SPIRE and go-spiffe get the verdicts they should."""
    from tests.identity.pki import data

    upload(team, data("badssl.com_wildcard-self-signed.pem"), env="web")
    upload(team, data("badssl.com_wildcard-sha1-intermediate.pem"), env="web")
    upload(team, data("go-spiffe_x509svid_wrong-leaf-ca-true.pem"), env="spire")
    upload(team, data("spire_certs_base_cert.pem"), env="spire")
    web = {c.subject.split(",")[0]: c for c in Certificate.objects.filter(environment="web")}
    assert web["CN=*.badssl.com"].chain_status == "expired"
    assert web["CN=COMODO SSL CA"].role == "ca"
    assert [w["kind"] for w in web["CN=COMODO SSL CA"].weaknesses] == ["weak_signature"]
    # A CA certificate that carries a workload SPIFFE ID is not an identity.
    assert list(Identity.objects.filter(environment="spire").values_list("spiffe_id", flat=True)) \
        == ["spiffe://example.org/spire/agent/join_token/token"]
    agent = Certificate.objects.get(environment="spire", role="leaf")
    assert agent.chain_status == "self_signed" and agent.strength == 30
    assert open_kinds(team)["unmapped"] == {"spiffe://example.org/spire/agent/join_token/token"}
