"""Ranks derived from the queue key instead of a stored dense rank (issue 26): a measured
design spike on synthetic rows, in PostgreSQL only (no engine, no Django).

Builds, in its own database `rankpos_bench_<rows>` (`--reuse` keeps one that holds as many
rows), two tables of one team's open findings (plus a small second team) spread over five
environments, made by `generate_series`:

- `rp_ranked`, the proposed row: the queue key as (`qkey`, `finding_id`), ascending,
  where `qkey` bigint packs the engine's key before the id (`qkey()`: decision order 0
  immediate … 3 defer, deployed nowhere, 8 − SSVC level, then −score on its 0.0001 grid),
  with B-tree indexes on (team, key) and (team, environment, key); a queue is the key's
  ascending order. (Five separate key columns, the first version of this script, made
  PostgreSQL 15 read on past the end of a row-comparison range to the end of the leading
  column's group: 1.3 s for the ranks of 50 findings at a million rows; see
  docs/ranking.md.) `rp_checkpoint` holds, every `--spacing` positions of the team queue
  (`per_env` false) and of each environment's queue (`per_env` true), a key threshold and
  `below`, the count of rows of that queue with a smaller key, plus a sentinel below every
  key with `below` 0. A finding's rank = the nearest checkpoint at or below its key's
  `below` + the rows from that threshold up to its key + 1 (one LATERAL statement).
  `rp_history` keeps a finding's own key changes only (key before and after, per run).
- `rp_bucket` and `rp_group` (bench/_rank_buckets.py), the bucket layout beside the
  checkpoints: each queue cut into buckets at key thresholds holding their own row count
  `n`, and groups of buckets holding the sum of theirs. A rank = the groups' sums before
  the finding's group + its group's buckets before its bucket + the rows from its bucket's
  threshold + 1; an incremental run adds its −1 and +1 to the changed findings' buckets and
  groups only, and splits a bucket that grew past `--split-over` × `--spacing` rows.
- `rp_dense`, today's `ranking_rankedfinding` shape: dense `rank` and `env_rank`, indexes
  (team, rank) and (team, environment, env_rank).

Then times, p50/p95 over `--reps` repetitions (the plain counts and rewrites fewer): the
first page with ranks, deep pages (offset, offset through a checkpoint, keyset), the rank
and environment rank of 50 arbitrary findings (plain count, checkpoint + count between,
and the dense column; and by buckets), an incremental run's write (500 findings' new keys
upserted, 50 deleted, history rows, every checkpoint's count adjusted and the buckets'
counts adjusted, one transaction: both layouts are kept by every run and each part is
timed, so `incremental_write_ms` = rows + prefix + commit and
`incremental_write_buckets_ms` = rows + buckets + split + commit), the same for
`--split-reps` runs whose 500 findings all enter one narrow key range (a bucket split in
each), a full rebuild of the checkpoints and of the buckets, the past ranks of a whole
queue rebuilt from history, rewriting the dense ranks after such a change (today's cost),
and the index sizes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        python bench/rank_positions.py [--rows 1000000] [--spacing 1024] [--group 64]
            [--split-over 1.25] [--reuse] [--keep]

`--verify` checks that the derived ranks and environment ranks of every row (by checkpoints
and by buckets) equal a row_number() over the key, before and after the incremental runs,
and that the past ranks rebuilt from history equal the ranks the queue had then (for small
sizes: tests/bench).
The database is dropped at the end unless `--keep` (or `--reuse`) is given.

Last line: {"rows": …, "spacing": …, "first_page_ms": {"p50": …, "p95": …}, …}
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _rank_buckets as rb

TEAM = 1
OTHER_TEAM = 2
ENVIRONMENTS = ("", "prod", "staging", "dev", "qa")
KEY = ("qkey", "finding_id")
# Below every real key: the first checkpoint of each queue, so every key has one at or below.
SENTINEL = (-(2**63), -(2**63))
PAGE = 50


def _key(alias: str) -> str:
    return "(" + ", ".join(f"{alias}.{c}" for c in KEY) + ")"


K_R, K_X, K_C, K_CP = _key("r"), _key("x"), _key("c"), _key("cp")
KEY_DESC = ", ".join(f"c.{c} DESC" for c in KEY)
KEY_ASC = ", ".join(KEY)

SCHEMA = f"""
CREATE TABLE rp_ranked (
    finding_id bigint PRIMARY KEY, team_id int NOT NULL, run_id int,
    environment varchar(120) NOT NULL, qkey bigint NOT NULL,
    score double precision NOT NULL, decision varchar(16) NOT NULL, context_id varchar(64)
);
CREATE TABLE rp_dense (
    finding_id bigint PRIMARY KEY, team_id int NOT NULL, run_id int, rank int NOT NULL,
    env_rank int NOT NULL, environment varchar(120) NOT NULL, score double precision NOT NULL,
    decision varchar(16) NOT NULL, context_id varchar(64)
);
CREATE TABLE rp_checkpoint (
    team_id int NOT NULL, per_env bool NOT NULL, environment varchar(120) NOT NULL,
    qkey bigint NOT NULL, finding_id bigint NOT NULL, below bigint NOT NULL,
    PRIMARY KEY (team_id, per_env, environment, {KEY_ASC})
);
CREATE INDEX rp_checkpoint_below ON rp_checkpoint (team_id, per_env, environment, below);
CREATE TABLE rp_history (
    id bigserial PRIMARY KEY, team_id int NOT NULL, run_id int NOT NULL,
    finding_id bigint NOT NULL,
    env_before varchar(120), b_qkey bigint, env_after varchar(120), a_qkey bigint
);
CREATE INDEX rp_history_run ON rp_history (team_id, run_id);
CREATE INDEX rp_history_finding ON rp_history (finding_id, run_id);
"""

# One row per finding: team 1 holds `rows`, team 2 a hundredth as many after them. Decision
# 2 % immediate, 10 % out-of-cycle, 58 % scheduled, 30 % defer; 10 % deployed nowhere
# (environment ''); level 0-8 when deployed; scores on a 0.01 grid, so keys tie on
# everything but the finding id often, as a real queue's do.
FILL = """
INSERT INTO rp_ranked
SELECT g, CASE WHEN g <= %(rows)s THEN 1 ELSE 2 END, 1, env,
       (((dec * 2 + (env = '')::int) * 16
         + 8 - CASE WHEN env = '' THEN 0 ELSE floor(u3 * 9)::int END)::bigint << 56)
       + (36028797018963968 - round(score * 10000)::bigint),
       score,
       (ARRAY['immediate', 'out-of-cycle', 'scheduled', 'defer'])[dec + 1],
       md5((g %% 3000)::text) || md5((g %% 3000 + 1)::text)
