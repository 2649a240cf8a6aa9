"""A full run over a team's stored queue (the hourly run of a team the worker kept, or the
first run of a worker that kept nothing) makes its rows from the engine's columns and
compares them with the stored rows as it reads them, a chunk at a time
(`store_again`, `store_compare`): it must store and record what an incremental run over
the same change does, keep only the stored rows that changed, and write the whole queue
anew only when many changed."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from bench.rerank import build
from tests.ranking.test_incremental_store import _run, _set_impact, _stored, _written_by
from tests.ranking.test_team_table import _child_of
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankChange, RankingRun
from trustrank.ranking.services import runs, store, store_again, store_compare
from trustrank.ranking.services.store_rows import QueueRows

pytestmark = pytest.mark.django_db


def _history(run: RankingRun) -> list[tuple[object, ...]]:
    """The run's history lines, but for the run and the time."""
    return sorted(RankChange.objects.filter(run=run).values_list(
        "finding_id", "rank", "score", "decision", "previous_rank", "previous_score",
        "previous_decision", "why", "qkey", "previous_qkey"))


def _impact(team_id: int) -> str:
    """svc-3's impact as built."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT DISTINCT human_impact FROM runtime_deployment WHERE service_name = "
            "'svc-3' AND environment_id IN (SELECT id FROM runtime_environment "
            "WHERE team_id = %s)", [team_id])
        (impact,), = cur.fetchall()
    assert impact != "very high"
    return impact


def _change(team_id: int, closed: list[int], impact: str, state: str) -> None:
    """svc-3's impact changed, and some findings closed or reopened."""
    _set_impact(team_id, "svc-3", impact)
    Finding.objects.filter(pk__in=closed).update(state=state, updated_at=timezone.now())


def _spy_compared(monkeypatch, chunk: int) -> list[store_compare.Compared]:
    """Every comparison the store made, read `chunk` stored rows at a time."""
    made: list[store_compare.Compared] = []

    def compared(team_id: int, rows: QueueRows, **kwargs) -> store_compare.Compared:
        made.append(store_compare.stored_compared(team_id, rows, chunk=chunk, **kwargs))
        return made[-1]

    monkeypatch.setattr(store_again, "stored_compared", compared)
    return made


def test_a_full_run_over_the_stored_queue_records_what_an_incremental_run_does(monkeypatch):
    """The same change (one service's impact, three findings closed) ranked incrementally
    and then, from the state before it, by a full run over the stored queue: the same
    rows, history lines, counts and digest; the full run wrote only the changed rows and
    kept only the stored rows of the changed and the closed findings."""
    team_id = build(findings=1500, services=120, edges=500, versions=40, seed=5)
    closed = list(Finding.objects.filter(team_id=team_id, state="in_triage").order_by(
        "pk").values_list("pk", flat=True)[:3])
    built = _impact(team_id)
    made = _spy_compared(monkeypatch, chunk=97)
    runs._PREVIOUS.clear()
    first = _run(team_id)
    assert not first.incremental and made == []  # the team's first queue: nothing compared
    before_change = _stored(team_id)

    _change(team_id, closed, "very high", "resolved")
    incremental = _run(team_id)
    assert incremental.incremental and incremental.counts["left_queue"] == 3
    expected = (_stored(team_id), _history(incremental))
    assert len(expected[1]) == incremental.counts["moved"] + 3 > 3

    _change(team_id, closed, built, "in_triage")  # back as it was
    runs._PREVIOUS.clear()
    back = _run(team_id)
    assert not back.incremental and _stored(team_id) == before_change
    assert back.results_digest == first.results_digest

    _change(team_id, closed, "very high", "resolved")
    runs._PREVIOUS.clear()
    full = _run(team_id)
    assert not full.incremental
    assert (_stored(team_id), _history(full)) == expected
    assert full.results_digest == incremental.results_digest
    for count in ("moved", "updated", "left_queue", "contexts", "by_environment"):
        assert full.counts[count] == incremental.counts[count], count
    assert _written_by(full) == full.counts["updated"] < len(before_change)

    compared = made[-1]
    assert compared.stored == len(before_change)
    # Only the stored rows of the changed findings that had one and of the closed ones.
    assert sorted(compared.before.fid.tolist()) == sorted(
        {*np.asarray(compared.changed).tolist(), *compared.gone} & {r[0] for r in before_change})
    assert len(compared.before) < len(before_change) // 2
    # Each with its rank in the stored queue, as counted from the keys.
    ranks = {r[0]: r[1] for r in before_change}
    assert compared.before.key_ranks(compared.before.fid).tolist() == [
        ranks[f] for f in compared.before.fid.tolist()]


def test_a_full_run_with_nothing_changed_writes_nothing():
    team_id = build(findings=600, services=50, edges=150, versions=20, seed=9)
    runs._PREVIOUS.clear()
    first = _run(team_id)
    stored = _stored(team_id)
    runs._PREVIOUS.clear()
    again = _run(team_id)
    assert not again.incremental and _written_by(again) == 0
    assert again.counts["moved"] == again.counts["updated"] == again.counts["left_queue"] == 0
    assert again.counts["buckets"] == "adjusted"
    assert _stored(team_id) == stored and again.results_digest == first.results_digest
    assert not RankChange.objects.filter(run=again).exists()


