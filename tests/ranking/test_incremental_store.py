"""An incremental run stores exactly what a full run over the same evidence stores: the
shortcuts of the store (rows of unmoved findings reused, contexts keyed by identity,
fresh findings merged by binary search) must not change a key, a counted rank or
environment rank, a score, a decision, a context or a digest. A run writes only the rows
whose own values changed: the stored `rank` columns of the others go stale, and the
ranks compared here are those counted from the keys (`trustrank.ranking.ranks`)."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from bench.rerank import build
from trustrank.ranking.models import RankChange, RankingRun
from trustrank.ranking.ranks import env_rank_sql, rank_sql
from trustrank.ranking.services import due as due_service
from trustrank.ranking.services import run_digests, runs, store_moved
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.ranking.services.store_places import MovedIds, SortedIds
from trustrank.risk.buffers import BUFFERS

pytestmark = pytest.mark.django_db


def _run(team_id: int) -> RankingRun:
    run = ranking_run_request(team_id=team_id, trigger="test", delay_seconds=0)
    assert runs.ranking_run_execute(run_id=run.pk) == "done", RankingRun.objects.get(
        pk=run.pk).error
    run.refresh_from_db()
    return run


def _stored(team_id: int) -> list[tuple[object, ...]]:
    """(finding, rank, environment rank, environment, score, decision, context, key) of
    every ranked row of the team, the ranks counted from the keys, which must be the
    rows' places in key order (`row_number()` over (qkey, finding_id))."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT r.finding_id, {rank_sql('r')}, {env_rank_sql('r')}, r.environment, "
            "r.score, r.decision, r.context_id, r.qkey, "
            "row_number() OVER (ORDER BY r.qkey, r.finding_id), row_number() OVER "
            "(PARTITION BY r.environment ORDER BY r.qkey, r.finding_id) "
            "FROM ranking_rankedfinding r WHERE r.team_id = %s ORDER BY r.finding_id",
            [team_id])
        rows = cur.fetchall()
    assert [r[1:3] for r in rows] == [r[8:10] for r in rows]
    return [r[:8] for r in rows]