FROM (
    SELECT g, u3, round((u4 * 100)::numeric, 2)::float8 AS score,
           CASE WHEN u1 < 0.10 THEN '' WHEN u1 < 0.55 THEN 'prod' WHEN u1 < 0.80 THEN 'staging'
                WHEN u1 < 0.95 THEN 'dev' ELSE 'qa' END AS env,
           CASE WHEN u2 < 0.02 THEN 0 WHEN u2 < 0.12 THEN 1 WHEN u2 < 0.70 THEN 2
                ELSE 3 END::smallint AS dec
    FROM (SELECT g, random() u1, random() u2, random() u3, random() u4
          FROM generate_series(1, %(total)s) g) s
) t
"""

INDEXES = f"""
CREATE INDEX rp_ranked_team_key ON rp_ranked (team_id, {KEY_ASC});
CREATE INDEX rp_ranked_team_env_key ON rp_ranked (team_id, environment, {KEY_ASC});
"""

DENSE_FILL = f"""
INSERT INTO rp_dense
SELECT finding_id, team_id, run_id,
       row_number() OVER (PARTITION BY team_id ORDER BY {KEY_ASC}),
       row_number() OVER (PARTITION BY team_id, environment ORDER BY {KEY_ASC}),
       environment, score, decision, context_id
FROM rp_ranked
"""

DENSE_INDEXES = """
CREATE INDEX rp_dense_team_rank ON rp_dense (team_id, rank);
CREATE INDEX rp_dense_team_env ON rp_dense (team_id, environment, env_rank);
"""

# Every `spacing`-th position (1, 1 + spacing, …) of the team's queue and of each
# environment's queue becomes a checkpoint: its key, and how many rows of that queue have a
# smaller one. Plus the sentinel below all keys.
CHECKPOINTS_DELETE = "DELETE FROM rp_checkpoint WHERE team_id = %(team)s"
CHECKPOINTS_REBUILD = f"""
INSERT INTO rp_checkpoint
SELECT %(team)s, false, '', {KEY_ASC}, pos - 1 FROM (
    SELECT {KEY_ASC}, row_number() OVER (ORDER BY {KEY_ASC}) AS pos
    FROM rp_ranked WHERE team_id = %(team)s
) q WHERE pos %% %(spacing)s = 1
UNION ALL
SELECT %(team)s, true, environment, {KEY_ASC}, pos - 1 FROM (
    SELECT environment, {KEY_ASC},
           row_number() OVER (PARTITION BY environment ORDER BY {KEY_ASC}) AS pos
    FROM rp_ranked WHERE team_id = %(team)s
) q WHERE pos %% %(spacing)s = 1
UNION ALL
SELECT %(team)s, per_env, environment, %(s0)s, %(s1)s, 0
FROM (SELECT false AS per_env, '' AS environment
      UNION ALL SELECT DISTINCT true, environment FROM rp_ranked
      WHERE team_id = %(team)s) e
