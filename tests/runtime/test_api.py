"""GET /api/v1/environments[/<name>/services|edges]: scope read, paginated, per team."""

from __future__ import annotations

import pytest
from django.utils import timezone
from opentelemetry.trace import SpanKind

from tests.runtime.helpers import SpanFactory
from trustrank.parsers.otlp import spans_from_request
from trustrank.runtime import services

pytestmark = pytest.mark.django_db


def shop(team, *, env: str = "production", calls: int = 20) -> None:
    f = SpanFactory(env=env)
    for i in range(calls):
        t = f.trace_id()
        root = f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t,
                      duration_ms=20)
        call = f.span(service="web", name="GET api", kind=SpanKind.CLIENT, trace_id=t,
                      parent=root, duration_ms=i + 1)
        f.span(service="api", name="GET /items", kind=SpanKind.SERVER, trace_id=t, parent=call,
               duration_ms=i + 1, error=i % 10 == 0,
               attributes={"code.namespace": "com.shop.Items"},
               scope=("org.apache.logging.log4j", "2.14.1"))
    services.traces_aggregate_store(team_id=team.id, batch=spans_from_request(f.request()),
                                    received_at=timezone.now())


def test_environments_list_is_paginated_and_per_team(team, other_team, api):
    shop(team, env="production")
    shop(team, env="staging")
    shop(other_team, env="secret-env")
    body = api(team, "read").get("/api/v1/environments?page_size=1").json()
    assert body["count"] == 2
    assert len(body["results"]) == 1
    assert body["next"]
    names = {e["name"] for e in api(team, "read").get("/api/v1/environments").json()["results"]}
    assert names == {"production", "staging"}


def test_services_show_ingress_rates_and_libraries(team, api):
    shop(team)
    body = api(team, "read").get("/api/v1/environments/production/services").json()
    assert body["count"] == 2
    by_name = {s["name"]: s for s in body["results"]}
    assert by_name["web"]["ingress"] is True
    assert by_name["api"]["ingress"] is False
    assert by_name["api"]["calls_in"] == 20
    assert by_name["api"]["calls_in_per_minute"] == pytest.approx(20 / 60, abs=0.01)
    libs = {(lib["kind"], lib["name"]): lib["spans"] for lib in by_name["api"]["libraries"]}
    assert libs[("scope", "org.apache.logging.log4j")] == 20
    assert libs[("code", "com.shop.Items")] == 20


def test_edges_with_percentiles_over_a_window(team, api):
    shop(team)
    client = api(team, "read")
    body = client.get("/api/v1/environments/production/edges?window=15m").json()
    assert body["count"] == 2
    edge = next(e for e in body["results"] if e["caller"] == "web")
    assert (edge["callee"], edge["calls"], edge["errors"]) == ("api", 20, 2)
    assert edge["p50_ms"] == pytest.approx(10, rel=0.15)
    assert edge["p99_ms"] == pytest.approx(20, rel=0.15)
    assert edge["p50_ms"] <= edge["p95_ms"] <= edge["p99_ms"]
    internet = next(e for e in body["results"] if e["caller"] == "internet")
    assert internet["callee"] == "web"
    filtered = client.get("/api/v1/environments/production/edges?caller=web").json()
    assert filtered["count"] == 1


def test_old_buckets_fall_out_of_a_short_window(team, api):
    f = SpanFactory()
    f.now -= 3 * 3600 * 10**9
    f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    services.traces_aggregate_store(team_id=team.id, batch=spans_from_request(f.request()),
                                    received_at=timezone.now())
    client = api(team, "read")
    assert client.get("/api/v1/environments/production/edges?window=1h").json()["count"] == 0
    assert client.get("/api/v1/environments/production/edges?window=6h").json()["count"] == 1
    assert client.get("/api/v1/environments/production/edges?window=all").json()["count"] == 1


def test_bad_window_is_a_clear_400(team, api):
    shop(team)
    response = api(team, "read").get("/api/v1/environments/production/edges?window=soon")
    assert response.status_code == 400
    assert "window" in response.json()["errors"]


def test_other_teams_environment_is_404(team, other_team, api):
    shop(team)
    client = api(other_team, "read")
    assert client.get("/api/v1/environments").json()["count"] == 0
    assert client.get("/api/v1/environments/production/services").status_code == 404
    assert client.get("/api/v1/environments/production/edges").status_code == 404


def test_read_scope_is_required(team, api, client):
    shop(team)
    assert client.get("/api/v1/environments").status_code == 401
    assert api(team, "traces:write").get("/api/v1/environments").status_code == 403


def test_edges_api_query_count_does_not_grow_with_edges(team, api, django_assert_max_num_queries):
    shop(team)
    client = api(team, "read")
    with django_assert_max_num_queries(10):
        client.get("/api/v1/environments/production/edges")
    # Two more than the traced list alone: the declared untraced services' count and the
    # team's Kubernetes entry points (the ingress state of every row).
    with django_assert_max_num_queries(12):
        client.get("/api/v1/environments/production/services")
