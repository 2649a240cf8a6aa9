"""The service map and service pages, for logged-in users of the owning team only."""

from __future__ import annotations

import pytest
from django.utils import timezone
from opentelemetry.trace import SpanKind

from tests.runtime.helpers import SpanFactory
from trustrank.parsers.otlp import spans_from_request
from trustrank.runtime import services
from trustrank.runtime.models import Service

pytestmark = pytest.mark.django_db


@pytest.fixture
def graph(team, settings):
    settings.TRUSTRANK_TRACE_SAMPLE_RATE = 1.0
    f = SpanFactory()
    for _ in range(5):
        t = f.trace_id()
        root = f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t)
        call = f.span(service="web", name="POST pay", kind=SpanKind.CLIENT, trace_id=t,
                      parent=root, attributes={"peer.service": "payments"})
        f.span(service="payments", name="POST /pay", kind=SpanKind.SERVER, trace_id=t,
               parent=call, scope=("org.apache.logging.log4j", "2.14.1"))
        f.span(service="gateway", name="GET /lost", kind=SpanKind.CLIENT, trace_id=f.trace_id(),
               start_offset_ms=1, attributes={"peer.service": "payments"},
               resource=f.resource("gateway"))
        f.span(service="payments", name="POST /pay", kind=SpanKind.SERVER,
               trace_id=f.trace_id(), start_offset_ms=2, duration_ms=5)
    services.traces_aggregate_store(team_id=team.id, batch=spans_from_request(f.request()),
                                    received_at=timezone.now())
    return f


def login(client, make_user, team, role="viewer"):
    user = make_user(f"u-{role}-{team.pk}", team=team, role=role)
    client.force_login(user)
    return user


def test_service_map_page_embeds_the_graph(client, make_user, team, graph,
                                           django_assert_max_num_queries):
    login(client, make_user, team)
    # The map's latest call edge write, then (not kept yet) its busiest calls.
    with django_assert_max_num_queries(16):
        response = client.get("/services/")
    assert response.status_code == 200
    # Kept: the page again reads the latest write and not the calls.
    with django_assert_max_num_queries(15):
        assert client.get("/services/").status_code == 200
    html = response.content.decode()
    assert 'id="service-graph"' in html
    assert "cytoscape" in html or "npm ci" in html
    graph_data = response.context["graph"]
    labels = {n["label"] for n in graph_data["nodes"]}
    assert {"web", "payments", "internet", "gateway"} <= labels
    web = next(n for n in graph_data["nodes"] if n["label"] == "web")
    assert web["ingress"] is True
    edge_pairs = {
        (e["source"], e["target"]) for e in graph_data["edges"]
    }
    ids = {n["label"]: n["id"] for n in graph_data["nodes"]}
    assert (ids["web"], ids["payments"]) in edge_pairs
    assert "Broken trace context" in html and "gateway" in html