"""

# The rank (team queue) of given findings: the nearest checkpoint at or below the key, then
# the rows from its threshold up to the key, on the (team, key…) index.
RANK_CHECKPOINT = f"""
SELECT r.finding_id,
       cp.below + (SELECT count(*) FROM rp_ranked x
                   WHERE x.team_id = r.team_id AND {K_X} >= {K_CP} AND {K_X} < {K_R}) + 1
FROM rp_ranked r
CROSS JOIN LATERAL (
    SELECT c.* FROM rp_checkpoint c
    WHERE c.team_id = r.team_id AND NOT c.per_env AND c.environment = '' AND {K_C} <= {K_R}
    ORDER BY {KEY_DESC} LIMIT 1
) cp
WHERE r.finding_id = ANY(%(ids)s)
"""

ENV_RANK_CHECKPOINT = f"""
SELECT r.finding_id,
       cp.below + (SELECT count(*) FROM rp_ranked x
                   WHERE x.team_id = r.team_id AND x.environment = r.environment
                     AND {K_X} >= {K_CP} AND {K_X} < {K_R}) + 1
FROM rp_ranked r
CROSS JOIN LATERAL (
    SELECT c.* FROM rp_checkpoint c
    WHERE c.team_id = r.team_id AND c.per_env AND c.environment = r.environment
      AND {K_C} <= {K_R}
    ORDER BY {KEY_DESC} LIMIT 1
) cp
WHERE r.finding_id = ANY(%(ids)s)
"""

RANK_COUNT = f"""
SELECT r.finding_id,
       (SELECT count(*) FROM rp_ranked x WHERE x.team_id = r.team_id AND {K_X} < {K_R}) + 1
FROM rp_ranked r WHERE r.finding_id = ANY(%(ids)s)
"""

ENV_RANK_COUNT = f"""
SELECT r.finding_id,
       (SELECT count(*) FROM rp_ranked x WHERE x.team_id = r.team_id
          AND x.environment = r.environment AND {K_X} < {K_R}) + 1
FROM rp_ranked r WHERE r.finding_id = ANY(%(ids)s)
"""

RANK_DENSE = "SELECT finding_id, rank FROM rp_dense WHERE finding_id = ANY(%(ids)s)"
ENV_RANK_DENSE = "SELECT finding_id, env_rank FROM rp_dense WHERE finding_id = ANY(%(ids)s)"

COLUMNS = "finding_id, environment, score, decision, context_id"

FIRST_PAGE_KEY = f"""
SELECT {COLUMNS}, row_number() OVER (ORDER BY {KEY_ASC}) AS rank FROM (
    SELECT * FROM rp_ranked WHERE team_id = %(team)s ORDER BY {KEY_ASC} LIMIT {PAGE}
) p
"""
FIRST_PAGE_DENSE = f"""
SELECT {COLUMNS}, rank FROM rp_dense WHERE team_id = %(team)s ORDER BY rank LIMIT {PAGE}
"""
ENV_FIRST_PAGE_KEY = f"""
SELECT {COLUMNS}, row_number() OVER (ORDER BY {KEY_ASC}) AS env_rank FROM (
    SELECT * FROM rp_ranked WHERE team_id = %(team)s AND environment = %(env)s
    ORDER BY {KEY_ASC} LIMIT {PAGE}
) p
"""
ENV_FIRST_PAGE_DENSE = f"""
SELECT {COLUMNS}, env_rank FROM rp_dense WHERE team_id = %(team)s AND environment = %(env)s
ORDER BY env_rank LIMIT {PAGE}
"""
# Page at an offset: by OFFSET on the key index (reads every entry before it), or from the
# nearest checkpoint at or below the offset (reads fewer than `spacing` entries before it).
DEEP_OFFSET_KEY = f"""
SELECT {COLUMNS}, %(offset)s + row_number() OVER (ORDER BY {KEY_ASC}) AS rank FROM (
    SELECT * FROM rp_ranked WHERE team_id = %(team)s ORDER BY {KEY_ASC}
    OFFSET %(offset)s LIMIT {PAGE}
) p
"""
DEEP_CHECKPOINT_KEY = f"""
SELECT {COLUMNS}, %(offset)s + row_number() OVER (ORDER BY {KEY_ASC}) AS rank FROM (
    SELECT r.* FROM (
        SELECT c.* FROM rp_checkpoint c
        WHERE c.team_id = %(team)s AND NOT c.per_env AND c.environment = ''
          AND c.below <= %(offset)s
        ORDER BY c.below DESC LIMIT 1
    ) c
    CROSS JOIN LATERAL (
        SELECT r.* FROM rp_ranked r WHERE r.team_id = %(team)s AND {K_R} >= {K_C}
        ORDER BY {", ".join("r." + k for k in KEY)} OFFSET %(offset)s - c.below LIMIT {PAGE}
    ) r
) p
"""
# The next page after the previous page's last row (the cursor carries its key and rank).
KEYSET_KEY = f"""
SELECT {COLUMNS}, %(after_rank)s + row_number() OVER (ORDER BY {KEY_ASC}) AS rank FROM (
    SELECT * FROM rp_ranked r WHERE team_id = %(team)s
      AND {K_R} > (%(k0)s, %(k1)s)
    ORDER BY {KEY_ASC} LIMIT {PAGE}
) p
"""
DEEP_OFFSET_DENSE = f"""
SELECT {COLUMNS}, rank FROM rp_dense WHERE team_id = %(team)s ORDER BY rank
OFFSET %(offset)s LIMIT {PAGE}
"""
KEYSET_DENSE = f"""
SELECT {COLUMNS}, rank FROM rp_dense WHERE team_id = %(team)s AND rank > %(after_rank)s
ORDER BY rank LIMIT {PAGE}
"""

# Session tables of one incremental run's findings: their keys before (`rp_old`, the rows
# being changed or deleted) and after (`rp_new`, the upserted rows).
TEMP = """
CREATE TEMP TABLE rp_old (finding_id bigint, environment varchar(120), qkey bigint)
    ON COMMIT DELETE ROWS;
