"""Runs over few findings, in any order, and after a failed run: no run leaves the next
one failing. A run over 0 findings once made every later run of its team fail for as long
as the worker kept the empty result (an hour); a run that raised now makes its worker
forget the team's previous run, so the next one is a full run over what is stored.

Each run is checked against the pure engine's full ranking of the same evidence (ranks
1..n without gaps, every open finding once, the same order, scores and decisions) while
the worker keeps what it keeps, so chains of incremental runs are what is tested."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from bench.rerank import build
from trustrank.ranking.inputs import rank_settings, ranking_inputs_gather
from trustrank.ranking.models import RankingRun, RunStatus
from trustrank.ranking.ranks import env_rank_sql, rank_sql
from trustrank.ranking.services import runs
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.risk.engine import rank

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_worker():
    # A worker process's memory of previous runs, as a new worker starts.
    runs._PREVIOUS.clear()
    yield
    runs._PREVIOUS.clear()


def _team(findings: int) -> tuple[int, list[int]]:
    team_id = build(findings=findings, services=12, edges=30, versions=4, seed=7)
    with connection.cursor() as cur:
        cur.execute("SELECT id FROM findings_finding WHERE team_id = %s ORDER BY id", [team_id])
        return team_id, [row[0] for row in cur.fetchall()]


def _open_only(team_id: int, ids: list[int]) -> None:
    """Exactly `ids` of the team's findings open, the others resolved; those whose state
    changes marked written now (as triage writes them)."""
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE findings_finding SET state = CASE WHEN id = ANY(%s) THEN 'in_triage' "
            "ELSE 'resolved' END, updated_at = now() WHERE team_id = %s AND "
            "(state = 'in_triage') <> (id = ANY(%s))", [ids, team_id, ids])


def _execute(team_id: int) -> RankingRun:
    run = ranking_run_request(team_id=team_id, trigger="test", delay_seconds=0)
    runs.ranking_run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def _run(team_id: int) -> RankingRun:
    run = _execute(team_id)
    assert run.status == RunStatus.DONE, run.error
    return run


def _stored(team_id: int) -> list[tuple[int, int, float, str]]:
    """(finding, rank counted from the key, score, decision) in queue order."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT r.finding_id, {rank_sql('r')}, r.score, r.decision "
                    "FROM ranking_rankedfinding r WHERE r.team_id = %s "
                    "ORDER BY r.qkey, r.finding_id", [team_id])
        return cur.fetchall()


def _assert_ranked_as_a_full_run(team_id: int, run: RankingRun, open_ids: list[int]) -> None:
    gathered = ranking_inputs_gather(team_id=team_id)
    expected = [(int(r.finding_id), r.rank, r.score, r.decision)
                for r in rank(inputs=gathered.inputs, settings=rank_settings()).findings]
    stored = _stored(team_id)
    assert stored == expected
    assert [row[1] for row in stored] == list(range(1, len(open_ids) + 1))
    assert sorted(row[0] for row in stored) == sorted(open_ids)
    with connection.cursor() as cur:
        # Each environment's ranks are 1..n too.
        cur.execute(f"SELECT r.environment, array_agg({env_rank_sql('r')} "
                    "ORDER BY r.qkey, r.finding_id) FROM ranking_rankedfinding r "
                    "WHERE r.team_id = %s GROUP BY r.environment", [team_id])
        for _env, env_ranks in cur.fetchall():
            assert env_ranks == list(range(1, len(env_ranks) + 1))
    assert run.counts["findings"] == len(open_ids)
    assert sum(run.counts["by_environment"].values()) == len(open_ids)


# Open findings per run, as counts of the team's first findings: empty to empty, empty to
# one, one to empty, many to none and back, and each followed by incremental runs.
SEQUENCES = [
    [0, 0, 0],
    [0, 1, 1],
    [1, 0, 0],
    [1, 1, 0, 1],
    [20, 0, 20, 20],
    [0, 20, 1, 0, 3],
]


@pytest.mark.parametrize("sequence", SEQUENCES, ids=lambda s: "-".join(map(str, s)))
def test_runs_over_few_findings_in_any_order_rank_like_full_runs(sequence):
    team_id, ids = _team(max(sequence))
    for step, count in enumerate(sequence):
        _open_only(team_id, ids[:count])
        run = _run(team_id)
        # The worker kept each previous run: every run after the first builds on it.
        assert run.incremental == (step > 0)
        _assert_ranked_as_a_full_run(team_id, run, ids[:count])
    # And the last queue is what a worker that kept nothing stores.
    last = _stored(team_id)
    runs._PREVIOUS.clear()
    full = _run(team_id)
    assert not full.incremental and _stored(team_id) == last
    assert full.results_digest == run.results_digest
    assert full.inputs_digest == run.inputs_digest


