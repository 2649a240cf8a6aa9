"""Ranks counted from the queue key and the bucket counts (trustrank/ranking/positions.py)
equal the true dense ranks (each row's place in its team's and its environment's queue
ordered by (qkey, finding_id)), after every kind of run; the stored `rank` columns are
not compared, as a run writes only the rows whose own values changed: a team's first queue,
incremental runs that write a few rows, runs that rewrite the queue, buckets split by a
run, findings deleted between runs, and a queue stored before keys were."""

from __future__ import annotations

import random

import pytest
from django.db import connection

from trustrank.accounts.models import Team
from trustrank.findings.models import Finding
from trustrank.ranking import positions, ranks
from trustrank.ranking.services import runs, store

# `_fresh_worker` (autouse): each test starts as a new worker, remembering no run.
from .test_run_sequences import _fresh_worker, _open_only, _run, _team  # noqa: F401

pytestmark = pytest.mark.django_db


def _dense_ranks(team_id: int) -> dict[int, tuple[int, int]]:
    """Each ranked row's place in the team's queue and in its environment's, by key."""
    with connection.cursor() as cur:
        cur.execute("SELECT finding_id, row_number() OVER (ORDER BY qkey, finding_id), "
                    "row_number() OVER (PARTITION BY environment ORDER BY qkey, finding_id) "
                    "FROM ranking_rankedfinding WHERE team_id = %s", [team_id])
        return {fid: (rank, env_rank) for fid, rank, env_rank in cur.fetchall()}


def _counted(team_id: int) -> dict[int, tuple[int, int]]:
    with connection.cursor() as cur:
        cur.execute("SELECT finding_id FROM ranking_rankedfinding WHERE team_id = %s",
                    [team_id])
        ids = [row[0] for row in cur.fetchall()]
        return positions.ranks_of(cur, ids)


def _key_order(team_id: int) -> list[int]:
    with connection.cursor() as cur:
        cur.execute("SELECT finding_id FROM ranking_rankedfinding WHERE team_id = %s "
                    "ORDER BY qkey, finding_id", [team_id])
        return [row[0] for row in cur.fetchall()]


def _assert_counted_as_dense(team_id: int) -> None:
    # The stored keys order the queue as the engine did (the rows the worker kept of its
    # run are by place).
    cached = runs._PREVIOUS.get(team_id)
    if cached is not None:
        assert _key_order(team_id) == cached.rows.fid.tolist()
    assert _counted(team_id) == _dense_ranks(team_id)
    # The SQL functions every reader counts with (ranking.0008) agree.
    assert ranks.ranks_of(_key_order(team_id)) == _dense_ranks(team_id)
    t = positions.PRODUCT
    with connection.cursor() as cur:
        # Every bucket counts the rows from its threshold up to the next one's, and every
        # group the sum of its buckets (a count a rank does not read, the last bucket's,
        # must hold too: the next run's rank reads it once another bucket follows).
        cur.execute(f"""
            SELECT c.per_env, c.environment, c.qkey, c.finding_id, c.n, (
                SELECT count(*) FROM {t.ranked} x WHERE x.team_id = c.team_id
                  AND (NOT c.per_env OR x.environment = c.environment)
                  AND (x.qkey, x.finding_id) >= (c.qkey, c.finding_id)
                  AND (x.qkey, x.finding_id) < coalesce((
                      SELECT (d.qkey, d.finding_id) FROM {t.bucket} d
                      WHERE d.team_id = c.team_id AND d.per_env = c.per_env
                        AND d.environment = c.environment
                        AND (d.qkey, d.finding_id) > (c.qkey, c.finding_id)
                      ORDER BY d.qkey, d.finding_id LIMIT 1), ({positions.MAX_KEY}, 0)))
            FROM {t.bucket} c WHERE c.team_id = %s""", [team_id])
        for *where, n, rows in cur.fetchall():
            assert n == rows, where
        cur.execute(f"""
            SELECT gr.per_env, gr.environment, gr.g, gr.n, (
                SELECT coalesce(sum(c.n), 0) FROM {t.bucket} c WHERE c.team_id = gr.team_id
                  AND c.per_env = gr.per_env AND c.environment = gr.environment
                  AND c.g = gr.g)
            FROM {t.group} gr WHERE gr.team_id = %s""", [team_id])
        for *where, n, total in cur.fetchall():
            assert n == total, where


