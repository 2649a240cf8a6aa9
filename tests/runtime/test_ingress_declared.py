"""The ingress API for a service a deployment declares that sends no traces: the operator's
mark is kept on the deployment (no Service row appears, so the ranking still knows the
service sends no traces), audited, and ranked through the job system: true makes it open,
false controlled (not an entry point, but internal callers are possible), null unknown
again. A mark set before the first trace still counts after it."""

from __future__ import annotations

import pytest
from django.utils import timezone
from opentelemetry.trace import SpanKind

from tests.ranking.scenario import build
from tests.ranking.test_untraced_services import _declare_by_sbom
from tests.runtime.helpers import SpanFactory
from tests.runtime.test_ingress_api import rank_through_jobs
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.audit_chain import audit_chain_verify
from trustrank.parsers.otlp import spans_from_request
from trustrank.runtime import services
from trustrank.runtime.models import Deployment, Service

pytestmark = pytest.mark.django_db
URL = "/api/v1/environments/staging/services/etcd-edge/ingress"
CVE = "CVE-2020-15115"


@pytest.fixture
def edge(team, api, settings):
    """The seed scenario plus etcd-edge in staging, declared by its SBOM upload, no traces."""
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 0
    build(team)
    _declare_by_sbom(api(team, "sbom:write"), team, project="etcd-edge",
                     environment="staging", service="etcd-edge", human_impact="medium")
    return api(team, "triage", "read")


def _row(team) -> dict:
    return Finding.objects.get(team=team, cve_id=CVE, project__name="etcd-edge").rank_context.data


def _factor(team, name: str) -> dict:
    return next(f for f in _row(team)["explanation"] if f["name"] == name)


def test_get_and_put_on_a_declared_untraced_service(team, edge):
    got = edge.get(URL).json()
    assert (got["traced"], got["ingress"], got["override"], got["source"]) == (
        False, False, None, "none")
    assert got["explanation"].startswith("declared by a deployment but sends no traces")

    r = edge.put(URL, {"ingress": True}, format="json")
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["traced"], body["ingress"], body["override"], body["source"]) == (
        False, True, True, "operator")
    assert body["explanation"].startswith("operator marked ingress via API by ")
    assert body["set_via"] == "api" and body["set_at"]
    assert edge.get(URL).json() == body
    # Held on the deployment: no Service row pretends the service sent a trace.
    assert not Service.objects.filter(name="etcd-edge").exists()
    assert Deployment.objects.get(service_name="etcd-edge").ingress_override is True

    body = edge.put(URL, {"ingress": False}, format="json").json()
    assert (body["ingress"], body["override"]) == (False, False)
    assert "internal callers are possible" in body["explanation"]
    body = edge.put(URL, {"ingress": None}, format="json").json()
    assert (body["override"], body["source"], body["set_by"]) == (None, "none", "")

    events = list(AuditEvent.objects.filter(team=team, action="ingress_set").order_by("id"))
    assert [(e.before["ingress_override"], e.after["ingress_override"]) for e in events] == [
        (None, True), (True, False), (False, None)]
    assert {(e.subject_type, e.subject_id) for e in events} == {
        ("runtime.deployment", "staging/etcd-edge")}
    assert audit_chain_verify(team_id=team.pk).intact


def test_scope_isolation_and_the_404_for_an_unknown_service(team, other_team, api, edge):
    r = api(team, "read").put(URL, {"ingress": True}, format="json")
    assert r.status_code == 403 and "triage" in r.json()["detail"]
    assert api(other_team, "triage").put(URL, {"ingress": True}, format="json").status_code == 404
    assert Deployment.objects.get(service_name="etcd-edge").ingress_override is None
    # Neither traced nor declared: still a 404 naming both ways TrustRank learns a service.
    r = edge.put("/api/v1/environments/staging/services/etcd-typo/ingress", {"ingress": True},
                 format="json")
    assert r.status_code == 404 and "a deployment declares it" in r.json()["detail"]
    assert not Service.objects.filter(name="etcd-typo").exists()


def test_the_mark_ranks_open_controlled_then_unknown_again(team, edge, client, make_user):
    client.force_login(make_user("viewer", team=team, role="viewer"))
    assert edge.put(URL, {"ingress": True}, format="json").status_code == 200
    run = rank_through_jobs(team)
    assert run.services["staging"]["etcd-edge"]["exposure"] == "open"
    exposure = _factor(team, "exposure")
    assert (exposure["value"], exposure["confidence"]) == ("open", "high")
    assert exposure["source"].startswith(
        "ingress path internet → etcd-edge: internet → etcd-edge: operator marked ingress via "
        "API by ")
    # Still a service that sends no traces: whether the component runs stays unknown.
    assert _row(team)["reachability"] == "unknown"

    assert edge.put(URL, {"ingress": False}, format="json").status_code == 200
    run = rank_through_jobs(team)
    assert run.services["staging"]["etcd-edge"]["exposure"] == "controlled"
    exposure = _factor(team, "exposure")
    assert exposure["value"] == "controlled"
    assert exposure["source"].startswith("operator marked not an entry point via API by ")
    assert exposure["source"].endswith(
        "service declared in staging, sends no traces, so internal callers are possible")
    # The finding page's sentence says why.
    edge_finding = Finding.objects.get(team=team, cve_id=CVE, project__name="etcd-edge")
    html = client.get(f"/findings/{edge_finding.pk}/").content.decode()
    assert ("an operator marked etcd-edge not an entry point, and it sends no traces, so "
            "internal callers are possible") in html
    # Controlled still sorts above the copy known to be small (SSVC level).
    small = Finding.objects.get(team=team, cve_id=CVE, project__name="etcd")
    assert edge_finding.rank < small.rank

    assert edge.put(URL, {"ingress": None}, format="json").status_code == 200
    run = rank_through_jobs(team)
    assert run.services["staging"]["etcd-edge"]["exposure"] == "unknown"
    assert _factor(team, "exposure")["value"] == "unknown"


def test_a_mark_set_before_the_first_trace_counts_after_it(team, edge, client, make_user):
    assert edge.put(URL, {"ingress": True}, format="json").status_code == 200
    f = SpanFactory(env="staging")
    f.span(service="etcd-edge", name="GET /v3/kv", kind=SpanKind.SERVER, trace_id=f.trace_id(),
           attributes={"client.address": "10.0.0.7"})
    services.traces_aggregate_store(team_id=team.id, batch=spans_from_request(f.request()),
                                    received_at=timezone.now())
    assert Service.objects.filter(name="etcd-edge").exists()
    got = edge.get(URL).json()
    assert (got["traced"], got["override"], got["source"]) == (True, True, "operator")
    # The service page says so too.
    client.force_login(make_user("viewer", team=team, role="viewer"))
    row = Service.objects.get(name="etcd-edge")
    html = client.get(f"/services/{row.pk}/").content.decode()
    assert "set by an operator before its first trace" in html
    run = rank_through_jobs(team)
    assert run.services["staging"]["etcd-edge"]["exposure"] == "open"
    assert "operator marked ingress via API" in _factor(team, "exposure")["source"]
    # The row's own mark replaces it: null returns the service to the evidence.
    body = edge.put(URL, {"ingress": None}, format="json").json()
    assert (body["override"], body["source"]) == (None, "none")
    assert Deployment.objects.get(service_name="etcd-edge").ingress_override is None
    run = rank_through_jobs(team)
    assert run.services["staging"]["etcd-edge"]["exposure"] != "open"
