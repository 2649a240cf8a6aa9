"""A full run over a large queue stores its contexts and per-service results on connections
of their own while its own stores the queue (`ranking.services.side`), and the process
does its other work while PostgreSQL takes the chunks (`store_columns._copy`'s fill)."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from bench.rerank import build
from tests.ranking.test_run_sequences import _execute
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services import runs, side, store_columns, store_copy


def _fresh(team_id: int) -> RankingRun:
    """A full run that stores the team's first queue, nothing of earlier runs left: no
    ranked rows, contexts or per-service results."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [team_id])
        cur.execute("DELETE FROM ranking_rankcontext")
        cur.execute("DELETE FROM ranking_serviceresults")
        cur.execute("DELETE FROM ranking_serviceresultrow")
    runs._PREVIOUS.clear()
    return _execute(team_id)


def _stored() -> tuple[set[str], set[str], set[tuple[str, ...]]]:
    """(contexts the ranked rows name, contexts stored, per-service results stored: each
    set's rows, with their digest)."""
    with connection.cursor() as cur:
        cur.execute("SELECT DISTINCT context_id FROM ranking_rankedfinding")
        named = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT digest FROM ranking_rankcontext")
        contexts = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT h.digest, r.environment, r.name, r.exposure, r.data::text "
                    "FROM ranking_serviceresults h "
                    "LEFT JOIN ranking_serviceresultrow r ON r.digest = h.digest")
        return named, contexts, set(cur.fetchall())


@pytest.mark.django_db(transaction=True)
def test_a_large_full_run_stores_contexts_and_service_results_beside_the_queue(
        settings, monkeypatch):
    """Above the setting, the contexts and the per-service results go in on connections
    other than the run's, and the run stores what it stores inline below it: the same
    contexts, the same per-service results under the same digest, the same rows."""
    team_id = build(findings=300, services=30, edges=90, versions=15, seed=23)
    settings.TRUSTRANK_RANKING_SIDE_WRITES_ABOVE = 10**9
    inline = _fresh(team_id)
    assert inline.status == "done", inline.error
    expected = _stored()
    assert expected[0] <= expected[1] and inline.services_digest in {r[0] for r in expected[2]}

    backends: dict[str, int] = {}
    real = side.SideWrite.__init__

    def spied(self, name, work):
        def traced():
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                backends[name] = cur.fetchone()[0]
            return work()
        real(self, name, traced)

    monkeypatch.setattr(side.SideWrite, "__init__", spied)
    settings.TRUSTRANK_RANKING_SIDE_WRITES_ABOVE = 10
    aside = _fresh(team_id)
    assert aside.status == "done", aside.error
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        own = cur.fetchone()[0]
    assert set(backends) == {"ranking-contexts", "ranking-services"}
    assert own not in backends.values()
    assert _stored() == expected
    assert (aside.services_digest, aside.results_digest, aside.inputs_digest) == (
        inline.services_digest, inline.results_digest, inline.inputs_digest)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("where", ["services", "contexts"])
def test_a_side_write_that_fails_fails_the_run_and_stores_no_queue(
        settings, monkeypatch, where):
    """The side connection's error is the run's: the run is not done and its queue is
    not stored (its transaction rolls back), whichever write failed."""
    team_id = build(findings=120, services=12, edges=30, versions=6, seed=24)
    settings.TRUSTRANK_RANKING_SIDE_WRITES_ABOVE = 10

    def broken(*_args, **_kwargs):
        raise RuntimeError(f"{where} write failed")

    if where == "services":
        monkeypatch.setattr(runs, "services_store", broken)
    else:
        monkeypatch.setattr(store_columns, "_contexts_stored", broken)
    run = _fresh(team_id)
    assert run.status != "done"
    assert f"{where} write failed" in run.error
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM ranking_rankedfinding WHERE team_id = %s",
                    [team_id])
        assert cur.fetchone()[0] == 0


def _queue(n: int) -> store_columns._Queue:
    return store_columns._Queue(
        fid=np.arange(1, n + 1, dtype=np.int64) + 10**12,
        env_rank=np.arange(1, n + 1, dtype=np.int32), env=np.zeros(n, dtype=np.int32),
        score=np.linspace(90.0, 10.0, n), decision=np.zeros(n, dtype=np.int8),
        context=np.zeros(n, dtype=np.int32), envs=[""], digests=["d" * 64], bodies={},
        qkey=np.arange(n, dtype=np.int64))


@pytest.mark.django_db
@pytest.mark.parametrize("behind", [True, False])
def test_the_copy_does_other_work_while_postgresql_is_behind(monkeypatch, behind):
    """`fill` is called once a chunk, and again for as long as chunks wait to be sent,
    until it has nothing left: with PostgreSQL behind, all of it during the first chunk;
    never behind, a step a chunk. The rows are stored either way."""
    monkeypatch.setattr(store_columns, "_CHUNK", 50)
    monkeypatch.setattr(store_copy._QueuedWriter, "behind", lambda self: behind)
    events: list[object] = []
    steps = iter(range(5))

    def fill() -> bool:
        done = next(steps, None) is not None
        events.append("step" if done else "none")
        return done

    q = _queue(300)
    with connection.cursor() as cur:
        store_columns._copy(cur, q, team_id=0, run_id=0, chunks=store_columns._chunks(q),
                            on_chunk=lambda start, end: events.append(start), fill=fill)
        cur.execute("SELECT count(*) FROM ranking_rankedfinding WHERE team_id = 0")
        assert cur.fetchone()[0] == 300
    if behind:
        assert events == [0, *["step"] * 5, "none", *[x for s in range(50, 300, 50)
                                                       for x in (s, "none")]]
    else:
        assert events == [x for s, e in zip(range(0, 300, 50),
                                            ["step"] * 5 + ["none"], strict=True)
                          for x in (s, e)]
