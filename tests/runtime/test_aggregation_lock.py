"""Aggregation runs before the team's lock; what changed meanwhile is caught under it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone
from opentelemetry.trace import SpanKind

from tests.runtime.helpers import SpanFactory
from trustrank.parsers.otlp_span_columns import spans_from_protobuf
from trustrank.runtime.models import (
    CallEdgeBucket,
    Environment,
    NodeKind,
    OpenClientSpan,
    Service,
)
from trustrank.runtime.services.aggregation import (
    _aggregate,
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
    with connection.cursor() as cursor:
        stale = _known_peers(cursor, team_id=team.id)
    agg = _aggregate(batch, stale)
    assert [c.peer for c in agg.open_clients] == ["api.stripe.com"] * 5
    # Meanwhile another job (the sweep) settled the peer as an external one.
    env = Environment.objects.get(team=team)
    Service.objects.create(environment=env, kind=NodeKind.EXTERNAL, name="api.stripe.com",
                           first_seen=timezone.now(), last_seen=timezone.now())

    traces_aggregate_store_locked(team_id=team.id, batch=batch, agg=agg, known=stale,
                                  received_at=timezone.now())

    # Counted as calls to the external peer at once, as a job that read it under the lock
    # would; not held as open client spans that wait for a server span that never comes.
    assert not OpenClientSpan.objects.filter(peer="api.stripe.com").exists()
    edge = CallEdgeBucket.objects.filter(callee__name="api.stripe.com")
    assert sum(edge.values_list("calls", flat=True)) == 5