def _buckets(team_id: int) -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {positions.PRODUCT.bucket} WHERE team_id = %s",
                    [team_id])
        return cur.fetchone()[0]


@pytest.mark.parametrize("spacing", [2, 3, 1024])
def test_ranks_counted_from_the_buckets_equal_the_dense_ranks_over_runs(monkeypatch, spacing):
    """A chain of runs of one worker (incremental: a few rows written, buckets adjusted and
    split) and of workers that kept nothing (the rows compared with the stored ones), with
    findings opening and closing, equals the dense ranks by key after every run. Small
    spacings make every run split buckets and groups."""
    monkeypatch.setattr(positions, "SPACING", spacing)
    monkeypatch.setattr(positions, "GROUP", 2)
    team_id, ids = _team(60)
    rng = random.Random(spacing)
    for step in range(8):
        _open_only(team_id, sorted(rng.sample(ids, rng.randint(1, len(ids)))))
        if step == 4:
            runs._PREVIOUS.clear()
        run = _run(team_id)
        assert run.incremental == (step not in (0, 4))
        # The first queue's counts are made whole; after it a run adjusts them.
        assert run.counts["buckets"] == ("rebuilt" if step == 0 else "adjusted")
        _assert_counted_as_dense(team_id)
    assert _buckets(team_id) > (4 if spacing < 10 else 0)


def test_a_run_that_rewrites_the_queue_rebuilds_the_counts(monkeypatch):
    monkeypatch.setattr(store, "_REWRITE_ABOVE", 0)
    team_id, ids = _team(30)
    _open_only(team_id, ids[:20])
    _run(team_id)
    _open_only(team_id, ids[5:30])
    run = _run(team_id)
    assert run.incremental and run.counts["buckets"] == "rebuilt"
    _assert_counted_as_dense(team_id)


def test_a_finding_deleted_between_runs_leaves_no_count_behind(monkeypatch):
    """A deleted finding takes its ranked row (the ORM cascades) but not its count; the
    next run finds the counts disagree with its queue and counts them anew."""
    monkeypatch.setattr(positions, "SPACING", 2)
    team_id, ids = _team(20)
    _open_only(team_id, ids)
    _run(team_id)
    Finding.objects.filter(pk__in=ids[3:6]).delete()
    runs._PREVIOUS.clear()
    assert _run(team_id).counts["buckets"] == "rebuilt"
    _assert_counted_as_dense(team_id)
    assert not set(ids[3:6]) & set(_dense_ranks(team_id))


def test_a_queue_stored_before_keys_were_gets_them_at_the_next_run(monkeypatch):
    monkeypatch.setattr(positions, "SPACING", 2)
    team_id, ids = _team(20)
    _open_only(team_id, ids)
    _run(team_id)
    with connection.cursor() as cur:
        cur.execute("UPDATE ranking_rankedfinding SET qkey = 0 WHERE team_id = %s", [team_id])
        cur.execute(f"DELETE FROM {positions.PRODUCT.bucket} WHERE team_id = %s", [team_id])
        cur.execute(f"DELETE FROM {positions.PRODUCT.group} WHERE team_id = %s", [team_id])
    # Until that run, readers show the ranks the queue was stored with.
    with connection.cursor() as cur:
        cur.execute("SELECT finding_id, rank, env_rank FROM ranking_rankedfinding "
                    "WHERE team_id = %s", [team_id])
        stored = {fid: (rank, env) for fid, rank, env in cur.fetchall()}
    assert stored and ranks.ranks_of(ids) == stored
    assert ranks.team_ranks_of(ids) == {f: r for f, (r, _e) in stored.items()}
    runs._PREVIOUS.clear()
    _run(team_id)
    _assert_counted_as_dense(team_id)