def _fresh(team_id: int) -> RankingRun:
    """A full run over no stored queue: every row written anew."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [team_id])
    runs._PREVIOUS.clear()
    return _run(team_id)


def _digest_of(stored: list[tuple[object, ...]]) -> str:
    from trustrank.ranking.services.store_rows import QueueRows

    return runs._rows_digest(QueueRows.from_items(
        ((r[0], r[1:]) for r in stored), keyed=True))


def _set_impact(team_id: int, service: str, impact: str) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runtime_deployment SET human_impact = %s WHERE service_name = %s AND "
            "environment_id IN (SELECT id FROM runtime_environment WHERE team_id = %s)",
            [impact, service, team_id])


def test_incremental_run_stores_what_a_full_run_stores():
    team_id = build(findings=3000, services=300, edges=1200, versions=60, seed=3)
    runs._PREVIOUS.clear()
    first = _run(team_id)
    assert not first.incremental
    for service, impact in (("svc-3", "very high"), ("svc-7", "low")):
        _set_impact(team_id, service, impact)
        incremental = _run(team_id)
        assert incremental.incremental and incremental.counts["moved"] > 0
        stored = _stored(team_id)
        assert RankChange.objects.filter(run=incremental).count() == incremental.counts["moved"]
        # Only the rows whose own values changed were written.
        assert _written_by(incremental) == incremental.counts["updated"] < len(stored)
        # The same evidence ranked from scratch by a worker that kept nothing.
        runs._PREVIOUS.clear()
        full = _run(team_id)
        assert not full.incremental
        assert _stored(team_id) == stored
        assert full.results_digest == incremental.results_digest
        assert full.inputs_digest == incremental.inputs_digest
        assert full.counts["contexts"] == incremental.counts["contexts"]
        assert full.counts["moved"] == full.counts["updated"] == _written_by(full) == 0
        fresh = _fresh(team_id)
        assert _stored(team_id) == stored and fresh.results_digest == full.results_digest


def _written_by(run: RankingRun) -> int:
    from trustrank.ranking.models import RankedFinding

    return RankedFinding.objects.filter(run=run).count()


def test_one_finding_rising_writes_only_its_own_row_and_history():
    """One finding rises (its EPSS went up): the incremental run writes its ranked row and
    one history line, not the rows of the findings it passed, whose stored ranks go stale
    while their counted ranks shift by one; every counted rank is a fresh full run's, and
    the history line's ranks are those counted before and after the run's writes."""
    from trustrank.ranking.models import RankedFinding
    from trustrank.ranking.ranks import ranks_of

    team_id = build(findings=800, services=60, edges=200, versions=30, seed=21)
    runs._PREVIOUS.clear()
    first = _run(team_id)
    queue = list(RankedFinding.objects.filter(team_id=team_id).order_by(
        "qkey", "finding_id").values_list("finding_id", flat=True))
    low = queue[-1]
    counted = ranks_of(queue)
    with connection.cursor() as cur:
        cur.execute("UPDATE findings_finding SET epss = 0.99, epss_percentile = 0.99, "
                    "cvss_score = 10.0, in_kev = true, updated_at = now() WHERE id = %s", [low])
    second = _run(team_id)
    assert second.incremental
    assert list(RankedFinding.objects.filter(run=second).values_list(
        "finding_id", flat=True)) == [low]
    change = RankChange.objects.get(run=second)
    after = ranks_of(queue)
    assert change.finding_id == low and change.previous_rank == counted[low][0] == len(queue)
    assert change.rank == after[low][0] < len(queue) // 2
    assert change.qkey == RankedFinding.objects.get(finding_id=low).qkey != change.previous_qkey
    passed = [fid for fid in queue if after[fid][0] > counted[fid][0]]
    assert len(passed) == len(queue) - after[low][0]
    assert all(after[fid][0] == counted[fid][0] + 1 for fid in passed)
    assert second.counts["updated"] == second.counts["moved"] == 1
    # Their stored rows are the first run's, ranks included.
    assert set(RankedFinding.objects.filter(finding_id__in=passed).values_list(
        "run_id", flat=True)) == {first.pk}
    stored = _stored(team_id)
    fresh = _fresh(team_id)
    assert _stored(team_id) == stored and fresh.results_digest == second.results_digest


def test_ranks_follow_their_finding_without_database_foreign_keys():
    """RankedFinding has no database foreign keys: the ORM's delete still takes a finding's
    rank with it, and a rank left behind by a finding deleted past the ORM (as one deleted
    while a run stored its ranks) is dropped by the next run, with no history row."""
    from trustrank.findings.models import Finding
    from trustrank.ranking.models import RankedFinding

    team_id = build(findings=400, services=40, edges=120, versions=20, seed=5)
    runs._PREVIOUS.clear()
    _run(team_id)
    first, second = Finding.objects.filter(team_id=team_id).order_by("id")[:2]
    first.delete()
    assert not RankedFinding.objects.filter(finding_id=first.pk).exists()
    with connection.cursor() as cur:
        cur.execute("DELETE FROM findings_finding WHERE id = %s", [second.pk])
    assert RankedFinding.objects.filter(finding_id=second.pk).exists()
    # Deletions are not timestamped: a full run finds them.
    runs._PREVIOUS.clear()
    run = _run(team_id)
    assert not run.incremental
    assert not RankedFinding.objects.filter(finding_id=second.pk).exists()
    assert sorted(r[1] for r in _stored(team_id)) == list(range(1, 399))
    assert run.counts["left_queue"] == 1
    assert list(RankChange.objects.filter(run=run, rank__isnull=True).values_list(
        "finding_id", flat=True)) == []


def test_a_first_run_gives_due_dates_without_writing_the_findings():
    """A team's first run gives every ranked finding its due date in FindingDue and leaves
    the findings as they were (updated_at, version); the next, incremental run reads only
    what others wrote since, and leaves every due date as a full recomputation would."""
    from trustrank.findings.services.due_dates import finding_due_dates_apply
    from trustrank.ranking.inputs import findings as inputs

    team_id = build(findings=600, services=60, edges=200, versions=30, seed=9)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE findings_finding SET updated_at = now() - interval '1 hour' "
            "WHERE team_id = %s", [team_id])
    runs._PREVIOUS.clear()
    first = _run(team_id)
    cached = runs._PREVIOUS[team_id]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM findings_finding WHERE team_id = %s "
            "AND (updated_at > now() - interval '1 minute' OR version <> 1)", [team_id])
        assert cur.fetchone()[0] == 0
        cur.execute(
            "SELECT count(*), count(due_date) FROM findings_findingdue WHERE team_id = %s",
            [team_id])
        rows, dated = cur.fetchone()
        # A row per ranked finding; a decision without days (defer) gets no date.
        assert rows == first.counts["findings"] and dated > first.counts["findings"] // 2
        cur.execute(
            "UPDATE findings_finding SET epss = 0.99, updated_at = now() WHERE id = "
            "(SELECT min(id) FROM findings_finding WHERE team_id = %s) RETURNING id", [team_id])
        touched = cur.fetchone()[0]
    delta, _ids, _closed = inputs.findings_read(
        team_id, changed_since=cached.gathered_at - runs.CLOCK_SKEW)
    assert [f.id for f in delta] == [str(touched)]
    _set_impact(team_id, "svc-3", "very high")
    incremental = _run(team_id)
    assert incremental.incremental and incremental.counts["moved"] > 0
    stored = _stored(team_id)
    assert finding_due_dates_apply(team_id=team_id) == 0
    runs._PREVIOUS.clear()
    _run(team_id)
    assert _stored(team_id) == stored


def full_read(team_id: int, policy: object) -> tuple[object, ...]:
    """A full run's findings read: (records, ids, closed, settled decisions, findings with
    an unsettled due-date row)."""
    from trustrank.ranking.inputs import findings as gather

    settled: dict[int, str] = {}
    unsettled: set[int] = set()
    out = gather.findings_read(team_id, settled=settled, policy=policy,
                               unsettled_rows=unsettled)
    return (*out, settled, unsettled)


def test_the_findings_read_column_by_column_gives_the_records_of_the_row_loop(monkeypatch):
    """Chunks of open vulnerabilities become records column by column, read a chunk ahead
    by a thread; the records, ids and settled decisions are those the row loop makes."""
    from trustrank.findings.services.due_dates import triage_policy_for
    from trustrank.ranking.inputs import findings as gather

    team_id = build(findings=1200, services=60, edges=200, versions=30, seed=5)
    runs._PREVIOUS.clear()
    _run(team_id)  # every finding has a due date now: settled decisions are read too
    with connection.cursor() as cur:
        # Rows the column path does not take, in the first chunks: a zero baseline, no purl.
        first = "SELECT id FROM findings_finding WHERE team_id = %s ORDER BY id"
        cur.execute("UPDATE findings_finding SET epss = 0, cvss_score = 0, severity_score = 0 "
                    f"WHERE id IN ({first} LIMIT 3)", [team_id])
        cur.execute("UPDATE findings_finding SET component_purl = '' "
                    f"WHERE id IN ({first} LIMIT 2 OFFSET 150)", [team_id])
    monkeypatch.setattr(gather, "CHUNK", 100)
    policy = triage_policy_for(team_id=team_id)
    by_column: list[int] = []
    add = gather._add_vulnerabilities
    monkeypatch.setattr(gather, "_add_vulnerabilities",
                        lambda chunk, *a, **k: by_column.append(len(chunk)) or add(chunk, *a, **k))

    by_columns = full_read(team_id, policy)
    monkeypatch.setattr(gather, "_vulnerabilities_only", lambda chunk: False)
    by_rows = full_read(team_id, policy)
    assert by_columns == by_rows
    assert len(by_rows[0]) == 1200 and len(by_rows[3]) == 1200
    assert sum(by_column) == 1000  # all chunks but the first two


def test_ranked_rows_copy_keeps_every_value():
    """The store lays out COPY's binary rows itself: environment names with a backslash,
    tab, newline or non-ASCII letters, an empty one, and scores of every kind of float read
    back exactly."""
    from trustrank.accounts.models import Team
    from trustrank.ranking.services.store_copy import _copy_ranked

    team = Team.objects.create(name="copy-text")
    rows = {
        1: (1, 1, "prod\\east", 0.1 + 0.2, "immediate", "a" * 64),
        2: (2, 1, "tab\there", 100.0, "out-of-cycle", "b" * 64),
        3: (3, 1, "line\nbreak\r", 1e-7, "scheduled", "c" * 64),
        4: (4, 1, "", 33.3333, "defer", "d" * 64),
        5: (5, 2, "prod\\east", 0.0, "immediate", "e" * 64),
        6: (6, 1, "zürich-ß", 5e-324, "immediate", "f" * 64),
    }
    with connection.cursor() as cur:
        _copy_ranked(cur, team_id=team.pk, run_id=7, targets=[4, 2, 6, 1, 5, 3], rows=rows)
        cur.execute(
            "SELECT finding_id, rank, env_rank, environment, score, decision, context_id "
            "FROM ranking_rankedfinding WHERE team_id = %s AND run_id = 7 ORDER BY finding_id",
            [team.pk])
        assert {r[0]: r[1:] for r in cur.fetchall()} == rows


@pytest.mark.django_db(transaction=True)
def test_a_first_run_inserts_many_due_dates_on_a_second_connection(settings, monkeypatch):
    """Above the setting, a first run's due dates go in on a connection of their own while
    the queue is stored: every ranked finding gets the date a recomputation gives, a date
    set by hand before the run stays, and nothing is left for the run's own pass."""
    from datetime import date

    from trustrank.findings.models import Finding, FindingDue
    from trustrank.findings.services.due_dates import finding_due_dates_apply

    settings.TRUSTRANK_RANKING_DUE_THREAD_ABOVE = 100
    team_id = build(findings=400, services=40, edges=120, versions=20, seed=16)
    pk = Finding.objects.filter(team_id=team_id).order_by("pk").values_list(
        "pk", flat=True)[0]
    FindingDue.objects.create(finding_id=pk, team_id=team_id, due_date=date(2001, 1, 1),
                              manual=True)
    started: list[object] = []
    real = due_service.DueInserter.start
    monkeypatch.setattr(due_service.DueInserter, "start", classmethod(
        lambda cls, *args, **kwargs: started.append(real(*args, **kwargs)) or started[-1]))
    runs._PREVIOUS.clear()
    first = _run(team_id)
    inserter = started[0]
    assert isinstance(inserter, due_service.DueInserter)
    assert inserter.inserted == first.counts["findings"] - 1  # all but the hand-set one
    assert FindingDue.objects.filter(team_id=team_id).count() == first.counts["findings"]
    assert finding_due_dates_apply(team_id=team_id) == 0
    due = FindingDue.objects.get(finding_id=pk)
    assert due.manual and due.due_date == date(2001, 1, 1) and due.decision != ""


