"""GET|PUT /api/v1/environments/<env>/services/<svc>/ingress: the operator's mark, audited,
and ranked again through the job system with the route in the exposure explanation."""

from __future__ import annotations

import pytest

from tests.ranking.scenario import build
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent, EvidenceChange
from trustrank.findings.services.audit_chain import audit_chain_verify
from trustrank.jobs.runner import job_run
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.requests import ranking_evidence_sweep
from trustrank.runtime.models import Service

pytestmark = pytest.mark.django_db
URL = "/api/v1/environments/prod/services/{}/ingress"


def put(client, service: str, body: object):
    return client.put(URL.format(service), body, format="json")


def rank_through_jobs(team) -> RankingRun:
    """What beat and a worker do: the sweep turns the recorded change into a run, the job
    system runs it."""
    assert ranking_evidence_sweep() == 1
    run = RankingRun.objects.get(team=team, status="queued")
    assert job_run(kind_name="ranking_run", job_id=str(run.pk)) == "done"
    run.refresh_from_db()
    assert run.status == "done", run.error
    return run


def exposure_factor(cve: str) -> dict:
    finding = Finding.objects.get(cve_id=cve)
    return next(f for f in finding.rank_context.data["explanation"] if f["name"] == "exposure")


def test_put_true_false_null_and_get(team, api, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 0
    build(team)
    client = api(team, "triage", "read")
    got = client.get(URL.format("etcd")).json()
    assert (got["ingress"], got["override"], got["source"]) == (False, None, "none")
    gateway = client.get(URL.format("payment-gateway")).json()
    assert gateway["ingress"] is False  # the scenario's internet edges set no candidate flag

    r = put(client, "etcd", {"ingress": True})
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["ingress"], body["override"], body["source"], body["set_via"]) == (
        True, True, "operator", "api")
    assert body["explanation"].startswith("operator marked ingress via API by ")
    assert body["set_at"] and client.get(URL.format("etcd")).json() == body

    r = put(client, "etcd", {"ingress": False})
    assert r.json()["ingress"] is False and r.json()["override"] is False
    assert "marked not an entry point" in r.json()["explanation"]
    r = put(client, "etcd", {"ingress": None})
    assert (r.json()["override"], r.json()["source"]) == (None, "none")
    assert Service.objects.get(name="etcd").ingress_override is None


def test_every_change_is_audited_in_the_chain(team, api):
    build(team)
    client = api(team, "triage")
    put(client, "etcd", {"ingress": True})
    put(client, "etcd", {"ingress": None})
    events = list(AuditEvent.objects.filter(team=team, action="ingress_set").order_by("id"))
    assert [(e.before["ingress_override"], e.after["ingress_override"]) for e in events] == [
        (None, True), (True, None)]
    assert events[0].subject_id == "prod/etcd" and events[0].actor_kind == "api_key"
    assert events[0].after["set_via"] == "api"
    assert audit_chain_verify(team_id=team.pk).intact
    assert EvidenceChange.objects.filter(team=team, what__contains="ingress of etcd").count() == 2


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({}, "'ingress' is required"),
        ({"ingress": True, "why": "x"}, "'why'"),
        ({"ingress": "yes"}, "'yes'"),
        ([{"ingress": True}], "got list"),
        ({"ingress": 1}, "true, false or null"),
    ],
)
def test_bad_bodies_are_refused_naming_the_problem(team, api, body, named):
    build(team)
    r = put(api(team, "triage"), "etcd", body)
    assert r.status_code == 400 and named in r.json()["detail"], r.content
    assert Service.objects.get(name="etcd").ingress_override is None
    assert not AuditEvent.objects.filter(action="ingress_set").exists()


def test_auth_scope_and_team_isolation(team, other_team, api, client):
    build(team)
    assert client.put(URL.format("etcd"), {"ingress": True},
                      content_type="application/json").status_code == 401
    assert client.get(URL.format("etcd")).status_code == 401
    r = put(api(team, "read"), "etcd", {"ingress": True})
    assert r.status_code == 403 and "triage" in r.json()["detail"]
    # Another team's service does not exist for this key.
    r = put(api(other_team, "triage"), "etcd", {"ingress": True})
    assert r.status_code == 404
    assert api(other_team, "read").get(URL.format("etcd")).status_code == 404
    assert Service.objects.get(name="etcd").ingress_override is None


def test_an_unknown_service_is_a_clear_404_and_nothing_is_created(team, api):
    build(team)
    client = api(team, "triage")
    r = put(client, "nobody", {"ingress": True})
    assert r.status_code == 404 and "no service named 'nobody'" in r.json()["detail"]
    r = client.put("/api/v1/environments/nowhere/services/etcd/ingress", {"ingress": True},
                   format="json")
    assert r.status_code == 404 and "no environment named 'nowhere'" in r.json()["detail"]
    assert not Service.objects.filter(name="nobody").exists()


def test_put_true_makes_the_service_open_with_the_route_explained(team, api, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 0
    build(team)
    client = api(team, "triage")
    assert put(client, "etcd", {"ingress": True}).status_code == 200
    run = rank_through_jobs(team)
    assert run.services["prod"]["etcd"]["exposure"] == "open"
    factor = exposure_factor("CVE-2020-15115")
    assert factor["value"] == "open"
    assert factor["source"].startswith("ingress path internet → etcd: internet → etcd: "
                                       "operator marked ingress via API by ")
    assert " UTC" in factor["source"]

    # false wins over the evidence, and the explanation says whose word it is.
    assert put(client, "payment-gateway", {"ingress": False}).status_code == 200
    run = rank_through_jobs(team)
    assert run.services["prod"]["payment-gateway"]["exposure"] == "controlled"
    factor = exposure_factor("CVE-2021-44228")
    assert factor["value"] == "controlled"
    assert "operator marked not an entry point via API by " in factor["source"]


def test_a_root_span_from_a_public_client_is_named_in_the_route(team, api):
    from django.utils import timezone
    from opentelemetry.trace import SpanKind

    from tests.ranking.test_ranking_runs import rerank
    from tests.runtime.helpers import SpanFactory
    from trustrank.parsers.otlp import spans_from_request
    from trustrank.runtime import services

    f = SpanFactory(env="production")
    # A public address (203.0.113.0/24 is a documentation range: internal, addresses.py).
    for _ in range(3):
        t = f.trace_id()
        root = f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t,
                      attributes={"client.address": "8.8.4.4"})
        call = f.span(service="web", name="GET api", kind=SpanKind.CLIENT, trace_id=t,
                      parent=root)
        f.span(service="api", name="GET /items", kind=SpanKind.SERVER, trace_id=t, parent=call)
    services.traces_aggregate_store(team_id=team.id, batch=spans_from_request(f.request()),
                                    received_at=timezone.now())
    run = rerank(team)
    hops = run.services["production"]["api"]["hops"]
    assert run.services["production"]["api"]["path"] == ["internet", "web", "api"]
    assert hops[0]["detail"] == (
        "root span from public client 8.8.4.4 (3 root spans from internet addresses)")
    got = api(team, "read").get("/api/v1/environments/production/services/web/ingress").json()
    assert (got["ingress"], got["source"]) == (True, "traces")
    assert got["evidence"] == ["root span from public client 8.8.4.4"]
