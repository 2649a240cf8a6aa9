"""bench/rank_positions.py at a tiny size: the ranks it derives from the queue key and its
checkpoints must equal a dense row_number() over the key for every finding, before and after
incremental runs adjust the checkpoints, and the past ranks it rebuilds from history must
equal the ranks the queue had then. The bench's own database, not the test database."""

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


def test_checkpoint_ranks_equal_dense_ranks_through_incremental_runs(bench_conn):
    conn = bench_conn
    rp.checkpoints_rebuild(conn, spacing=32)
    assert rp.verify_keys(conn) == 0
    assert rp.verify_ranks(conn) == 0
    before = _truth(conn)
    rng = random.Random(5)
    for run in range(2, 8):
        # 500 findings rise and 50 leave: most of the queue shifts, so a checkpoint count
        # left unadjusted (or adjusted by one too many) shows as wrong ranks below it.
        rp.Change(rng, rows=3000, run=run).apply(conn)
        assert rp.verify_ranks(conn) == 0, f"after run {run}"
    assert _truth(conn) != before
    past = set(conn.execute(rp.PAST_RANKS, {"team": rp.TEAM, "as_of": 1}).fetchall())
    assert past == before
    # The check itself sees a wrong count: one checkpoint's `below` off by one.
    conn.execute(
        "UPDATE rp_checkpoint SET below = below + 1 WHERE ctid = (SELECT ctid FROM rp_checkpoint"
        " WHERE team_id = %s AND NOT per_env AND below > 0 LIMIT 1)", [rp.TEAM]
    )
    assert rp.verify_ranks(conn) > 0


def test_the_script_runs_and_verifies_at_a_tiny_size():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "bench/rank_positions.py", "--rows", "5000", "--spacing", "64",
         "--reps", "3", "--slow-reps", "1", "--incremental-reps", "3", "--rewrite-reps", "1",
         "--verify"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=300,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["rows"] == 5000
    assert out["verify_key_mismatches"] == 0
    assert out["verify_mismatches_before"] == 0
    assert out["verify_mismatches_after"] == 0
    assert out["verify_past_mismatches"] == 0
    assert out["first_page_ms"]["p50"] > 0
    assert out["dense_rewrite_ms"]["rows_rewritten"][0] > 0
    with psycopg.connect(rp.admin_url(), autocommit=True) as admin:
        left = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = 'rankpos_bench_5000'"
        ).fetchone()
    assert left is None