def test_rows_are_gathered_by_place_once_a_share_of_the_places_changed():
    """Walking the changed places costs microseconds each, gathering by place tens of
    nanoseconds a place: which one a run takes depends on the queue's size."""
    from trustrank.ranking.services.store import rewrites_rows

    assert not rewrites_rows(None, 1_000_000)
    assert not rewrites_rows(range(1_000), 10_000)  # a small queue is walked
    assert rewrites_rows(range(1_001), 10_000)
    assert not rewrites_rows(range(20_000), 1_000_000)
    assert rewrites_rows(range(20_001), 1_000_000)  # a fiftieth of a million
    assert not rewrites_rows(range(200_000), 10_000_000)
    assert rewrites_rows(range(200_001), 10_000_000)
    assert rewrites_rows(range(250_001), 100_000_000)  # at most `_REWRITE_ABOVE` walked


def test_a_queue_written_whole_has_the_digest_of_its_rows(monkeypatch):
    """A run that rewrites the whole queue hashes its rows while they are sent: the digest
    is the one of the rows stored, and equals a run's that writes row by row."""
    from trustrank.ranking.services import store

    team_id = build(findings=500, services=50, edges=150, versions=25, seed=15)
    runs._PREVIOUS.clear()
    row_by_row = _run(team_id)
    stored = _stored(team_id)
    assert row_by_row.results_digest == _digest_of(stored)
    monkeypatch.setattr(store, "_REWRITE_ABOVE", 0)
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [team_id])
    runs._PREVIOUS.clear()
    whole = _run(team_id)
    assert _stored(team_id) == stored
    assert whole.results_digest == row_by_row.results_digest


def _aged(team_id: int) -> int:
    """The team's findings as written an hour ago: an incremental run reads as changed the
    findings written within `runs.CLOCK_SKEW` of the run before, which a build just
    made would all be, and rescores them all (whether it does depended on timing)."""
    with connection.cursor() as cur:
        cur.execute("UPDATE findings_finding SET updated_at = now() - interval '1 hour' "
                    "WHERE team_id = %s", [team_id])
    return team_id


def _kept_moved(monkeypatch) -> list[int]:
    """How many places each `store_moved.rows_moved` call took from the previous rows."""
    from trustrank.ranking.services import store

    kept: list[int] = []

    def counted(findings, moves, *args, **kwargs):
        kept.append(int(moves.kept.length.sum()))
        return store_moved.rows_moved(findings, moves, *args, **kwargs)

    monkeypatch.setattr(store, "rows_moved", counted)
    return kept


def test_an_incremental_run_that_rewrites_the_queue_takes_the_digest_hashed_on_the_way(
        monkeypatch):
    """One finding rising shifts every rank below it: the run rewrites the whole queue and
    hashes the rows as it sends them; it takes that digest (the rows' own) instead of
    hashing every changed row again before and after."""
    from trustrank.ranking.services import store

    team_id = _aged(build(findings=600, services=60, edges=200, versions=30, seed=17))
    runs._PREVIOUS.clear()
    _run(team_id)
    monkeypatch.setattr(store, "_REWRITE_ABOVE", 0)

    def no_update(*args, **kwargs):
        raise AssertionError("the digest was updated row by row")

    monkeypatch.setattr(runs, "_rows_digest_update", no_update)
    moved = _kept_moved(monkeypatch)
    _set_impact(team_id, "svc-3", "very high")
    incremental = _run(team_id)
    assert incremental.incremental and incremental.counts["updated"] > 0
    # Most findings kept their rows, at other places.
    assert len(moved) == 1 and moved[0] > 500
    stored = _stored(team_id)
    kept = _rows_kept(team_id)
    assert incremental.results_digest == _digest_of(stored)
    assert RankChange.objects.filter(run=incremental).count() == incremental.counts["moved"]
    # Above the threshold its rows were made from where each finding was, not walked
    # place by place: what it stored is what a full run stores.
    monkeypatch.undo()
    runs._PREVIOUS.clear()
    full = _run(team_id)
    assert not full.incremental
    assert _stored(team_id) == stored
    assert full.results_digest == incremental.results_digest
    assert _rows_kept(team_id) == kept