def test_services_table_answers_htmx_with_the_fragment(client, make_user, team, graph):
    login(client, make_user, team)
    response = client.get("/services/?name=pay", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "<html" not in html
    assert "payments" in html and ">web<" not in html


def test_service_page_shows_callers_libraries_findings_and_samples(client, make_user, team,
                                                                    graph):
    login(client, make_user, team)
    payments = Service.objects.get(name="payments", kind="service")
    response = client.get(f"/services/{payments.pk}/?window=1h")
    assert response.status_code == 200
    html = response.content.decode()
    callers = {e.caller.name for e, _ in response.context["callers"]}
    assert callers == {"web", "internet"}
    assert "org.apache.logging.log4j" in html
    assert response.context["broken"][0].evidence["caller"] == "gateway"
    assert response.context["samples"]
    trace_id = response.context["samples"][0].trace_id
    trace_page = client.get(f"/services/traces/{payments.environment_id}/{trace_id}/")
    assert trace_page.status_code == 200
    assert "payments" in trace_page.content.decode()


def test_operator_can_confirm_and_deny_ingress(client, make_user, team, graph):
    login(client, make_user, team, role="triager")
    gateway = Service.objects.get(name="gateway", kind="service")
    assert not gateway.is_ingress
    response = client.post(f"/services/{gateway.pk}/ingress", {"ingress": "confirm"})
    assert response.status_code == 302
    gateway.refresh_from_db()
    assert gateway.is_ingress and gateway.ingress_override is True
    web = Service.objects.get(name="web")
    client.post(f"/services/{web.pk}/ingress", {"ingress": "deny"})
    web.refresh_from_db()
    assert web.ingress_candidate and not web.is_ingress
    client.post(f"/services/{web.pk}/ingress", {"ingress": "auto"})
    web.refresh_from_db()
    assert web.is_ingress and web.ingress_override is None


def test_viewer_cannot_change_ingress(client, make_user, team, graph):
    login(client, make_user, team, role="viewer")
    web = Service.objects.get(name="web")
    assert client.post(f"/services/{web.pk}/ingress", {"ingress": "deny"}).status_code == 403


def test_other_team_cannot_see_the_services(client, make_user, team, other_team, graph):
    login(client, make_user, other_team, role="admin")
    web = Service.objects.get(name="web")
    response = client.get("/services/")
    assert response.status_code == 200
    assert "web" not in {n["label"] for n in (response.context.get("graph") or {"nodes": []})[
        "nodes"]}
    assert client.get(f"/services/{web.pk}/").status_code == 404
    assert client.get(f"/services/?environment={web.environment_id}").status_code == 404
    assert client.post(f"/services/{web.pk}/ingress", {"ingress": "deny"}).status_code == 404
    assert client.get(f"/services/traces/{web.environment_id}/{'0' * 32}/").status_code == 404


def test_pages_need_login(client, graph):
    assert client.get("/services/").status_code == 302


def test_service_page_query_count_is_bounded(client, make_user, team, graph,
                                             django_assert_max_num_queries):
    login(client, make_user, team)
    payments = Service.objects.get(name="payments", kind="service")
    with django_assert_max_num_queries(20):
        response = client.get(f"/services/{payments.pk}/?window=24h")
    assert response.status_code == 200


def test_service_map_draws_the_busiest_calls_and_a_bounded_number_of_other_services(
        client, make_user, team, graph, monkeypatch):
    """At 100,000 services a map of every one was megabytes no browser lays out: the map
    draws the calls' ends and at most GRAPH_MAX_OTHER_NODES others, and says so."""
    from trustrank.runtime import selectors

    monkeypatch.setattr(selectors, "GRAPH_MAX_OTHER_NODES", 3)
    web = Service.objects.get(name="web", kind="service")
    now = timezone.now()
    Service.objects.bulk_create(
        Service(environment_id=web.environment_id, kind="service", namespace="",
                name=f"idle-{n:02d}", first_seen=now, last_seen=now)
        for n in range(8)
    )
    login(client, make_user, team)
    response = client.get("/services/")
    graph_data = response.context["graph"]
    labels = [n["label"] for n in graph_data["nodes"]]
    ends = {e[side] for e in graph_data["edges"] for side in ("source", "target")}
    # Every end of a drawn call, then the first three others by name.
    assert {"web", "payments", "internet"} <= set(labels)
    assert ends <= {n["id"] for n in graph_data["nodes"]}
    others = sorted(Service.objects.filter(environment_id=web.environment_id, kind="service")
                    .exclude(pk__in=[int(i) for i in ends]).values_list("name", flat=True))
    assert len(others) > 3
    drawn_others = sorted(n["name"] for n in graph_data["nodes"]
                          if n["kind"] == "service" and n["id"] not in ends)
    assert drawn_others == others[:3]
    assert "idle-07" not in labels
    services_total = Service.objects.filter(environment_id=web.environment_id,
                                            kind="service").count()
    assert graph_data["services_total"] == services_total
    assert graph_data["services_drawn"] == sum(
        1 for n in graph_data["nodes"] if n["kind"] == "service")
    assert graph_data["services_drawn"] < services_total
    html = response.content.decode()
    assert (f"The map draws {graph_data['services_drawn']} of the {services_total} services"
            in html)
    # The table still lists every service (its first page holds them all here).
    assert "idle-07" in html
