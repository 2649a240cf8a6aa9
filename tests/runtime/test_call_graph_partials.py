"""Partial call edge and library rows: every load appends its own, readers add them up,
compaction folds a finished bucket's rows into one, and no answer changes on the way."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db.models import Count, Q
from django.utils import timezone

from tests.runtime.helpers import shop
from trustrank.parsers.otlp_span_columns import spans_from_protobuf
from trustrank.ranking.inputs.graph import Rates, graph_read
from trustrank.runtime import engine_columns, engine_histograms, selectors, services
from trustrank.runtime.models import CallEdgeBucket, Environment, LibraryBucket, Service
from trustrank.runtime.services.compaction import call_graph_compact

pytestmark = pytest.mark.django_db

LONG_AGO = timezone.now() - timedelta(days=30)
LATER = timezone.now() + timedelta(days=1)


def load(team, body: bytes) -> None:
    services.traces_aggregate_store(
        team_id=team.id, batch=spans_from_protobuf(body), received_at=timezone.now()
    )


def answers(team) -> dict[str, object]:
    """What the readers of the call graph say: the service map and edge list, per-service
    rates and libraries, and the ranking's graph."""
    env = Environment.objects.get(team=team)
    ids = list(Service.objects.filter(environment=env).values_list("id", flat=True))
    rows = list(selectors.edges_aggregate(edge_filter=Q(environment=env), since=LONG_AGO))
    summaries = selectors.edges_summarize(rows=rows, since=LONG_AGO)
    minutes = (timezone.now() - LONG_AGO).total_seconds() / 60
    graph = graph_read(team.id, LONG_AGO, minutes, Rates.for_window(LONG_AGO, minutes))
    return {
        "map": selectors.graph_for_environment(environment=env, since=LONG_AGO),
        "edges": sorted(
            (s.caller.name, s.callee.name, s.calls, s.errors, s.tls_calls, s.mtls_calls,
             s.last_seen, tuple(sorted(s.percentiles_ms.items())))
            for s in summaries
        ),
        "rates": {k: vars(v) for k, v in selectors.service_rates(
            service_ids=ids, since=LONG_AGO).items()},
        "libraries": dict(selectors.service_libraries(service_ids=ids, since=LONG_AGO)),
        "graph": (graph.services, graph.edges, graph.peers, graph.origins),
    }


def edge_totals() -> Counter[tuple[str, str, object]]:
    totals: Counter[tuple[str, str, object]] = Counter()
    for b in CallEdgeBucket.objects.select_related("caller", "callee"):
        totals[(b.caller.name, b.callee.name, b.bucket_start)] += b.calls
    return totals


def library_totals() -> Counter[tuple[str, str, str, object]]:
    totals: Counter[tuple[str, str, str, object]] = Counter()
    for b in LibraryBucket.objects.select_related("service"):
        totals[(b.service.name, b.kind, b.name, b.bucket_start)] += b.spans
    return totals


def most_rows_per_key() -> tuple[int, int]:
    edges = CallEdgeBucket.objects.values("caller", "callee", "bucket_start").annotate(
        n=Count("id")).order_by("-n").values_list("n", flat=True).first()
    libraries = LibraryBucket.objects.values(
        "service", "bucket_start", "kind", "name", "version").annotate(
        n=Count("id")).order_by("-n").values_list("n", flat=True).first()
    return edges or 0, libraries or 0


def test_loads_append_partial_rows_that_add_up_to_the_aggregate(team):
    body = shop(11).body()
    load(team, body)
    load(team, body)
    # Every (caller, callee, bucket) the two loads share is two rows now, not one updated.
    assert most_rows_per_key() == (2, 2)
    # Added up, the rows are twice what one export aggregates to (the old single row).
    reference = engine_columns.aggregate(
        spans_from_protobuf(body).resources, bucket_seconds=60,
    )
    expected: Counter[str] = Counter()
    for (_env, caller, callee, _bucket), stat in reference.edges.items():
        if callee[0] == "service" and caller[0] in ("service", "internet"):
            expected[caller[2], callee[2]] += 2 * stat.calls
    got: Counter[str] = Counter()
    for (caller, callee, _), calls in edge_totals().items():
        if (caller, callee) in expected:
            got[caller, callee] += calls
    assert got == expected and expected
    java = sum(spans for (_s, kind, _n, _b), spans in library_totals().items()
               if kind == "java_frame")
    expected_java = sum(count for key, count in reference.libraries.items()
                        if key[3] == "java_frame")
    assert java == 2 * expected_java > 0


def test_compaction_folds_each_bucket_into_one_row_and_no_answer_changes(team):
    for seed in (11, 12):
        body = shop(seed).body()
        load(team, body)
        load(team, body)
    before = answers(team)
    edges_before, libraries_before = edge_totals(), library_totals()
    hists_before: dict[tuple[int, int, object], list[list[int]]] = {}
    for b in CallEdgeBucket.objects.all():
        hists_before.setdefault((b.caller_id, b.callee_id, b.bucket_start), []).append(b.hist)
    rows_before = CallEdgeBucket.objects.count()

    folded = call_graph_compact(before=LATER, since=LONG_AGO)

    assert folded["edge_buckets_folded"] > 0 and folded["library_buckets_folded"] > 0
    assert most_rows_per_key() == (1, 1)
    assert CallEdgeBucket.objects.count() < rows_before
    assert edge_totals() == edges_before
    assert library_totals() == libraries_before
    for b in CallEdgeBucket.objects.all():
        merged = engine_histograms.hist_merge(hists_before[(b.caller_id, b.callee_id, b.bucket_start)])
        assert b.hist == merged
    assert answers(team) == before
    # Again: nothing left to fold, nothing changes.
    assert call_graph_compact(before=LATER, since=LONG_AGO) == {
        "edge_buckets_folded": 0, "library_buckets_folded": 0}
    assert answers(team) == before


def test_compaction_leaves_buckets_outside_its_range_alone(team):
    body = shop(13).body()
    load(team, body)
    load(team, body)
    oldest = CallEdgeBucket.objects.order_by("bucket_start").values_list(
        "bucket_start", flat=True).first()
    rows = CallEdgeBucket.objects.count()
    # The cutoff before every bucket: the loads' minutes are still open, nothing is folded.
    assert call_graph_compact(before=oldest, since=LONG_AGO)["edge_buckets_folded"] == 0
    assert CallEdgeBucket.objects.count() == rows


def test_the_sweep_compacts_finished_buckets(team, settings):
    # Nothing is settled by this sweep (its other work adds edges of its own).
    settings.TRUSTRANK_TRACE_MATCH_SECONDS = 86_400
    body = shop(14).body()
    load(team, body)
    load(team, body)
    totals = edge_totals()
    result = services.traces_sweep(now=timezone.now() + timedelta(hours=1))
    assert result["edge_buckets_folded"] > 0
    assert most_rows_per_key() == (1, 1)
    assert edge_totals() == totals