def test_a_full_run_over_a_queue_that_changed_much_writes_it_whole(settings, monkeypatch):
    """Past `_REWRITE_ABOVE` changed rows the whole queue is written anew, into a table of
    the team's own when it is large enough, hashed on the way: the rows and digest of an
    incremental run over the same change."""
    team_id = build(findings=900, services=80, edges=300, versions=30, seed=13)
    built = _impact(team_id)
    runs._PREVIOUS.clear()
    _run(team_id)
    _set_impact(team_id, "svc-3", "very high")
    incremental = _run(team_id)
    assert incremental.incremental
    expected = _stored(team_id)
    _set_impact(team_id, "svc-3", built)
    runs._PREVIOUS.clear()
    _run(team_id)

    monkeypatch.setattr(store, "_REWRITE_ABOVE", 5)
    settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE = 100
    _set_impact(team_id, "svc-3", "very high")
    runs._PREVIOUS.clear()
    hashed: list[int] = []
    real = runs._row_hashes
    monkeypatch.setattr(runs, "_row_hashes", lambda rows: hashed.append(1) or real(rows))
    full = _run(team_id)
    assert not full.incremental and full.counts["updated"] > 5
    assert _child_of(team_id, full)  # loaded into its own table and swapped in
    assert _written_by(full) == len(expected) and hashed  # every row, hashed as copied
    assert _stored(team_id) == expected
    assert full.results_digest == incremental.results_digest
    assert RankChange.objects.filter(run=full).count() == full.counts["moved"]


def test_ranks_of_a_queue_stored_before_keys_are_its_stored_ranks():
    """Rows stored before queue keys were (every key 0) are ranked by their stored rank,
    as `QueueRows.key_ranks` ranks such rows; read in any chunk size."""
    team_id = build(findings=300, services=30, edges=80, versions=10, seed=4)
    runs._PREVIOUS.clear()
    _run(team_id)
    with connection.cursor() as cur:
        cur.execute("UPDATE ranking_rankedfinding SET qkey = 0, "
                    "rank = 1000 - rank WHERE team_id = %s", [team_id])
        cur.execute("SELECT finding_id, rank FROM ranking_rankedfinding WHERE team_id = %s",
                    [team_id])
        ranks = dict(cur.fetchall())
    rows = QueueRows.from_items([], keyed=True)
    for chunk in (7, 1000):
        compared = store_compare.stored_compared(team_id, rows, chunk=chunk)
        assert compared.stored == len(ranks) and sorted(compared.gone) == sorted(ranks)
        assert dict(zip(compared.before.fid.tolist(), compared.before.key_ranks(
            compared.before.fid).tolist(), strict=True)) == ranks


def test_past_the_rewrite_limit_only_the_moved_and_gone_rows_are_kept():
    """Rows whose context alone changed need their stored row only for a write of the
    changed rows (the bucket counts' adjustment); once they are more than the limit the
    queue is written whole, and only the history's rows (moved, gone) are kept."""
    team_id = build(findings=300, services=30, edges=80, versions=10, seed=8)
    runs._PREVIOUS.clear()
    _run(team_id)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT finding_id, rank, env_rank, environment, score, decision, context_id, "
            "qkey FROM ranking_rankedfinding WHERE team_id = %s ORDER BY qkey, finding_id",
            [team_id])
        stored = cur.fetchall()
    assert len({r[6] for r in stored}) > 1
    other = {r[6]: next(s[6] for s in stored if s[6] != r[6]) for r in stored}
    new = [list(r) for r in stored[3:]]  # the first three left the queue
    for r in new[:20]:  # another context: changed, not moved
        r[6] = other[r[6]]
    for r in new[20:30]:  # another score: moved
        r[4] += 1.0
    rows = QueueRows.from_items(((r[0], tuple(r[1:])) for r in new), keyed=True)
    gone = [r[0] for r in stored[:3]]
    moved = [r[0] for r in new[20:30]]
    changed = [r[0] for r in new[:30]]
    for limit, kept in ((None, gone + changed), (1000, gone + changed), (5, gone + moved)):
        compared = store_compare.stored_compared(team_id, rows, rewrite_above=limit, chunk=11)
        assert compared.gone == gone and compared.stored == len(stored)
        assert sorted(np.asarray(compared.changed).tolist()) == sorted(changed)
        assert sorted(np.asarray(compared.moved).tolist()) == sorted(moved)
        assert sorted(compared.before.fid.tolist()) == sorted(kept), limit
        ranks = {r[0]: k for k, r in enumerate(stored, start=1)}
        assert compared.before.key_ranks(compared.before.fid).tolist() == [
            ranks[f] for f in compared.before.fid.tolist()]