CREATE TEMP TABLE rp_new (LIKE rp_ranked) ON COMMIT DELETE ROWS;
"""

INCREMENTAL = [
    # keys before, of every finding the run changes or removes
    """INSERT INTO rp_old SELECT finding_id, environment, qkey
    FROM rp_ranked WHERE finding_id = ANY(%(touched)s)""",
    """INSERT INTO rp_new SELECT * FROM unnest(
        %(ids)s::bigint[], %(teams)s::int[], %(runs)s::int[], %(envs)s::varchar[],
        %(qkeys)s::bigint[], %(scores)s::float8[], %(decisions)s::varchar[], %(contexts)s::varchar[])""",
    """INSERT INTO rp_ranked SELECT * FROM rp_new ON CONFLICT (finding_id) DO UPDATE SET
        run_id = excluded.run_id, environment = excluded.environment, qkey = excluded.qkey,
        score = excluded.score, decision = excluded.decision,
        context_id = excluded.context_id""",
    "DELETE FROM rp_ranked WHERE finding_id = ANY(%(gone)s)",
    # history: the finding's own change only (entered: no key before; left: none after)
    """INSERT INTO rp_history (team_id, run_id, finding_id, env_before, b_qkey, env_after,
        a_qkey)
    SELECT %(team)s, %(run)s, coalesce(o.finding_id, n.finding_id),
           o.environment, o.qkey, n.environment, n.qkey
    FROM rp_old o FULL JOIN rp_new n ON n.finding_id = o.finding_id""",
    # each checkpoint's count: − old keys below its threshold + new keys below it, by one
    # running sum over the checkpoints and the changes in key order (at an equal key the
    # checkpoint comes first: `below` counts smaller keys only)
    f"""WITH delta AS (
        SELECT false AS per_env, ''::varchar AS environment, {KEY_ASC}, -1 AS d FROM rp_old
        UNION ALL SELECT true, environment, {KEY_ASC}, -1 FROM rp_old
        UNION ALL SELECT false, '', {KEY_ASC}, 1 FROM rp_new
        UNION ALL SELECT true, environment, {KEY_ASC}, 1 FROM rp_new
    ), merged AS (
        SELECT per_env, environment, {KEY_ASC}, 0 AS kind, 0 AS d FROM rp_checkpoint
        WHERE team_id = %(team)s
        UNION ALL SELECT per_env, environment, {KEY_ASC}, 1, d FROM delta
    ), run AS (
        SELECT *, sum(d) OVER (PARTITION BY per_env, environment
                               ORDER BY {KEY_ASC}, kind ROWS UNBOUNDED PRECEDING) AS s
        FROM merged
    )
    UPDATE rp_checkpoint c SET below = c.below + run.s FROM run
    WHERE run.kind = 0 AND run.s <> 0 AND c.team_id = %(team)s AND c.per_env = run.per_env
      AND c.environment = run.environment AND {K_C} = ({", ".join("run." + k for k in KEY)})""",
]

# Today's cost of a shift: every rank and environment rank that moved written again.
DENSE_REWRITE = f"""
UPDATE rp_dense d SET rank = n.rank, env_rank = n.env_rank FROM (
    SELECT finding_id,
           row_number() OVER (ORDER BY {KEY_ASC}) AS rank,
           row_number() OVER (PARTITION BY environment ORDER BY {KEY_ASC}) AS env_rank
    FROM rp_ranked WHERE team_id = %(team)s
) n
WHERE d.finding_id = n.finding_id AND (d.rank <> n.rank OR d.env_rank <> n.env_rank)
"""

# The ranks a past run left, rebuilt from history: a finding's key as of run T is the key
# before its first change after T, else its current key; findings that entered after T are
# left out, findings that left after T come back. Then one row_number() over the keys.
PAST_RANKS = f"""
WITH first_after AS (
    SELECT DISTINCT ON (finding_id) finding_id, env_before, b_qkey
    FROM rp_history WHERE team_id = %(team)s AND run_id > %(as_of)s
    ORDER BY finding_id, run_id, id
), as_of AS (
    SELECT r.finding_id, r.environment, r.qkey
    FROM rp_ranked r WHERE r.team_id = %(team)s
      AND NOT EXISTS (SELECT 1 FROM first_after f WHERE f.finding_id = r.finding_id)
    UNION ALL
    SELECT finding_id, env_before, b_qkey FROM first_after WHERE b_qkey IS NOT NULL
)
SELECT finding_id,
       row_number() OVER (ORDER BY {KEY_ASC}) AS rank,
       row_number() OVER (PARTITION BY environment ORDER BY {KEY_ASC}) AS env_rank
