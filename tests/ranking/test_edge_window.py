"""An incremental gather reads again only the call edges whose rows changed
(`ranking.inputs.edges`), and keeps the library records when their evidence is the same:
each answer equals a whole read's."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from trustrank.ranking.inputs import changed_between, edges, ranking_inputs_gather
from trustrank.ranking.inputs.edges import FULL_EVERY, edges_read
from trustrank.runtime.models import CallEdgeBucket, Environment, LibraryBucket, Service

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(second=0, microsecond=0)
# Rows written well before any read here: outside the clock skew of every read's.
LONG_AGO = NOW - timedelta(hours=3)


def _services(team, n: int) -> list[Service]:
    env = Environment.objects.create(team=team, name="prod", first_seen=NOW, last_seen=NOW)
    return [Service.objects.create(environment=env, name=f"svc-{i}", first_seen=NOW,
                                   last_seen=NOW) for i in range(n)]


def _row(a: Service, b: Service, minute: int, calls: int, **kw) -> CallEdgeBucket:
    return CallEdgeBucket.objects.create(
        environment_id=a.environment_id, caller=a, callee=b,
        bucket_start=NOW - timedelta(minutes=minute), calls=calls,
        errors=kw.get("errors", calls // 7), mtls_calls=kw.get("mtls", calls // 2),
        last_seen=NOW, **({"written_at": kw["written_at"]} if "written_at" in kw else {}))


def _window(shift: int) -> tuple:
    """The window `shift` minutes after the first: 120 minutes, the recent last 60."""
    since = NOW - timedelta(minutes=120 - shift)
    return since, since + timedelta(minutes=60)


def test_the_edges_read_again_are_those_that_changed_and_the_sums_equal_a_whole_read(
    team, monkeypatch,
):
    # Each read here sees what was written since the previous one, not the 30 s before it
    # too (all of this test's rows): else these few edges would soon be read whole.
    monkeypatch.setattr(edges, "CLOCK_SKEW", timedelta(0))
    rnd = random.Random(5)
    svc = _services(team, 8)
    for _ in range(40):
        a, b = rnd.sample(svc, 2)
        _row(a, b, rnd.randrange(0, 130), rnd.randrange(1, 90), written_at=LONG_AGO)
    since, recent = _window(0)
    window = edges_read(team.id, since, recent)
    assert window.pairs == edges_read(team.id, since, recent).pairs
    first_full = window.full_at
    for shift in range(0, 40, 4):
        # Rows for edges there were and new ones, late rows for old buckets, and the
        # window moved on: buckets leave it and the recent hour.
        for _ in range(rnd.randrange(0, 6)):
            a, b = rnd.sample(svc, 2)
            _row(a, b, rnd.randrange(0, 130), rnd.randrange(1, 90))
        since, recent = _window(shift)
        window = edges_read(team.id, since, recent, window)
        whole = edges_read(team.id, since, recent)
        assert window.pairs == whole.pairs, shift
        assert list(window.pairs) == sorted(window.pairs)
        # Read incrementally each time: the whole read is not what answered.
        assert window.full_at == first_full
    # Nothing written and the window where it was: the very sums of the previous read.
    again = edges_read(team.id, since, recent, window)
    assert again.same_as_before and again.pairs is window.pairs
    assert again.read_at > window.read_at


def test_a_row_the_incremental_reads_cannot_see_is_read_by_the_next_whole_read(team):
    svc = _services(team, 3)
    _row(svc[0], svc[1], 5, 10, written_at=LONG_AGO)
    since, recent = _window(0)
    window = edges_read(team.id, since, recent)
    # Visible only now, though written long before the previous read (a transaction held
    # open): the incremental read does not see it, by design.
    _row(svc[1], svc[2], 5, 7, written_at=LONG_AGO)
    assert edges_read(team.id, since, recent, window).pairs == window.pairs
    # Once the last whole read is `FULL_EVERY` old, the read is whole again.
    stale = replace(window, full_at=window.read_at - FULL_EVERY)
    assert edges_read(team.id, since, recent, stale).pairs == \
        edges_read(team.id, since, recent).pairs != window.pairs


def test_many_changed_edges_are_read_whole(team):
    svc = _services(team, 6)
    _row(svc[0], svc[1], 5, 10, written_at=LONG_AGO)
    since, recent = _window(0)
    window = edges_read(team.id, since, recent)
    for i in range(1, 6):
        _row(svc[i], svc[0], 5, i)
    read = edges_read(team.id, since, recent, window)
    assert read.full_at == read.read_at != window.full_at
    assert read.pairs == edges_read(team.id, since, recent).pairs


def test_a_gather_keeps_the_graph_and_library_records_while_their_evidence_stands(team):
    svc = _services(team, 4)
    Service.objects.filter(pk=svc[3].pk).update(last_seen=NOW - timedelta(days=3))
    _row(svc[0], svc[1], 5, 10, written_at=LONG_AGO)
    _row(svc[1], svc[2], 5, 20, written_at=LONG_AGO)
    for s in svc[:3]:
        LibraryBucket.objects.create(service=s, bucket_start=NOW - timedelta(minutes=5),
                                     kind="scope", name="io.opentelemetry.jdbc", spans=4)
    first = ranking_inputs_gather(team_id=team.id)
    second = ranking_inputs_gather(team_id=team.id, previous=first,
                                   changed_since=timezone.now())
    assert second.inputs.edges is first.inputs.edges
    assert second.inputs.services is first.inputs.services
    # The services' rows came as before: the sorted rows are the previous ones, not sorted
    # again.
    assert second.graph.key[0] is first.graph.key[0]
    assert second.inputs.libraries is first.inputs.libraries
    assert changed_between(first, second) == (set(), set())
    # One service is traced again and one edge has calls: only they differ.
    Service.objects.filter(pk=svc[3].pk).update(last_seen=timezone.now())
    _row(svc[1], svc[2], 1, 5)
    third = ranking_inputs_gather(team_id=team.id, previous=second,
                                  changed_since=timezone.now())
    assert third.inputs.libraries is not second.inputs.libraries
    assert changed_between(second, third)[1] == {("prod", "svc-3")}
    assert third.inputs.edges != second.inputs.edges
    whole = ranking_inputs_gather(team_id=team.id)
    assert third.inputs.edges == whole.inputs.edges
    assert third.inputs.libraries == whole.inputs.libraries
    # A service moved to another namespace: its rows differ, are sorted anew, and the
    # services are those a gather from nothing makes.
    Service.objects.filter(pk=svc[2].pk).update(namespace="aaa")
    fourth = ranking_inputs_gather(team_id=team.id, previous=third,
                                   changed_since=timezone.now())
    assert fourth.graph.key[0] is not third.graph.key[0]
    assert fourth.inputs.services == ranking_inputs_gather(team_id=team.id).inputs.services
    assert fourth.inputs.services != third.inputs.services
