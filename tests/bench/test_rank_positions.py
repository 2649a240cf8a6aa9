"""bench/rank_positions.py at a tiny size: the ranks it derives from the queue key and its
checkpoints, and those from its bucket and group counts, must equal a dense row_number()
over the key for every finding, before and after incremental runs adjust them (runs that
split buckets and groups included), and the past ranks it rebuilds from history must equal
the ranks the queue had then. The bench's own database, not the test database."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from bench import rank_positions as rp

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench_conn() -> Iterator[psycopg.Connection]:
    name = f"rankpos_test_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(rp.admin_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(rp.db_url(name), autocommit=True) as conn:
            conn.execute("SET jit = off")
            rp.build(conn, rows=3000)
            conn.execute(rp.TEMP)
            yield conn
    finally:
        with psycopg.connect(rp.admin_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _truth(conn: psycopg.Connection) -> set[tuple[int, int, int]]:
    return set(conn.execute(rp.TRUTH, {"team": rp.TEAM}).fetchall())


LAYOUT = {"spacing": 32, "group": 4, "split_over": 1.25}


def _count(conn: psycopg.Connection, table: str) -> int:
    return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_checkpoint_and_bucket_ranks_equal_dense_ranks_through_incremental_runs(bench_conn):
    conn = bench_conn
    rp.checkpoints_rebuild(conn, spacing=32)
    rp.rb.rebuild(conn, teams=(rp.TEAM, rp.OTHER_TEAM), spacing=32, group=4)
    assert rp.verify_keys(conn) == 0
    assert rp.verify_ranks(conn) == 0
    assert rp.verify_ranks(conn, "buckets") == 0
    before = _truth(conn)
    rng = random.Random(5)
    buckets, groups = _count(conn, "rp_bucket"), _count(conn, "rp_group")
    for run in range(2, 11):
        # 500 findings rise and 50 leave: most of the queue shifts, so a count left
        # unadjusted (or adjusted by one too many) shows as wrong ranks below it. Runs 8-10
        # put all 500 into one narrow key range: the bucket holding it in the team queue and
        # in prod's is split, and its group with it.
        change = rp.Change(rng, rows=3000, run=run, narrow=run >= 8)
        change.apply(conn, **LAYOUT)
        assert rp.verify_ranks(conn) == 0, f"after run {run}"
        assert rp.verify_ranks(conn, "buckets") == 0, f"after run {run}"
        if run >= 8:
            assert change.added >= 2 * 500 // 32 - 2, f"run {run} split too little"
    assert _count(conn, "rp_bucket") > buckets and _count(conn, "rp_group") > groups
    limit = 2 * LAYOUT["group"]
    assert conn.execute(
        "SELECT max(c) FROM (SELECT count(*) c FROM rp_bucket GROUP BY team_id, per_env,"
        " environment, g) s"
    ).fetchone()[0] <= limit
    assert _truth(conn) != before
    past = set(conn.execute(rp.PAST_RANKS, {"team": rp.TEAM, "as_of": 1}).fetchall())
    assert past == before
    # The check itself sees a wrong count: one checkpoint's `below`, one bucket's or one
    # group's `n` off by one.
    for table, column, order, layout in (
        ("rp_checkpoint", "below", "qkey, finding_id", "prefix"),
        ("rp_bucket", "n", "qkey, finding_id", "buckets"),
        ("rp_group", "n", "g", "buckets"),
    ):
        tamper = (f"UPDATE {table} SET {column} = {column} + %s WHERE ctid = (SELECT ctid"
                  f" FROM {table} WHERE team_id = %s AND NOT per_env AND {column} > 0"
                  f" ORDER BY {order} LIMIT 1)")
        conn.execute(tamper, [1, rp.TEAM])
        assert rp.verify_ranks(conn, layout) > 0, table
        conn.execute(tamper, [-1, rp.TEAM])
        assert rp.verify_ranks(conn, layout) == 0, table


def test_the_script_runs_and_verifies_at_a_tiny_size():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "bench/rank_positions.py", "--rows", "5000", "--spacing", "64",
         "--group", "4", "--reps", "3", "--slow-reps", "1", "--incremental-reps", "3",
         "--split-reps", "2", "--rewrite-reps", "1", "--verify"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=300,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["rows"] == 5000
    assert out["verify_key_mismatches"] == 0
    assert out["verify_mismatches_before"] == 0
    assert out["verify_mismatches_after"] == 0
    assert out["verify_past_mismatches"] == 0
    assert out["verify_bucket_mismatches_before"] == 0
    assert out["verify_bucket_mismatches_after"] == 0
    assert min(out["incremental_split_buckets_added"]) > 0
    assert out["incremental_write_buckets_ms"]["p50"] > 0
    assert out["first_page_ms"]["p50"] > 0
    assert out["dense_rewrite_ms"]["rows_rewritten"][0] > 0
    with psycopg.connect(rp.admin_url(), autocommit=True) as admin:
        left = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = 'rankpos_bench_5000'"
        ).fetchone()
    assert left is None