def test_an_incremental_run_over_many_changed_places_makes_rows_from_where_they_were(
        monkeypatch):
    """Closed findings, new ones and shifted ranks at once: the kept findings' rows come
    from the previous run's by where each finding was (`store_moved.rows_moved`), neither
    walked place by place nor made again column by column; the queue, the findings that
    left it and the history are a full run's."""
    from trustrank.ranking.services import store

    team_id = _aged(build(findings=600, services=60, edges=200, versions=30, seed=18))
    runs._PREVIOUS.clear()
    _run(team_id)
    # A full run leaves its rows' lookup made, and the arrays the next run's rows take
    # (its queue's columns that its rows do not hold, the codes of facts and contexts,
    # and arrays made for the rest).
    assert isinstance(runs._PREVIOUS[team_id].rows._located, SortedIds)
    assert BUFFERS.held() == 7
    monkeypatch.setattr(store, "_REWRITE_ABOVE", 0)
    moved = _kept_moved(monkeypatch)
    walked: list[object] = []
    monkeypatch.setattr(store, "_walk_changed", lambda *a, **k: walked.append(a) or 1 / 0)
    monkeypatch.setattr(store, "_queue_rows", lambda *a, **k: walked.append(a) or 1 / 0)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE findings_finding SET state = 'resolved', updated_at = now() WHERE id IN "
            "(SELECT id FROM findings_finding WHERE team_id = %s ORDER BY id LIMIT 7)",
            [team_id])
    _set_impact(team_id, "svc-5", "very high")
    incremental = _run(team_id)
    assert incremental.incremental and not walked
    assert incremental.counts["left_queue"] == 7
    assert len(moved) == 1 and moved[0] > 500
    stored = _stored(team_id)
    kept = _rows_kept(team_id)
    # Its rows find a finding's row through the previous run's (no sort of their ids),
    # where a sorted copy of their ids finds it.
    rows = runs._PREVIOUS[team_id].rows
    assert isinstance(rows.located(), MovedIds)
    asked = np.asarray([*rows.fid.tolist(), *[f for f, *_ in stored], -1, 10**12])
    assert rows.places(asked).tolist() == SortedIds(rows.fid).places(asked).tolist()
    # The first run's rows, replaced, wait for the next run's arrays (their eight columns;
    # the queue index shares its codes with the new one's); a full run lets them go.
    assert BUFFERS.held() >= 8
    runs._PREVIOUS.clear()
    monkeypatch.undo()
    full = _run(team_id)
    # Emptied when it began: what is held now is what it left for the next run, as the
    # first full run did (none of the incremental run's arrays).
    assert BUFFERS.held() == 7
    assert _stored(team_id) == stored
    assert full.results_digest == incremental.results_digest
    # The rows the worker keeps for the next run (its places, every rank as of the run)
    # are the ones a full run keeps.
    assert _rows_kept(team_id) == kept


def _rows_kept(team_id: int) -> list[tuple[object, ...]]:
    """The rows the worker keeps of the team's last run, by place: (finding, rank,
    environment rank, environment, score, decision, context digest, key)."""
    rows = runs._PREVIOUS[team_id].rows
    assert rows.by_place
    return list(zip(rows.fid.tolist(), *zip(*rows.rows_at(slice(None)), strict=True),
                    rows.qkey.tolist(), strict=True))


def test_rank_history_copy_as_text_keeps_every_value():
    """The history rows are COPY text formatted by the store: a why whose factor values hold
    backslashes, tabs, quotes and newlines, scores of every kind, new and gone findings
    read back exactly."""
    import orjson

    from trustrank.accounts.models import Team
    from trustrank.ranking.services.store_history import _history

    team = Team.objects.create(name="history-text")
    run = RankingRun.objects.create(team=team, trigger="test")
    odd = 'C:\\temp\tx "y"\nz ü'

    def ctx(value: str, effect: float) -> bytes:
        return orjson.dumps({"explanation": [{"name": "path", "value": value,
                                              "effect": effect}]})

    new_context = {"a" * 64: ctx("internet", 1.0), "b" * 64: ctx(odd, 2.5)}
    before = {1: (5, 5, "", 0.1 + 0.2, "scheduled", "a" * 64),
              3: (9, 9, "", 12.0, "defer", "a" * 64)}
    rows = {1: (2, 2, "", 1e-7, "immediate", "b" * 64),
            2: (7, 7, "", 100.0, "out-of-cycle", "a" * 64)}
    with connection.cursor() as cur:
        _history(cur, run=run, moved=[1, 2], gone=[], before=before, rows=rows,
                 new_context=new_context, first=False)
    by_id = {c.finding_id: c for c in RankChange.objects.filter(run=run)}
    one, two = by_id[1], by_id[2]
    assert (one.rank, one.score, one.decision) == (2, 1e-7, "immediate")
    assert (one.previous_rank, one.previous_score, one.previous_decision) == (
        5, 0.1 + 0.2, "scheduled")
    assert one.why == [{"factor": "path", "before": "internet", "after": odd,
                        "effect_change": 1.5}]
    assert (two.rank, two.score, two.previous_rank, two.previous_score,
            two.previous_decision, two.why) == (7, 100.0, None, None, "", [])


