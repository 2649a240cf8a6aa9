"""Aggregation runs before the team's lock; what changed meanwhile is caught under it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone
from opentelemetry.trace import SpanKind

from tests.runtime.helpers import SpanFactory
from trustrank.parsers.otlp_span_columns import spans_from_protobuf
from trustrank.runtime.engine import peer_keys
from trustrank.runtime.models import (
    CallEdgeBucket,
    Environment,
    NodeKind,
    OpenClientSpan,
    Service,
    ServiceAlias,
)
from trustrank.runtime.services.aggregation import (
    _aggregate,
    _guessed_peers,
    _known_peers,
    traces_aggregate_store,
    traces_aggregate_store_locked,
)

pytestmark = pytest.mark.django_db


def calls_to(peer: str) -> bytes:
    f = SpanFactory(seed=3)
    for _ in range(5):
        tid = f.trace_id()
        root = f.span(service="frontend", name="GET /", kind=SpanKind.SERVER, trace_id=tid)
        f.span(service="frontend", name="POST /pay", kind=SpanKind.CLIENT, trace_id=tid,
               parent=root, start_offset_ms=1, attributes={"peer.service": peer})
    return f.body()


def test_a_peer_settled_by_another_job_meanwhile_is_stored_as_that_job_left_it(team):
    # The frontend exists, the peer is nobody yet: this is what the job reads unlocked.
    traces_aggregate_store(team_id=team.id, batch=spans_from_protobuf(calls_to("other")),
                           received_at=timezone.now())
    batch = spans_from_protobuf(calls_to("api.stripe.com"))
    keys = peer_keys(batch.resources)
    with connection.cursor() as cursor:
        stale = _known_peers(cursor, team_id=team.id, keys=keys)
    agg = _aggregate(batch, stale)
    assert [c.peer for c in agg.open_clients] == ["api.stripe.com"] * 5
    # Meanwhile another job (the sweep) settled the peer as an external one.
    env = Environment.objects.get(team=team)
    Service.objects.create(environment=env, kind=NodeKind.EXTERNAL, name="api.stripe.com",
                           first_seen=timezone.now(), last_seen=timezone.now())

    traces_aggregate_store_locked(team_id=team.id, batch=batch, agg=agg, known=stale,
                                  received_at=timezone.now(), keys=keys)

    # Counted as calls to the external peer at once, as a job that read it under the lock
    # would; not held as open client spans that wait for a server span that never comes.
    assert not OpenClientSpan.objects.filter(peer="api.stripe.com").exists()
    edge = CallEdgeBucket.objects.filter(callee__name="api.stripe.com")
    assert sum(edge.values_list("calls", flat=True)) == 5


def test_a_job_reads_only_the_known_peers_its_spans_name(team):
    """A team's graph may hold 100,000 services: a trace job looks up the few its client
    spans name (by name in any case, by first DNS label, by alias, settled externals)."""
    now = timezone.now()
    env = Environment.objects.create(team=team, name="production", first_seen=now, last_seen=now)

    def service(name: str, kind: str = NodeKind.SERVICE) -> Service:
        return Service.objects.create(environment=env, kind=kind, name=name, first_seen=now,
                                      last_seen=now)

    Service.objects.bulk_create(
        Service(environment=env, kind=NodeKind.SERVICE, name=f"svc-{i}", first_seen=now,
                last_seen=now)
        for i in range(300)
    )
    cart = service("CartService")
    payments = service("payments")
    service("api.stripe.com", NodeKind.EXTERNAL)
    service("unnamed.example.com", NodeKind.EXTERNAL)
    ServiceAlias.objects.create(environment=env, peer="billing", service=payments)
    f = SpanFactory(seed=5)
    for peer in ("cartservice:7070", "cartservice.shop.svc.cluster.local", "billing",
                 "api.stripe.com", "nobody"):
        tid = f.trace_id()
        root = f.span(service="frontend", name="GET /", kind=SpanKind.SERVER, trace_id=tid)
        f.span(service="frontend", name="call", kind=SpanKind.CLIENT, trace_id=tid,
               parent=root, start_offset_ms=1, attributes={"peer.service": peer})
    batch = spans_from_protobuf(f.body())
    keys = peer_keys(batch.resources)
    assert keys == {("production", "cartservice"), ("production", "cartservice.shop.svc.cluster.local"),
                    ("production", "billing"), ("production", "api.stripe.com"),
                    ("production", "api"), ("production", "nobody")}

    with connection.cursor() as cursor:
        known, externals = _known_peers(cursor, team_id=team.id, keys=keys)

    service_key = (NodeKind.SERVICE, "", cart.name)
    assert known == {("production", "cartservice"): service_key,
                     ("production", "billing"): (NodeKind.SERVICE, "", "payments")}
    assert externals == {("production", "api.stripe.com")}
    # The job's calls resolve as they did when the whole graph was read.
    counts = traces_aggregate_store(team_id=team.id, batch=batch, received_at=timezone.now())
    assert counts["spans"] == 10
    callees = set(CallEdgeBucket.objects.filter(caller__name="frontend")
                  .values_list("callee__name", flat=True))
    assert {"api.stripe.com"} <= callees
    assert set(OpenClientSpan.objects.values_list("peer", flat=True)) == {
        "cartservice", "cartservice.shop.svc.cluster.local", "billing", "nobody"
    }
    assert set(OpenClientSpan.objects.values_list("target__name", flat=True)) == {
        "CartService", "payments", None
    }


def test_the_peers_read_under_the_lock_are_the_next_jobs_guess(team):
    batch = spans_from_protobuf(calls_to("api.stripe.com"))
    keys = peer_keys(batch.resources)
    assert _guessed_peers(team.id, keys) is None
    traces_aggregate_store(team_id=team.id, batch=batch, received_at=timezone.now())
    with connection.cursor() as cursor:
        read = _known_peers(cursor, team_id=team.id, keys=keys)
    assert _guessed_peers(team.id, keys) == read
    # A key this process never read under the lock is no guess.
    assert _guessed_peers(team.id, keys | {("production", "other")}) is None