def _fail_on(table: str, when: str = "") -> None:
    """The database refuses writes to `table` (a trigger raising, as a full disk or a
    lost connection would make a statement fail), until `_allow` is called."""
    with connection.cursor() as cur:
        cur.execute("CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$")
        # A run whose findings only left the queue writes no row, it only deletes them.
        events = "INSERT OR UPDATE" if when else "INSERT OR UPDATE OR DELETE"
        cur.execute(f"CREATE TRIGGER test_refuse BEFORE {events} ON {table} "
                    f"FOR EACH ROW {when} EXECUTE FUNCTION test_refuse()")


def _allow(table: str) -> None:
    with connection.cursor() as cur:
        cur.execute(f"DROP TRIGGER test_refuse ON {table}")
        cur.execute("DROP FUNCTION test_refuse()")


# Where the run fails: while storing the queue (the ranked rows' writes), or at its very
# end (marking the run done, after everything else was written in its transaction).
FAILURES = [
    ("ranking_rankedfinding", ""),
    ("ranking_rankingrun", "WHEN (NEW.status = 'done')"),
]


@pytest.mark.parametrize(("table", "when"), FAILURES, ids=["storing", "finishing"])
@pytest.mark.parametrize("before", [0, 1, 20], ids=lambda n: f"from-{n}")
def test_a_failed_run_leaves_the_next_one_working(table, when, before):
    """A run that failed part way stores nothing of its queue, and its worker forgets the
    team's previous run: the next run is a full one and ranks like one, and the runs after
    it are incremental again."""
    team_id, ids = _team(20)
    _open_only(team_id, ids[:before])
    first = _run(team_id)
    stored = _stored(team_id)
    _open_only(team_id, ids[:5])
    _fail_on(table, when)
    try:
        failed = _execute(team_id)
    finally:
        _allow(table)
    assert failed.status == RunStatus.FAILED and "injected failure" in failed.error
    assert team_id not in runs._PREVIOUS
    # Nothing of the failed run stayed: the queue is the last finished run's.
    assert _stored(team_id) == stored
    latest = RankingRun.objects.filter(team_id=team_id, status=RunStatus.DONE).latest(
        "finished_at")
    assert latest.pk == first.pk
    after = _run(team_id)
    assert not after.incremental
    assert after.previous_id == first.pk
    _assert_ranked_as_a_full_run(team_id, after, ids[:5])
    for count in (0, 3, 20):
        _open_only(team_id, ids[:count])
        run = _run(team_id)
        assert run.incremental
        _assert_ranked_as_a_full_run(team_id, run, ids[:count])


def test_a_run_failing_on_its_teams_first_queue_leaves_the_next_one_working():
    team_id, ids = _team(3)
    _fail_on("ranking_rankedfinding")
    try:
        failed = _execute(team_id)
    finally:
        _allow("ranking_rankedfinding")
    assert failed.status == RunStatus.FAILED
    assert _stored(team_id) == []
    run = _run(team_id)
    assert not run.incremental
    _assert_ranked_as_a_full_run(team_id, run, ids)


@pytest.mark.django_db(transaction=True)
def test_a_failed_first_run_waits_for_its_due_date_thread(settings):
    """A team's first run inserts due dates on a second connection; when the run fails,
    that connection has finished before the run is marked failed, so nothing of the failed
    run goes on writing beside the next one."""
    settings.TRUSTRANK_RANKING_DUE_THREAD_ABOVE = 10
    team_id, ids = _team(40)
    with connection.cursor() as cur:
        # The due dates' insert takes its time: a thread left alone would still be at it.
        cur.execute("CREATE FUNCTION test_slow() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$")
        cur.execute("CREATE TRIGGER test_slow BEFORE INSERT ON findings_findingdue "
                    "FOR EACH STATEMENT EXECUTE FUNCTION test_slow()")
    _fail_on("ranking_rankedfinding")
    try:
        failed = _execute(team_id)
        assert not [t for t in threading.enumerate() if t.name == "ranking-due-dates"]
    finally:
        _allow("ranking_rankedfinding")
        with connection.cursor() as cur:
            cur.execute("DROP TRIGGER test_slow ON findings_findingdue")
            cur.execute("DROP FUNCTION test_slow()")
    assert failed.status == RunStatus.FAILED
    run = _run(team_id)
    assert not run.incremental
    _assert_ranked_as_a_full_run(team_id, run, ids)
