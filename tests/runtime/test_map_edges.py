"""The service map's busiest calls are kept until a call edge row of the environment is
written or the window moves by a bucket (`runtime.map_edges`): a second view of the map
runs no aggregate, and a load's calls are on the next view."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.runtime.helpers import shop
from tests.runtime.test_call_graph_partials import LONG_AGO, load
from trustrank.runtime import selectors
from trustrank.runtime.map_edges import window_start
from trustrank.runtime.models import CallEdgeBucket, Environment

pytestmark = pytest.mark.django_db


def _aggregates(queries) -> int:
    return sum(1 for q in queries if "runtime_calledgebucket" in q["sql"]
               and 'SUM("runtime_calledgebucket"."calls")' in q["sql"])


def _map(env: Environment, since=LONG_AGO) -> tuple[dict, int]:
    with CaptureQueriesContext(connection) as queries:
        graph = selectors.graph_for_environment(environment=env, since=since)
    return graph, _aggregates(queries.captured_queries)


def _calls(graph: dict) -> int:
    return sum(e["calls"] for e in graph["edges"])


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def test_a_second_view_reads_the_kept_map_and_a_load_makes_a_new_one(team):
    load(team, shop(11).body())
    env = Environment.objects.get(team=team)
    first, ran = _map(env)
    assert ran == 1 and first["edges"]
    again, ran = _map(env)
    assert ran == 0 and again == first
    # Another load writes rows: the next view aggregates them.
    load(team, shop(11).body())
    after, ran = _map(env)
    assert ran == 1 and _calls(after) == 2 * _calls(first)


def test_another_window_or_environment_is_its_own_map(team, other_team):
    load(team, shop(11).body())
    load(other_team, shop(12).body())
    env, other = (Environment.objects.get(team=t) for t in (team, other_team))
    _map(env)
    assert _map(env, since=timezone.now() - timedelta(days=2))[1] == 1
    theirs, ran = _map(other)
    assert ran == 1
    assert {e["id"] for e in theirs["edges"]}.isdisjoint(
        {e["id"] for e in _map(env)[0]["edges"]})


def test_nothing_is_kept_when_the_setting_is_zero(team, settings):
    settings.TRUSTRANK_SERVICE_MAP_KEEP_SECONDS = 0
    load(team, shop(11).body())
    env = Environment.objects.get(team=team)
    assert _map(env)[1] == 1 and _map(env)[1] == 1


def test_a_row_changed_without_a_write_mark_is_seen_once_the_map_expires(team, settings):
    """What the setting bounds: a row whose `written_at` is older than the latest (a load's
    transaction held open) is not seen by a kept map, and is once it expires."""
    load(team, shop(11).body())
    env = Environment.objects.get(team=team)
    first, _ = _map(env)
    CallEdgeBucket.objects.filter(environment=env).update(calls=0)
    assert _map(env)[0] == first
    cache.clear()  # as the timeout does
    assert _calls(_map(env)[0]) == 0


@pytest.mark.parametrize(("since", "start"), [
    (datetime(2026, 12, 7, 10, 0, 0, tzinfo=UTC), datetime(2026, 12, 7, 10, 0, 0, tzinfo=UTC)),
    (datetime(2026, 12, 7, 10, 0, 0, 1, tzinfo=UTC),
     datetime(2026, 12, 7, 10, 1, 0, tzinfo=UTC)),
    (datetime(2026, 12, 7, 10, 0, 59, 999999, tzinfo=UTC),
     datetime(2026, 12, 7, 10, 1, 0, tzinfo=UTC)),
    (None, None),
])
def test_the_window_starts_at_the_next_bucket_start(since, start):
    assert window_start(since) == start


def test_a_window_reads_the_same_rows_from_its_bucket_start(team):
    """Buckets start on multiples of their length, so a window from any moment reads what
    a window from the next bucket start reads: the kept map counts the calls since the
    moment asked, not those of the bucket the moment falls in."""
    load(team, shop(11).body())
    env = Environment.objects.get(team=team)
    starts = sorted(set(CallEdgeBucket.objects.filter(environment=env).values_list(
        "bucket_start", flat=True)))
    assert len(starts) >= 2 and all(s.timestamp() % 60 == 0 for s in starts)
    since = starts[-1] - timedelta(seconds=17)
    expected = sum(CallEdgeBucket.objects.filter(
        environment=env, bucket_start__gte=since).values_list("calls", flat=True))
    everything = sum(CallEdgeBucket.objects.filter(environment=env).values_list(
        "calls", flat=True))
    assert 0 < expected < everything
    assert _calls(_map(env, since=since)[0]) == expected