FROM as_of
"""

DEEP_BUCKETS = rb.DEEP_PAGE.format(columns=COLUMNS, page=PAGE)

TRUTH = f"""
SELECT finding_id,
       row_number() OVER (ORDER BY {KEY_ASC}) AS rank,
       row_number() OVER (PARTITION BY environment ORDER BY {KEY_ASC}) AS env_rank
FROM rp_ranked WHERE team_id = %(team)s
"""


def qkey(decision_order: int, undeployed: bool, level: int, score: float) -> int:
    """The engine's queue key before the finding id, as one ascending bigint: decision
    order (0 immediate … 3 defer, 2 bits), deployed nowhere (1 bit), 8 − SSVC level (4 bits),
    then −score in 0.0001 steps (56 bits; scores are rounded to 4 decimals)."""
    head = ((decision_order * 2 + int(undeployed)) * 16 + 8 - level) << 56
    return head + (2**55 - round(score * 10000))


def admin_url() -> str:
    return os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"


def db_url(name: str) -> str:
    return os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + name


def loadavg() -> float:
    with open("/proc/loadavg") as fh:
        return float(fh.read().split()[0])


def summary(times: list[float], load: float) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50": round(statistics.median(times), 2),
        "p95": round(times[min(len(times) - 1, int(len(times) * 0.95))], 2),
        "reps": len(times),
        "load": round(load, 2),
    }


def timed(fn: Callable[[int], Any], reps: int) -> dict[str, float]:
    """p50/p95 in milliseconds of `reps` calls fn(i), with the load average around them."""
    before = loadavg()
    times = []
    for i in range(reps):
        t0 = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t0) * 1000)
    return summary(times, (before + loadavg()) / 2)


def build(conn: psycopg.Connection, *, rows: int) -> float:
    t0 = time.perf_counter()
    conn.execute("SET maintenance_work_mem = '1GB'")
    conn.execute("SET synchronous_commit = off")
    conn.execute(SCHEMA)
    conn.execute(rb.SCHEMA)
    conn.execute("SELECT setseed(0.26)")
    conn.execute(FILL, {"rows": rows, "total": rows + max(rows // 100, 1)})
    conn.execute(INDEXES)
    conn.execute(DENSE_FILL)
    conn.execute(DENSE_INDEXES)
    conn.execute("SET synchronous_commit = on")
    conn.execute("VACUUM ANALYZE rp_ranked")
    conn.execute("VACUUM ANALYZE rp_dense")
    return time.perf_counter() - t0


def checkpoints_rebuild(conn: psycopg.Connection, *, spacing: int) -> None:
    with conn.transaction():
        for team in (TEAM, OTHER_TEAM):
            conn.execute(CHECKPOINTS_DELETE, {"team": team})
            conn.execute(
                CHECKPOINTS_REBUILD,
                {"team": team, "spacing": spacing, **{f"s{i}": v for i, v in enumerate(SENTINEL)}},
            )
    conn.execute("ANALYZE rp_checkpoint")


def verify_ranks(conn: psycopg.Connection, layout: str = "prefix") -> int:
    """Rows whose derived rank or environment rank (`layout` prefix: checkpoints; buckets:
    bucket and group counts) differs from the dense truth (0 = all equal); raises if the two
    sets of findings differ."""
    rank_sql, env_sql = {"prefix": (RANK_CHECKPOINT, ENV_RANK_CHECKPOINT),
                         "buckets": (rb.RANK, rb.ENV_RANK)}[layout]
    truth = {f: (r, e) for f, r, e in conn.execute(TRUTH, {"team": TEAM}).fetchall()}
    ids = list(truth)
    ranks = dict(conn.execute(rank_sql, {"ids": ids}).fetchall())
    env_ranks = dict(conn.execute(env_sql, {"ids": ids}).fetchall())
    if set(ranks) != set(truth) or set(env_ranks) != set(truth):
        raise AssertionError("derived ranks cover other findings than the queue")
    return sum(1 for f, (r, e) in truth.items() if ranks[f] != r or env_ranks[f] != e)


def verify_keys(conn: psycopg.Connection) -> int:
    """Rows whose packed key does not decode to their own decision, deployment and score
    (0 = the SQL packing agrees with `qkey()`)."""
    orders = {"immediate": 0, "out-of-cycle": 1, "scheduled": 2, "defer": 3}
    bad = 0
    for qk, decision, environment, score in conn.execute(
        "SELECT qkey, decision, environment, score FROM rp_ranked"
    ):
        head = qk >> 56
        order, undeployed, level = head >> 5, bool(head >> 4 & 1), 8 - (head & 15)
        if not 0 <= level <= 8 or qk != qkey(order, undeployed, level, score) or (
            order != orders[decision] or undeployed != (environment == "")
        ):
            bad += 1
    return bad


class Change:
    """One incremental run's change: 500 findings (one version's, say) rise to the top
    decisions with new keys (a few re-enter after an earlier run removed them, some move to
    another environment), and 50 others leave. `narrow`: the 500 all enter one narrow key
    range (scheduled, level 4, in prod, 11 scores 0.01 apart: the middle of the queue, where
    the other runs' findings do not enter), so that the bucket holding it in the team queue
    and in prod's overflows and is split."""

    def __init__(self, rng: random.Random, *, rows: int, run: int, changed: int = 500,
                 gone: int = 50, narrow: bool = False) -> None:
        picked = rng.sample(range(1, rows + 1), changed + gone)
        self.ids, self.gone = picked[:changed], picked[changed:]
        n = len(self.ids)
        envs = [rng.choice(ENVIRONMENTS[1:]) for _ in range(n)]
        decs = [rng.choice((0, 1)) for _ in range(n)]
        lvls = [rng.randint(5, 8) for _ in range(n)]
        scores = [round(rng.uniform(60, 100), 2) for _ in range(n)]
        if narrow:
            center = round(rng.uniform(50, 95), 2)
            envs, decs, lvls = ["prod"] * n, [2] * n, [4] * n
            scores = [round(center + 0.01 * (j % 11), 2) for j in range(n)]
        self.added = 0
        self.params = {
            "team": TEAM, "run": run, "touched": self.ids + self.gone, "gone": self.gone,
            "ids": self.ids, "teams": [TEAM] * n, "runs": [run] * n, "envs": envs,
            "qkeys": [qkey(d, False, lv, s) for d, lv, s in zip(decs, lvls, scores, strict=True)],
            "scores": scores,
            "decisions": [("immediate", "out-of-cycle", "scheduled")[d] for d in decs],
            "contexts": ["c" * 64] * n,
        }

    def apply(self, conn: psycopg.Connection, *, spacing: int, group: int,
              split_over: float) -> dict[str, float]:
        """Writes the run, keeping both layouts (prefix checkpoints and buckets) in one
        transaction; returns each part's milliseconds: `rows` (old keys, upsert, delete,
        history), `prefix`, `buckets`, `split`, `commit`. `added`: buckets a split made."""
        ms: dict[str, float] = {}
        t0 = time.perf_counter()

        def lap(label: str) -> None:
            nonlocal t0
            t1 = time.perf_counter()
            ms[label] = (t1 - t0) * 1000
            t0 = t1

        with conn.transaction():
            for statement in INCREMENTAL[:-1]:
                conn.execute(statement, self.params)
            lap("rows")
            conn.execute(INCREMENTAL[-1], self.params)
            lap("prefix")
            full = rb.adjust(conn, self.params, spacing=spacing, split_over=split_over)
            lap("buckets")
            self.added = rb.split(conn, TEAM, full, spacing=spacing, group=group)
            lap("split")
        lap("commit")
        return ms


def sizes(conn: psycopg.Connection, rows: int) -> dict[str, float]:
    """MB per million rows of each table and index."""
    out = {}
    for rel in ("rp_ranked", "rp_ranked_pkey", "rp_ranked_team_key", "rp_ranked_team_env_key",
                "rp_dense", "rp_dense_pkey", "rp_dense_team_rank", "rp_dense_team_env",
                "rp_checkpoint", "rp_checkpoint_pkey", "rp_checkpoint_below",
                "rp_bucket", "rp_bucket_pkey", "rp_bucket_group", "rp_group"):
        size = conn.execute("SELECT pg_relation_size(%s)", [rel]).fetchone()[0]
        out[rel] = round(size / 2**20 / (rows / 1e6), 2)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--spacing", type=int, default=1024)
    parser.add_argument("--group", type=int, default=64, help="buckets per group")
    parser.add_argument("--split-over", type=float, default=1.25,
                        help="a bucket past this many times spacing rows is split")
    parser.add_argument("--split-reps", type=int, default=5,
                        help="incremental runs whose findings enter one narrow key range")
    parser.add_argument("--reps", type=int, default=200, help="repetitions of the fast reads")
    parser.add_argument("--slow-reps", type=int, default=5,
                        help="repetitions of plain counts, rebuilds and past ranks")
    parser.add_argument("--incremental-reps", type=int, default=20)
    parser.add_argument("--rewrite-reps", type=int, default=2,
                        help="dense rank rewrites measured (0 skips them)")
    parser.add_argument("--work-mem", default="256MB")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--verify", action="store_true")
    args = parser.parse_args(argv)
    name = f"rankpos_bench_{args.rows}"
    rng = random.Random(26)
    out: dict[str, Any] = {"rows": args.rows, "spacing": args.spacing}

    with psycopg.connect(admin_url(), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not args.reuse:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        if not exists or not args.reuse:
            admin.execute(f'CREATE DATABASE "{name}"')
            exists = None
    try:
        with psycopg.connect(db_url(name), autocommit=True) as conn:
            conn.execute("SET jit = off")
            conn.execute(f"SET work_mem = '{args.work_mem}'")
            if not exists:
                out["build_seconds"] = round(build(conn, rows=args.rows), 1)
                # before any run's updates leave dead rows in them
                out["sizes_built_mb_per_million"] = sizes(conn, args.rows)
            run = (conn.execute("SELECT coalesce(max(run_id), 1) FROM rp_history").fetchone()[0])
            conn.execute(TEMP)
            conn.execute(rb.SCHEMA)
            layout = {"spacing": args.spacing, "group": args.group,
                      "split_over": args.split_over}
            print(f"built; load {loadavg()}", file=sys.stderr, flush=True)

            out["checkpoint_rebuild_ms"] = timed(
                lambda i: checkpoints_rebuild(conn, spacing=args.spacing), args.slow_reps
            )
            out["checkpoints"] = conn.execute("SELECT count(*) FROM rp_checkpoint").fetchone()[0]
            out["bucket_rebuild_ms"] = timed(
                lambda i: rb.rebuild(conn, teams=(TEAM, OTHER_TEAM), spacing=args.spacing,
                                     group=args.group), args.slow_reps
            )
            out["buckets"] = conn.execute("SELECT count(*) FROM rp_bucket").fetchone()[0]
            out["groups"] = conn.execute("SELECT count(*) FROM rp_group").fetchone()[0]
            # as autovacuum would after a full run: the rebuilds above left dead rows
            conn.execute("VACUUM ANALYZE rp_checkpoint, rp_bucket, rp_group")
            if args.verify:
                out["verify_key_mismatches"] = verify_keys(conn)
                out["verify_mismatches_before"] = verify_ranks(conn)
                out["verify_bucket_mismatches_before"] = verify_ranks(conn, "buckets")
                snapshot = conn.execute(TRUTH, {"team": TEAM}).fetchall()
                snapshot_run = run

            def q(sql: str, **params: Any) -> Callable[[int], Any]:
                return lambda i: conn.execute(sql, {"team": TEAM, **params}).fetchall()

            deep = min(500_000, args.rows // 2)
            out["deep_offset"] = deep
            env = "prod"
            reads = {
                "first_page_ms": q(FIRST_PAGE_KEY),
                "first_page_dense_ms": q(FIRST_PAGE_DENSE),
                "env_first_page_ms": q(ENV_FIRST_PAGE_KEY, env=env),
                "env_first_page_dense_ms": q(ENV_FIRST_PAGE_DENSE, env=env),
                "deep_page_checkpoint_ms": q(DEEP_CHECKPOINT_KEY, offset=deep),
                "deep_page_buckets_ms": q(DEEP_BUCKETS, offset=deep),
                "deep_page_dense_rank_range_ms": q(KEYSET_DENSE, after_rank=deep),
            }
            after = conn.execute(
                f"SELECT {KEY_ASC} FROM rp_ranked WHERE team_id = %s ORDER BY {KEY_ASC} "
                "OFFSET %s LIMIT 1", [TEAM, deep - 1]
            ).fetchone()
            reads["deep_page_keyset_ms"] = q(
                KEYSET_KEY, after_rank=deep, **{f"k{i}": v for i, v in enumerate(after)}
            )
            for label, fn in reads.items():
                out[label] = timed(fn, args.reps)
            out["deep_page_offset_ms"] = timed(q(DEEP_OFFSET_KEY, offset=deep), args.slow_reps)
            out["deep_page_dense_offset_ms"] = timed(
                q(DEEP_OFFSET_DENSE, offset=deep), args.slow_reps
            )
            # Deep pages must agree: same findings, same ranks.
            pages = [conn.execute(sql, {"team": TEAM, "offset": deep, "after_rank": deep,
                                        **{f"k{i}": v for i, v in enumerate(after)}}).fetchall()
                     for sql in (DEEP_CHECKPOINT_KEY, DEEP_OFFSET_KEY, KEYSET_KEY, DEEP_BUCKETS)]
            if any(page != pages[0] for page in pages) or len(pages[0]) != PAGE:
                raise AssertionError("deep pages by checkpoint, offset, keyset, buckets differ")

            ids_sets = [rng.sample(range(1, args.rows + 1), PAGE) for _ in range(args.reps)]
            for label, sql, reps in (
                ("ranks_of_50_checkpoint_ms", RANK_CHECKPOINT, args.reps),
                ("env_ranks_of_50_checkpoint_ms", ENV_RANK_CHECKPOINT, args.reps),
                ("ranks_of_50_buckets_ms", rb.RANK, args.reps),
                ("env_ranks_of_50_buckets_ms", rb.ENV_RANK, args.reps),
                ("ranks_of_50_dense_ms", RANK_DENSE, args.reps),
                ("env_ranks_of_50_dense_ms", ENV_RANK_DENSE, args.reps),
                ("ranks_of_50_count_ms", RANK_COUNT, args.slow_reps),
                ("env_ranks_of_50_count_ms", ENV_RANK_COUNT, args.slow_reps),
            ):
                out[label] = timed(
                    lambda i, sql=sql: conn.execute(sql, {"ids": ids_sets[i]}).fetchall(), reps
                )
            ids = ids_sets[0]
            by = [dict(conn.execute(s, {"ids": ids}).fetchall())
                  for s in (RANK_CHECKPOINT, RANK_COUNT, RANK_DENSE, rb.RANK)]
            if any(b != by[0] for b in by):
                raise AssertionError("ranks by checkpoint, count, dense column, buckets differ")

            # Each run keeps both layouts in one transaction, each part timed: the prefix
            # layout's write is rows + prefix + commit, the bucket layout's rows + buckets +
            # split + commit. Then runs whose 500 findings enter one narrow key range.
            for label, reps, narrow in (("", args.incremental_reps, False),
                                        ("_split", args.split_reps, True)):
                load0, parts, added = loadavg(), [], []
                for _ in range(reps):
                    run += 1
                    change = Change(rng, rows=args.rows, run=run, narrow=narrow)
                    parts.append(change.apply(conn, **layout))
                    added.append(change.added)
                load = (load0 + loadavg()) / 2
                if not reps:
                    continue
                out[f"incremental_write{label}_ms"] = summary(
                    [p["rows"] + p["prefix"] + p["commit"] for p in parts], load)
                out[f"incremental_write{label}_buckets_ms"] = summary(
                    [p["rows"] + p["buckets"] + p["split"] + p["commit"] for p in parts], load)
                for part in ("rows", "prefix", "buckets", "split"):
                    out[f"incremental{label}_{part}_ms"] = summary([p[part] for p in parts], load)
                out[f"incremental{label}_buckets_added"] = added
            out["buckets_after"] = conn.execute("SELECT count(*) FROM rp_bucket").fetchone()[0]
            out["groups_after"] = conn.execute("SELECT count(*) FROM rp_group").fetchone()[0]
            if args.verify:
                out["verify_mismatches_after"] = verify_ranks(conn)
                out["verify_bucket_mismatches_after"] = verify_ranks(conn, "buckets")
                past = conn.execute(PAST_RANKS, {"team": TEAM, "as_of": snapshot_run}).fetchall()
                out["verify_past_mismatches"] = len(set(snapshot) ^ set(past))
            out["history_rows"] = conn.execute("SELECT count(*) FROM rp_history").fetchone()[0]
            out["past_ranks_all_ms"] = timed(
                lambda i: conn.execute(
                    f"SELECT count(*), sum(rank), sum(env_rank) FROM ({PAST_RANKS}) p",
                    {"team": TEAM, "as_of": 1},
                ).fetchone(),
                args.slow_reps,
            )
            # The current queue's ranks of every row, in one pass (what an export of the
            # latest ranking reads instead of the stored column).
            out["current_ranks_all_ms"] = timed(
                lambda i: conn.execute(
                    f"SELECT count(*), sum(rank), sum(env_rank) FROM ({TRUTH}) p", {"team": TEAM}
                ).fetchone(),
                args.slow_reps,
            )

            if args.rewrite_reps:
                # The first rewrite also catches up with the runs above: each rewrites the
                # ranks that moved since the previous one (rows_rewritten).
                rewritten = []

                def rewrite(i: int) -> None:
                    cur = conn.execute(DENSE_REWRITE, {"team": TEAM})
                    rewritten.append(cur.rowcount)

                def rewrite_after_change(i: int) -> None:
                    Change(rng, rows=args.rows, run=run + 1000 + i).apply(conn, **layout)
                    t0 = time.perf_counter()
                    rewrite(i)
                    rewrite_ms.append((time.perf_counter() - t0) * 1000)

                rewrite_ms: list[float] = []
                total = timed(rewrite_after_change, args.rewrite_reps)
                out["dense_rewrite_ms"] = {
                    "p50": round(statistics.median(rewrite_ms), 1), "max": round(max(rewrite_ms), 1),
                    "reps": args.rewrite_reps, "load": total["load"],
                    "rows_rewritten": rewritten,
                }
            out["sizes_mb_per_million"] = sizes(conn, args.rows)
            out["load_end"] = loadavg()
    finally:
        if not (args.keep or args.reuse):
            with psycopg.connect(admin_url(), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