def test_full_run_recomputes_only_unsettled_due_dates_and_leaves_what_recomputing_all_would():
    """A full run reads which due dates are settled for which decision with the findings
    and recomputes only the others; the due dates it leaves are those a recomputation of
    every finding gives (a second, unrestricted pass writes nothing)."""
    from trustrank.findings.models import Finding
    from trustrank.findings.services.due_dates import finding_due_dates_apply
    from trustrank.ranking.inputs import ranking_inputs_gather

    team_id = build(findings=600, services=60, edges=200, versions=30, seed=11)
    runs._PREVIOUS.clear()
    _run(team_id)
    gathered = ranking_inputs_gather(team_id=team_id)
    assert gathered.settled is not None and len(gathered.settled) == 600
    ids = list(Finding.objects.filter(team_id=team_id, due__due_date__isnull=False).order_by(
        "pk").values_list("pk", flat=True)[:4])
    with connection.cursor() as cur:
        # Stale in three ways, and one date a person set by hand.
        cur.execute("UPDATE findings_findingdue SET due_date = NULL WHERE finding_id = %s",
                    [ids[0]])
        cur.execute("UPDATE findings_findingdue SET since = NULL WHERE finding_id = %s",
                    [ids[1]])
        # Settled, but for a decision the finding does not have.
        cur.execute("UPDATE findings_findingdue SET decision = 'immediate', due_date = "
                    "since + 1 WHERE finding_id = %s AND decision <> 'immediate'", [ids[2]])
        cur.execute("UPDATE findings_findingdue SET due_date = '2001-01-01', manual = true "
                    "WHERE finding_id = %s", [ids[3]])
    gathered = ranking_inputs_gather(team_id=team_id)
    assert gathered.settled is not None and not {ids[0], ids[1]} & gathered.settled.keys()
    assert gathered.settled[ids[2]] == "immediate" and ids[3] in gathered.settled
    _set_impact(team_id, "svc-3", "very high")
    runs._PREVIOUS.clear()
    run = _run(team_id)
    assert not run.incremental and run.counts["moved"] > 0
    assert finding_due_dates_apply(team_id=team_id) == 0
    rows = {f.pk: f for f in Finding.objects.filter(pk__in=ids).select_related("due")}
    assert rows[ids[0]].due_date is not None and rows[ids[1]].due_decision_since is not None
    assert rows[ids[2]].due_decision != "immediate"
    assert str(rows[ids[3]].due_date) == "2001-01-01"


def test_due_dates_of_a_changed_policy_are_all_recomputed():
    """The ids a run passes were checked against the policy it read; under another policy
    every finding is recomputed."""
    from trustrank.findings.records import TriagePolicy
    from trustrank.findings.services.due_dates import PolicyDays, finding_due_dates_apply

    team_id = build(findings=300, services=40, edges=120, versions=20, seed=12)
    runs._PREVIOUS.clear()
    _run(team_id)
    assert finding_due_dates_apply(team_id=team_id, finding_ids=[],
                                   checked_policy=PolicyDays()) == 0
    TriagePolicy.objects.update_or_create(team_id=team_id, defaults={"scheduled_days": 3})
    assert finding_due_dates_apply(team_id=team_id, finding_ids=[],
                                   checked_policy=PolicyDays()) > 0


def test_a_first_run_inserts_due_dates_equal_to_a_recomputation_and_keeps_a_hand_set_one():
    """A first run inserts the due dates of findings that have none in bulk; they are what
    the recomputation of every finding gives (a second, unrestricted pass writes nothing),
    and a date a person set between the gather and the insert stays."""
    from datetime import date

    from trustrank.findings.models import Finding, FindingDue
    from trustrank.findings.services.due_dates import (
        PolicyDays,
        finding_due_dates_apply,
        finding_due_dates_insert,
    )
    from trustrank.ranking.inputs import ranking_inputs_gather

    team_id = build(findings=400, services=40, edges=120, versions=20, seed=14)
    gathered = ranking_inputs_gather(team_id=team_id)
    assert gathered.settled == {} and gathered.unsettled_rows == frozenset()
    runs._PREVIOUS.clear()
    first = _run(team_id)
    assert FindingDue.objects.filter(team_id=team_id).count() == first.counts["findings"]
    assert finding_due_dates_apply(team_id=team_id) == 0
    by_decision = dict(FindingDue.objects.filter(team_id=team_id).values_list(
        "decision", "due_date").distinct())
    assert by_decision["scheduled"] is not None and by_decision.get("defer") is None

    pk = Finding.objects.filter(team_id=team_id).order_by("pk").values_list(
        "pk", flat=True)[0]
    FindingDue.objects.filter(finding_id=pk).update(due_date=date(2001, 1, 1), manual=True)
    assert finding_due_dates_insert(team_id=team_id, decisions=[(pk, "immediate")],
                                    checked_policy=PolicyDays()) == 0
    due = FindingDue.objects.get(finding_id=pk)
    assert due.manual and due.due_date == date(2001, 1, 1)
    # Under another policy than the one checked, nothing is inserted.
    assert finding_due_dates_insert(team_id=team_id, decisions=[(pk, "immediate")],
                                    checked_policy=PolicyDays(immediate_days=5)) is None


def test_results_digest_updated_by_the_changed_rows_equals_the_whole_digest():
    """The digest hashes each row's own values (key, environment, score, decision,
    context), not its ranks: a row whose ranks alone shifted hashes as before, so the
    rows a run writes are all that update it."""
    from trustrank.ranking.services.store_rows import QueueRows

    def keyed(rows):
        return QueueRows.from_items(((f, (*r, int(r[3] * 1000))) for f, r in rows.items()),
                                    keyed=True)

    before = {fid: (fid, fid, "prod", fid / 7, "scheduled", f"{fid:064x}")
              for fid in range(1, 200)}
    rows = {fid: row for fid, row in before.items() if fid % 11}
    for fid in range(150, 230):
        rows[fid] = (fid + 3, fid, "prod", fid / 5, "immediate", f"{fid:064x}")
    changed = [fid for fid, row in rows.items() if before.get(fid) is None
               or before[fid][2:] != row[2:]]
    gone = [fid for fid in before if fid not in rows]
    assert runs._rows_digest_update(
        runs._rows_digest(keyed(before)), before=keyed(before), rows=keyed(rows),
        changed=changed, gone=gone,
    ) == runs._rows_digest(keyed(rows)) != runs._rows_digest(keyed(before))
    assert runs._rows_digest(keyed(dict(reversed(rows.items())))) == runs._rows_digest(
        keyed(rows))
    shifted = {fid: (rank + 1, env + 1, *rest) for fid, (rank, env, *rest) in rows.items()}
    assert runs._rows_digest(keyed(shifted)) == runs._rows_digest(keyed(rows))