@pytest.mark.parametrize("spacing", [3, 7])
def test_ranks_among_runs_of_equal_keys_count_each_row_once(spacing):
    """A queue holds few distinct keys (some hundreds for a million findings), so a bucket
    starts inside a run of equal keys and a row's key is often its threshold's: the count
    inside the bucket takes the rest of the threshold's key, the keys between and the
    start of the row's own key, each row once."""
    team_id, ids = _team(40)
    _open_only(team_id, ids)
    _run(team_id)
    with connection.cursor() as cur:
        cur.execute("UPDATE ranking_rankedfinding SET qkey = (finding_id * 7 %% 3) * 10 "
                    "WHERE team_id = %s", [team_id])
        positions.rebuild(cur, team_id=team_id, spacing=spacing, group=2)
    dense = _dense_ranks(team_id)
    assert len(set(_keys(team_id))) == 3
    assert _counted(team_id) == dense
    assert ranks.ranks_of(ids) == dense
    assert ranks.team_ranks_of(ids) == {f: r for f, (r, _e) in dense.items()}
    # The SQL functions (ranking.0010) count the same way.
    with connection.cursor() as cur:
        cur.execute(f"SELECT r.finding_id, {ranks.rank_sql('r')}, {ranks.env_rank_sql('r')} "
                    "FROM ranking_rankedfinding r WHERE r.team_id = %s", [team_id])
        assert {fid: (rank, env) for fid, rank, env in cur.fetchall()} == dense


def _keys(team_id: int) -> list[int]:
    with connection.cursor() as cur:
        cur.execute("SELECT qkey FROM ranking_rankedfinding WHERE team_id = %s", [team_id])
        return [row[0] for row in cur.fetchall()]


def _two_ranked_teams(findings: int) -> tuple[int, dict[int, tuple[int, int]], int, list[int]]:
    """(first team, its counted ranks after its run, second team, its findings): each
    team's findings all open and ranked, the first's run before the second is built."""
    first, first_ids = _team(findings)
    # The bench's build replaces the team of its name: keep this one.
    Team.objects.filter(pk=first).update(name="first")
    _open_only(first, first_ids)
    _run(first)
    before = _counted(first)
    other, other_ids = _team(findings)
    _open_only(other, other_ids)
    _run(other)
    return first, before, other, other_ids


def test_other_teams_counts_are_untouched(monkeypatch):
    monkeypatch.setattr(positions, "SPACING", 2)
    first, before, other, other_ids = _two_ranked_teams(15)
    _open_only(other, other_ids[:4])
    _run(other)
    assert _counted(first) == before == _dense_ranks(first)
    _assert_counted_as_dense(other)


def _bucket_rows(team_id: int) -> tuple[int, int]:
    with connection.cursor() as cur:
        cur.execute("SELECT (SELECT count(*) FROM ranking_rankbucket WHERE team_id = %s), "
                    "(SELECT count(*) FROM ranking_rankbucketgroup WHERE team_id = %s)",
                    [team_id, team_id])
        row = cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def test_a_deleted_team_takes_its_bucket_counts_with_it(monkeypatch):
    """The bucket counts name their team by id; deleting the team deletes them (a trigger
    on the teams table, ranking.0011), and another team's counts stay as they were."""
    monkeypatch.setattr(positions, "SPACING", 2)
    kept, before, gone, _gone_ids = _two_ranked_teams(12)
    assert all(_bucket_rows(gone))
    runs._PREVIOUS.clear()
    Team.objects.filter(pk=gone).delete()
    assert _bucket_rows(gone) == (0, 0)
    assert all(_bucket_rows(kept))
    assert _counted(kept) == before == _dense_ranks(kept)


