"""One ranking run of a team at a time, whichever worker runs it: a run whose team has a run
going waits for it (its phase says so), past the job's lock timeout, then ranks from what
that run stored; the bucket counts stay those of the stored keys."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection, connections

from tests.ranking.scenario import build
from tests.ranking.test_positions import _assert_counted_as_dense
from trustrank.ranking.models import RankingRun, RunStatus
from trustrank.ranking.services import runs
from trustrank.ranking.services.requests import ranking_run_request

pytestmark = pytest.mark.django_db(transaction=True)

WAITING = "waiting for the team's running run"


def _other_session() -> psycopg.Connection:
    """A session of its own, as another worker's would be."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def _phase_of(run_id: int) -> tuple[str, str]:
    run = RankingRun.objects.only("status", "phase").get(pk=run_id)
    return run.status, run.phase


def test_a_run_waits_for_the_teams_running_run_then_ranks(team, other_team, settings):
    # A job's lock timeout must not end the wait: the other run may take minutes.
    settings.TRUSTRANK_JOB_LOCK_TIMEOUT_SECONDS = 1
    build(team)
    first = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert runs.ranking_run_execute(run_id=first.pk) == "done"
    runs._PREVIOUS.clear()  # the next runs come to a worker that ran neither
    holder = _other_session()
    holder.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))",
                   [f"ranking-run:{team.pk}"])
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    outcome: list[str] = []

    def work() -> None:
        try:
            outcome.append(runs.ranking_run_execute(run_id=run.pk))
        finally:
            connections.close_all()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while _phase_of(run.pk) != (RunStatus.RUNNING, WAITING):
            assert time.monotonic() < deadline, _phase_of(run.pk)
            time.sleep(0.05)
        # Another team's run does not wait (the shared evidence is the first team's).
        other = ranking_run_request(team_id=other_team.pk, trigger="test", delay_seconds=0)
        assert runs.ranking_run_execute(run_id=other.pk) == "done"
        # Past the lock timeout, still waiting, not retried.
        time.sleep(2.5)
        assert _phase_of(run.pk) == (RunStatus.RUNNING, WAITING)
        assert RankingRun.objects.get(pk=run.pk).attempts == 1
    finally:
        holder.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
                       [f"ranking-run:{team.pk}"])
        holder.close()
        thread.join(60)
    assert outcome == ["done"], RankingRun.objects.get(pk=run.pk).error
    assert _phase_of(run.pk) == (RunStatus.DONE, "done")
    _assert_counted_as_dense(team.pk)
    # The run let the lock go: the next one does not wait.
    after = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert runs.ranking_run_execute(run_id=after.pk) == "done"
    with connection.cursor() as cur:
        # This database's advisory locks only: a bench beside the tests holds its own.
        cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())")
        assert cur.fetchone()[0] == 0