def test_incremental_run_with_closed_and_reopened_findings_stores_what_a_full_run_stores():
    """Findings that leave the queue at its head, in its middle and at its end, and come
    back: the store walks only the span that changed and must still give the full run's
    rows, environment ranks, counts and digest."""
    from trustrank.ranking.models import RankedFinding

    team_id = build(findings=1200, services=100, edges=400, versions=40, seed=13)
    runs._PREVIOUS.clear()
    _run(team_id)
    queue = list(RankedFinding.objects.filter(team_id=team_id).order_by(
        "qkey", "finding_id").values_list("finding_id", flat=True))
    picked = [queue[0], queue[len(queue) // 2], queue[-1]]
    for state, impact in (("resolved", "very high"), ("in_triage", "low")):
        with connection.cursor() as cur:
            cur.execute("UPDATE findings_finding SET state = %s, updated_at = now() "
                        "WHERE id = ANY(%s)", [state, picked])
        _set_impact(team_id, "svc-5", impact)
        incremental = _run(team_id)
        assert incremental.incremental
        assert incremental.counts["left_queue"] == (3 if state == "resolved" else 0)
        stored = _stored(team_id)
        runs._PREVIOUS.clear()
        full = _run(team_id)
        assert _stored(team_id) == stored
        assert full.results_digest == incremental.results_digest
        assert full.counts["by_environment"] == incremental.counts["by_environment"]
        assert full.counts["contexts"] == incremental.counts["contexts"]


@pytest.mark.parametrize("seed", range(30))
def test_walking_only_the_changed_places_gives_every_row_a_full_walk_gives(seed):
    """The incremental store's walk (`_walk_changed`) on generated queues of two
    environments and undeployed findings, with findings moved, gone, new and switching
    environment: the same rows, changed and gone findings as numbering every place."""
    import random

    from trustrank.ranking.services.store import _walk_changed

    rng = random.Random(seed)

    def ranked(fid: str, rank: int, deployed: bool, env: str) -> tuple[object, ...]:
        # `RankedFinding`'s layout: id, rank, score, decision, facts, context (deployed,
        # environment, …), record.
        return (fid, rank, 50.0, "scheduled", None, (deployed, env, *[None] * 8), None)

    def row_of(r, n, env):
        return (r[1], n, env, r[2], r[3], "ctx")

    def full(queue):
        counter: dict[str, int] = {}
        out = {}
        for r in queue:
            env = r[5][1] if r[5][0] else ""
            counter[env] = counter.get(env, 0) + 1
            out[int(r[0])] = row_of(r, counter[env], env)
        return out

    where = {str(i): (rng.random() < 0.8, rng.choice("ab")) for i in range(rng.randint(0, 60))}
    prev = tuple(ranked(fid, k + 1, *where[fid]) for k, fid in enumerate(where))
    before = full(prev)
    order = [r[0] for r in prev if rng.random() > 0.1]
    for _ in range(rng.randint(0, 6)):
        if order:
            order.insert(rng.randrange(len(order) + 1), order.pop(rng.randrange(len(order))))
    for k in range(rng.randint(0, 4)):
        order.insert(rng.randrange(len(order) + 1), f"{100 + k}")
    by_id = {r[0]: r for r in prev}
    switched = {fid for fid in order if rng.random() < 0.05}
    new = []
    for k, fid in enumerate(order):
        old = by_id.get(fid)
        if old is not None and old[1] == k + 1 and fid not in switched:
            new.append(old)
        else:
            deployed, env = where.get(fid, (True, "a"))
            if fid in switched:
                env = "b" if env == "a" else "a"
            new.append(ranked(fid, k + 1, deployed, env))
    ids = {fid: int(fid) for fid in [*where, *order]}
    rows, changed, gone = _walk_changed(tuple(new), prev, before, ids, ids, row_of)
    expected = full(new)
    assert rows == expected
    # Told the places that differ (as the engine's incremental result says), the same.
    differ = [i for i, r in enumerate(new) if i >= len(prev) or prev[i] is not r]
    assert _walk_changed(tuple(new), prev, before, ids, ids, row_of, differ=differ) == (
        rows, changed, gone)
    # Changed: new, or its own values differ (a shifted rank alone is not a change).
    assert sorted(changed) == sorted(f for f, row in expected.items()
                                     if f not in before or before[f][2:] != row[2:])
    assert sorted(gone) == sorted(f for f in before if f not in expected)


def test_first_queue_from_the_engines_columns_is_the_queue_row_by_row(monkeypatch):
    """A team's first queue is stored from the engine's columns (`store_columns`): the same
    rows, environment ranks, contexts, counts and digest as the store that walks every
    ranked finding, with findings of every shape: deployed, deployed nowhere, identity and
    reliability findings (scored one by one, with codes of their own)."""
    from tests.findings.test_api_and_pages import make
    from trustrank.accounts.models import Team
    from trustrank.ranking.inputs import rank_settings, ranking_inputs_gather
    from trustrank.ranking.services import store_columns
    from trustrank.risk.engine import rank

    team_id = build(findings=900, services=60, edges=200, versions=30, seed=17)
    with connection.cursor() as cur:
        # Two versions deployed nowhere: their findings keep their baseline order.
        cur.execute("DELETE FROM runtime_deployment WHERE service_name IN ('svc-1', 'svc-2') "
                    "AND environment_id IN (SELECT id FROM runtime_environment WHERE "
                    "team_id = %s)", [team_id])
    team = Team.objects.get(pk=team_id)
    for i in range(5):
        make(team, "reliability", "broken_context", f"hop-{i}")
        make(team, "identity", "expired", f"cert-{i}")
    used: list[int] = []
    real = store_columns.store_first_from_columns

    def spy(**kwargs):
        out = real(**kwargs)
        used.append(out is not None)
        return out

    monkeypatch.setattr(runs, "store_first_from_columns", spy)
    runs._PREVIOUS.clear()
    by_columns = _run(team_id)
    assert used == [True]
    stored = _stored(team_id)
    assert len(stored) == by_columns.counts["findings"] == 910
    assert {row[3] for row in stored} == {"", "prod"}

    with connection.cursor() as cur:
        cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [team_id])
    monkeypatch.setattr(runs, "store_first_from_columns", lambda **kwargs: None)
    monkeypatch.setattr(runs, "store_again_from_columns", lambda **kwargs: None)
    runs._PREVIOUS.clear()
    by_rows = _run(team_id)
    assert _stored(team_id) == stored
    assert by_rows.results_digest == by_columns.results_digest
    assert by_rows.counts == by_columns.counts
    # The inputs were hashed while the queue was stored: the digest the engine makes.
    gathered = ranking_inputs_gather(team_id=team_id)
    engine = rank(inputs=gathered.inputs, settings=rank_settings())
    assert by_columns.inputs_digest == by_rows.inputs_digest == engine.inputs_digest
    assert runs._PREVIOUS[team_id].result.findings_sum == engine.findings_sum


def test_findings_hashed_part_by_part_sum_to_the_whole():
    """A full run hashes its records a part at a time while the queue is stored: any
    split gives the engine's `findings_hash_sum`, and `with_inputs_digest` then gives the
    digest `rank` makes itself."""
    from trustrank.risk.engine import rank, with_inputs_digest
    from trustrank.risk.inputs import Finding, RankInputs, RankSettings
    from trustrank.risk.results import findings_hash_sum

    findings = tuple(Finding(id=f"f{i}", vuln_id=f"CVE-2024-{i:05d}", severity="high",
                             cvss_score=7.5, project_version="pv", component_key="pkg:x/y",
                             baseline=float(i % 90)) for i in range(103))
    for part in (1, 7, 50, 103, 1000):
        hasher = run_digests.FindingsHash(findings, part=part)
        hasher.step()
        assert hasher.total() == findings_hash_sum(findings)
    inputs, settings = RankInputs(findings=findings), RankSettings()
    whole = rank(inputs=inputs, settings=settings)
    later = with_inputs_digest(rank(inputs=inputs, settings=settings, with_digest=False),
                               inputs=inputs, settings=settings,
                               findings_sum=run_digests.FindingsHash(findings, part=9).total())
    assert later.inputs_digest == whole.inputs_digest and later.findings_sum == whole.findings_sum
    assert later.digest_parts.keys() == whole.digest_parts.keys()


def test_due_date_pairs_read_as_the_list_they_stand_for():
    import numpy as np

    pairs = due_service._Pairs(np.array([5, 9, 12, 40], dtype=np.int64),
                               np.array([3, 0, 1, 2], dtype=np.int8))
    whole = [(5, "immediate"), (9, "defer"), (12, "scheduled"), (40, "out-of-cycle")]
    assert len(pairs) == 4 and list(pairs) == whole and pairs[1] == (9, "defer")
    assert pairs[1:3] == whole[1:3] and pairs[0:50_000] == whole and pairs[4:8] == []


def test_a_bulk_due_date_insert_refreshes_the_planners_statistics(monkeypatch):
    """A team's first run inserts a due date per finding; the findings pages join that table,
    and with its statistics from before (empty) the planner read every due-date row once
    per row of a page. After a bulk insert the statistics count the rows inserted."""
    from trustrank.findings.services import due_dates
    from trustrank.findings.services.due_dates import PolicyDays, finding_due_dates_insert

    team_id = build(findings=300, services=30, edges=90, versions=15, seed=18)
    with connection.cursor() as cur:
        cur.execute("SELECT id FROM findings_finding WHERE team_id = %s ORDER BY id", [team_id])
        ids = [row[0] for row in cur.fetchall()]

    def reltuples() -> float:
        with connection.cursor() as cur:
            cur.execute("SELECT reltuples FROM pg_class WHERE relname = 'findings_findingdue'")
            return cur.fetchone()[0]

    monkeypatch.setattr(due_dates, "ANALYZE_AFTER", 100)
    assert finding_due_dates_insert(team_id=team_id, decisions=[(i, "defer") for i in ids[:50]],
                                    checked_policy=PolicyDays()) == 50
    before = reltuples()
    assert finding_due_dates_insert(team_id=team_id, decisions=[(i, "scheduled") for i in ids[50:]],
                                    checked_policy=PolicyDays()) == 250
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM findings_findingdue")
        rows = cur.fetchone()[0]
    assert rows >= 300 and reltuples() == rows != before


def _decoded(index, n):
    versions = {code: v for v, code in index.versions.items()}
    envs = {code: e for e, code in index.envs.items()}
    services = {code: s for s, code in index.services.items()}
    return [(versions[index.record_version[i]], versions[index.context_version[i]],
             envs[index.env[i]], services[index.service[i]]) for i in range(n)]


def test_queue_index_made_in_parts_while_storing_is_the_index_built_whole(monkeypatch):
    """A full run leaves its queue's index (what the next incremental run finds its places
    to rescore by) to the store's waits, a part at a time: the same index, whatever the
    parts, with identity and reliability findings (which name a service) among them."""
    from tests.findings.test_api_and_pages import make
    from trustrank.accounts.models import Team
    from trustrank.risk.queue import QueueIndex

    team_id = build(findings=700, services=50, edges=150, versions=25, seed=19)
    team = Team.objects.get(pk=team_id)
    for i in range(3):
        make(team, "reliability", "broken_context", f"hop-{i}")
        make(team, "identity", "expired", f"cert-{i}")
    runs._PREVIOUS.clear()
    assert not _run(team_id).incremental
    result = runs._PREVIOUS[team_id].result
    n = len(result.findings)
    whole = _decoded(QueueIndex.build(result.findings), n)
    assert result.queue_index is not None
    assert _decoded(result.queue_index, n) == whole
    assert any(row[3] != ("", "") for row in whole)
    for part in (1, 64, n + 5):
        *_none, index = QueueIndex.in_parts(result.findings, part=part)
        assert set(_none) == {None} and _decoded(index, n) == whole
    # The next run, incremental, finds its places through that index.
    _set_impact(team_id, "svc-3", "very high")
    assert _run(team_id).incremental


def test_a_run_commits_without_waiting_for_the_disk_and_resets_the_session(monkeypatch):
    """A run's writes are derived data: its session does not wait for the WAL flush at
    commit, nor use the JIT; the connection is as before once the run is done."""
    seen: list[tuple[str, str]] = []

    def execute(run, progress=None):
        with connection.cursor() as cur:
            cur.execute("SELECT current_setting('synchronous_commit'), current_setting('jit')")
            seen.append(cur.fetchone())

    team_id = build(findings=20, services=5, edges=5, versions=2, seed=20)
    with connection.cursor() as cur:
        cur.execute("SELECT current_setting('synchronous_commit'), current_setting('jit')")
        before = cur.fetchone()
    monkeypatch.setattr(runs, "_execute", execute)
    run = ranking_run_request(team_id=team_id, trigger="test", delay_seconds=0)
    assert runs.ranking_run_execute(run_id=run.pk) == "done"
    assert seen == [("off", "off")]
    with connection.cursor() as cur:
        cur.execute("SELECT current_setting('synchronous_commit'), current_setting('jit')")
        assert cur.fetchone() == before != ("off", "off")


def test_incremental_runs_in_a_row_take_every_array_from_the_pool(monkeypatch):
    """A worker's steady state: each incremental run over a queue of the same length takes
    every array of the queue's length it makes from the pool (`risk.buffers`), none from
    the kernel: the first one after a full run those the full run left
    (`store_moved.ready_for_moves`), the later ones those of the rows they replaced."""
    from trustrank.ranking.services import store

    team_id = build(findings=600, services=60, edges=200, versions=30, seed=21)
    runs._PREVIOUS.clear()
    _run(team_id)
    monkeypatch.setattr(store, "_REWRITE_ABOVE", 0)
    moved = _kept_moved(monkeypatch)
    asked: list[bool] = []
    take = BUFFERS.empty

    def empty(n, dtype):
        asked.append(bool(BUFFERS._free.get((n, np.dtype(dtype)))))
        return take(n, dtype)

    monkeypatch.setattr(BUFFERS, "empty", empty)
    pooled = []
    for k in range(4):
        _set_impact(team_id, "svc-5", "very high" if k % 2 == 0 else "medium")
        asked.clear()
        assert _run(team_id).incremental
        pooled.append(all(asked) and len(asked) >= 7)
        # The rows' counts per environment and context, carried from the previous rows,
        # are those of their columns.
        rows = runs._PREVIOUS[team_id].rows
        assert rows.context_counts().tolist() == np.bincount(
            rows.context, minlength=len(rows.digests)).tolist()
        assert rows.env_counts() == {
            e: c for e, c in zip(rows.envs, np.bincount(rows.env, minlength=len(rows.envs))
                                 .tolist(), strict=True) if c}
    assert len(moved) == 4
    assert pooled == [True, True, True, True]


def _every_impact_flipped(team_id: int) -> None:
    """Every deployment's impact changed: every finding depends on it (`--rescore-all`)."""
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runtime_deployment SET human_impact = CASE WHEN human_impact = 'low' "
            "THEN 'high' ELSE 'low' END WHERE environment_id IN "
            "(SELECT id FROM runtime_environment WHERE team_id = %s)", [team_id])