def test_a_queue_that_gets_its_first_findings_gets_its_first_bucket(monkeypatch):
    """An empty queue has no bucket; a run that puts findings in it (the team's, or an
    environment's) makes the one below every key before adjusting the counts."""
    monkeypatch.setattr(positions, "SPACING", 2)
    team_id, ids = _team(12)
    with connection.cursor() as cur:
        # Half the services run in a second environment.
        cur.execute("INSERT INTO runtime_environment (team_id, name, first_seen, last_seen) "
                    "VALUES (%s, 'staging', now(), now()) RETURNING id", [team_id])
        staging = cur.fetchone()[0]
        cur.execute("UPDATE runtime_deployment d SET environment_id = %s FROM "
                    "runtime_environment e WHERE e.id = d.environment_id AND e.team_id = %s "
                    "AND d.id %% 2 = 0", [staging, team_id])
    _open_only(team_id, [])
    _run(team_id)
    assert _buckets(team_id) == 0
    _open_only(team_id, ids)
    everywhere = _run(team_id).counts["by_environment"]
    assert len(everywhere) > 1
    # One environment's findings first, then the others'.
    env = sorted(everywhere)[0]
    with connection.cursor() as cur:
        cur.execute("SELECT finding_id FROM ranking_rankedfinding WHERE team_id = %s "
                    "AND environment = %s", [team_id, env])
        first = [row[0] for row in cur.fetchall()]
    _open_only(team_id, [])
    _run(team_id)
    for opened in (first, ids):
        _open_only(team_id, opened)
        run = _run(team_id)
        assert run.incremental
        _assert_counted_as_dense(team_id)
    assert run.counts["buckets"] == "adjusted"


@pytest.mark.parametrize("spacing", [2, 5])
def test_counts_made_from_the_rows_in_memory_equal_those_postgresql_makes(monkeypatch, spacing):
    """A run that writes the whole queue lays the buckets out from its rows in memory;
    PostgreSQL's numbering of the stored rows (`positions.rebuild`) gives the same rows."""
    monkeypatch.setattr(positions, "SPACING", spacing)
    monkeypatch.setattr(positions, "GROUP", 2)
    team_id, ids = _team(40)
    _open_only(team_id, ids)
    assert _run(team_id).counts["buckets"] == "rebuilt"

    def layout() -> tuple[list[tuple], list[tuple]]:
        t = positions.PRODUCT
        with connection.cursor() as cur:
            cur.execute(f"SELECT per_env, environment, qkey, finding_id, g, n FROM {t.bucket} "
                        "WHERE team_id = %s ORDER BY 1, 2, 3, 4", [team_id])
            buckets = cur.fetchall()
            cur.execute(f"SELECT per_env, environment, g, n FROM {t.group} "
                        "WHERE team_id = %s ORDER BY 1, 2, 3", [team_id])
            return buckets, cur.fetchall()

    from_rows = layout()
    assert len(from_rows[0]) > 8
    with connection.cursor() as cur:
        positions.rebuild(cur, team_id=team_id)
    assert layout() == from_rows
    _assert_counted_as_dense(team_id)


def test_the_rank_functions_plan_index_scans_without_jit():
    """Planned for any arguments, the count inside a bucket looked like a ninth of the table:
    at ten million rows PostgreSQL scanned the table (1.3 s a call) and compiled each call;
    the functions allow index scans only, without JIT."""
    with connection.cursor() as cur:
        cur.execute("SELECT proname, proconfig FROM pg_proc WHERE proname = ANY(%s)",
                    [[f"{positions.FUNCTION}_team", f"{positions.FUNCTION}_env"]])
        found = dict(cur.fetchall())
    assert set(found) == {f"{positions.FUNCTION}_team", f"{positions.FUNCTION}_env"}
    for config in found.values():
        assert {"enable_seqscan=off", "enable_bitmapscan=off", "jit=off"} <= set(config)