def _kept_at_gather(monkeypatch) -> list[bool]:
    """Whether the worker still kept the team when each later run gathered (the real
    gather called after)."""
    from trustrank.ranking import inputs as ranking_inputs

    kept: list[bool] = []
    real_gather = ranking_inputs.ranking_inputs_gather

    def gather(**kwargs):
        kept.append(kwargs["team_id"] in runs._PREVIOUS)
        return real_gather(**kwargs)

    monkeypatch.setattr(runs, "ranking_inputs_gather", gather)
    return kept


def test_a_run_that_would_rescore_most_of_the_queue_ranks_afresh(settings, monkeypatch):
    """Past `TRUSTRANK_RANKING_RESCORE_ABOVE` and a quarter of the queue, the incremental
    attempt gives way to a full run, which gathers only after the worker forgot what it
    kept of the team (never two queues in memory) and stores what an incremental run would
    have: the same rows and digests. Below the limit, the run stays incremental."""
    team_id = _aged(build(findings=2000, services=200, edges=800, versions=40, seed=5))
    runs._PREVIOUS.clear()
    settings.TRUSTRANK_RANKING_RESCORE_ABOVE = 0
    assert not _run(team_id).incremental
    kept_at_gather = _kept_at_gather(monkeypatch)
    _every_impact_flipped(team_id)
    afresh = _run(team_id)
    assert not afresh.incremental
    assert afresh.counts["rescore_past_limit"] == afresh.counts["findings"] == 2000
    # The incremental attempt gathered with the team kept; the full run without it.
    assert kept_at_gather == [True, False]
    assert afresh.phase == "done" and afresh.status == "done"
    stored = _stored(team_id)

    # The same change again, under no limit: an incremental run stores the same.
    _every_impact_flipped(team_id)
    assert _run(team_id).counts.get("rescore_past_limit") == 2000
    settings.TRUSTRANK_RANKING_RESCORE_ABOVE = 10**9
    _every_impact_flipped(team_id)
    incremental = _run(team_id)
    assert incremental.incremental and "rescore_past_limit" not in incremental.counts
    assert _stored(team_id) == stored
    assert incremental.results_digest == afresh.results_digest
    assert incremental.inputs_digest == afresh.inputs_digest

    # One service's change rescores a few findings: incremental under the limit of 0 too
    # (a quarter of the queue).
    settings.TRUSTRANK_RANKING_RESCORE_ABOVE = 0
    _set_impact(team_id, "svc-3", "very high")
    small = _run(team_id)
    assert small.incremental and "rescore_past_limit" not in small.counts



def test_a_full_run_gathers_after_the_worker_forgot_an_outdated_queue(monkeypatch):
    """A kept queue past `_CACHE_MAX_AGE` is not used: the full run that follows drops it
    before gathering (holding it beside the new one doubled the run's peak), then keeps
    its own for the next run."""
    from datetime import timedelta

    team_id = _aged(build(findings=600, services=60, edges=200, versions=20, seed=9))
    runs._PREVIOUS.clear()
    first = _run(team_id)
    kept_at_gather = _kept_at_gather(monkeypatch)
    monkeypatch.setattr(runs, "_CACHE_MAX_AGE", timedelta(0))
    again = _run(team_id)
    assert not again.incremental and kept_at_gather == [False]
    assert runs._PREVIOUS[team_id].run_id == again.pk
    assert again.results_digest == first.results_digest
