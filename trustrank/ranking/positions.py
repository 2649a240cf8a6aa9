"""Ranks from the queue key and bucket counts: a finding's rank in its team's queue (and in
its environment's) counted from a few stored counts, so that a run which changes a few
findings writes a few rows, not the dense rank of every finding below the one that rose.

Each ranked row holds its queue key (`qkey`, ascending in queue order; the finding id
breaks ties, `trustrank.risk.queue_key`). Each queue (the team's: `per_env` false; each
environment's: `per_env` true) is cut into buckets at key thresholds, every `SPACING`
places at a rebuild; the first bucket starts at the sentinel below every key. A bucket
holds `n`, the rows of its queue from its threshold up to the next bucket's. Buckets
belong to groups (`g`, ascending with the key; `GROUP` buckets each at a rebuild, numbered
`GAP` apart so that a split fits new ones between), and a group row holds the sum of its
buckets' `n`. So:

    rank = the counts of the groups before the finding's group
         + the counts of the buckets before its bucket in that group
         + the rows from its bucket's threshold up to its key (an index-only count) + 1

A run that rewrites the queue rebuilds its buckets (`rebuild`). A run that writes some
rows adds their −1 (old key) and +1 (new key) to their buckets and groups (`adjust`): the
deltas summed per bucket and per group, one row written per changed bucket and group. A
bucket grown past `SPLIT_OVER` × `SPACING` rows is split in the same run (`split`); a group
left with more than 2 × `GROUP` buckets is cut into groups of `GROUP`.

The SQL names its tables through `Tables` so that bench/rank_positions.py measures this
very SQL on tables of its own. docs/ranking.md has the measurements behind the layout.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GAP = 2**32
MIN_KEY = -(2**63)
MAX_KEY = 2**63 - 1
SPACING = 256
GROUP = 64
SPLIT_OVER = 1.25
# The SQL functions' name prefix in the product's database (`function_sql`).
FUNCTION = "ranking_rank"


@dataclass(frozen=True)
class Tables:
    """The tables the SQL reads and writes: the ranked rows (`team_id`, `environment`,
    `qkey`, `finding_id`), the buckets and the groups; `old` and `new` hold a run's
    changed rows before and after (`finding_id`, `qkey`, `environment`)."""

    ranked: str = "ranking_rankedfinding"
    bucket: str = "ranking_rankbucket"
    group: str = "ranking_rankbucketgroup"
    old: str = "ranking_keys_old"
    new: str = "ranking_keys_new"


PRODUCT = Tables()


def schema(t: Tables) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS {t.bucket} (
    team_id bigint NOT NULL, per_env bool NOT NULL, environment varchar(120) NOT NULL,
    qkey bigint NOT NULL, finding_id bigint NOT NULL, g bigint NOT NULL, n bigint NOT NULL,
    PRIMARY KEY (team_id, per_env, environment, qkey, finding_id)
) WITH (fillfactor = 80);
CREATE INDEX IF NOT EXISTS {t.bucket}_group
    ON {t.bucket} (team_id, per_env, environment, g, qkey, finding_id);
CREATE TABLE IF NOT EXISTS {t.group} (
    team_id bigint NOT NULL, per_env bool NOT NULL, environment varchar(120) NOT NULL,
    g bigint NOT NULL, n bigint NOT NULL, PRIMARY KEY (team_id, per_env, environment, g)
) WITH (fillfactor = 80);
"""


def _queue(alias: str, per_env: bool, env: str) -> str:
    return (f"{alias}.team_id = r.team_id AND {'' if per_env else 'NOT '}{alias}.per_env"
            f" AND {alias}.environment = {env}")


def page_sql(t: Tables, *, columns: str, page: int | str) -> str:
    """`page` rows of the team's queue from place `%(offset)s` with their ranks: the group
    holding that place (a running sum over the groups), then its bucket (a running sum over
    the group's buckets), then fewer than a bucket's rows walked in key order."""
    return f"""
WITH grp AS (
    SELECT g, n, sum(n) OVER (ORDER BY g) - n AS start FROM {t.group}
    WHERE team_id = %(team)s AND NOT per_env AND environment = ''
), gp AS (
    SELECT g, start FROM grp WHERE start <= %(offset)s AND start + n > %(offset)s
), bk AS (
    SELECT c.qkey, c.finding_id, c.n,
           gp.start + sum(c.n) OVER (ORDER BY c.qkey, c.finding_id) - c.n AS start
    FROM gp JOIN {t.bucket} c ON c.team_id = %(team)s AND NOT c.per_env
      AND c.environment = '' AND c.g = gp.g
), b AS (
    SELECT * FROM bk WHERE start <= %(offset)s AND start + n > %(offset)s
)
SELECT {columns}, %(offset)s + row_number() OVER (ORDER BY qkey, finding_id) AS rank FROM (
    SELECT r.* FROM b CROSS JOIN LATERAL (
        SELECT r.* FROM {t.ranked} r WHERE r.team_id = %(team)s
          AND (r.qkey, r.finding_id) >= (b.qkey, b.finding_id)
        ORDER BY r.qkey, r.finding_id OFFSET %(offset)s - b.start LIMIT {page}
    ) r
) p
"""


# With `teams`, the SQL names the ranked rows' teams as a constant (`%(teams)s`) beside the
# row's own team: the ranked rows are partitioned by team (migration ranking.0013), and a
# team only a correlated column names leaves PostgreSQL planning every team's partition,
# ~0.35 ms each (20 large teams: a page's rank count went from 5 to 13 ms).
_TEAMS = " AND {a}.team_id = ANY(%(teams)s::bigint[])"


def _walk(t: Tables, team: str, same_env: str, bq: str, bf: str, q: str, f: str,
          teams: bool = False) -> str:
    """The ranked rows from a bucket's threshold (`bq`, `bf`) up to a key (`q`, `f`),
    counted as plain ranges of the key index: the rest of the threshold's `qkey`, the keys
    strictly between, and the start of the key's own `qkey`. A queue holds few distinct
    keys (some hundreds for a million findings), and PostgreSQL reads a range bounded by a
    row comparison and by `qkey` from the first row of the threshold's `qkey` to the last
    of the key's (thousands of rows for a few dozen counted: 27 ms for 50 rows' two ranks,
    against 7 ms so; docs/ranking.md)."""
    def count(where: str) -> str:
        return (f"(SELECT count(*) FROM {t.ranked} x WHERE x.team_id = {team}"
                f"{_TEAMS.format(a='x') if teams else ''} {same_env} AND {where})")
    same = count(f"x.qkey = {q} AND x.finding_id >= {bf} AND x.finding_id < {f}")
    rest = count(f"x.qkey = {bq} AND x.finding_id >= {bf}")
    between = count(f"x.qkey > {bq} AND x.qkey < {q}")
    start = count(f"x.qkey = {q} AND x.finding_id < {f}")
    return f"CASE WHEN {bq} = {q} THEN {same} ELSE {rest} + {between} + {start} END"


def rank_sql(t: Tables, *, per_env: bool, teams: bool = False) -> str:
    """(finding id, rank) of the ranked rows whose ids are `%(ids)s` (with `teams`, of the
    teams `%(teams)s`, which must hold every one of theirs): in the team's queue,
    or with `per_env` in their environment's. The counts of the groups before each row's
    group are one running sum over the groups of the rows' queues, made once for the
    statement; each row then sums the buckets before its own in its group and walks its
    bucket (`_walk`). Each step is materialized: PostgreSQL, guessing one row for the
    groups' sum, looked up the buckets of every row once per group (4 s for 50 rows)."""
    env = "r.environment" if per_env else "''::varchar"
    same_env = "AND x.environment = r.environment" if per_env else ""
    return f"""
WITH r AS MATERIALIZED (
    SELECT r.finding_id, r.team_id, {env} AS environment, r.qkey FROM {t.ranked} r
    WHERE r.finding_id = ANY(%(ids)s::bigint[]){_TEAMS.format(a="r") if teams else ""}
), b AS MATERIALIZED (
    SELECT r.*, b.qkey AS b_qkey, b.finding_id AS b_finding, b.g FROM r CROSS JOIN LATERAL (
        SELECT c.qkey, c.finding_id, c.g FROM {t.bucket} c
        WHERE {_queue("c", per_env, "r.environment")}
          AND (c.qkey, c.finding_id) <= (r.qkey, r.finding_id)
        ORDER BY c.qkey DESC, c.finding_id DESC LIMIT 1
    ) b
), gs AS MATERIALIZED (
    SELECT gr.team_id, gr.environment, gr.g,
           sum(gr.n) OVER (PARTITION BY gr.team_id, gr.environment ORDER BY gr.g) - gr.n
               AS start
    FROM (SELECT DISTINCT team_id, environment FROM r) q
    JOIN {t.group} gr ON gr.team_id = q.team_id AND gr.per_env = {per_env}
      AND gr.environment = q.environment
)
SELECT r.finding_id,
       gs.start
     + (SELECT coalesce(sum(c.n), 0) FROM {t.bucket} c
        WHERE {_queue("c", per_env, "r.environment")} AND c.g = r.g
          AND (c.qkey, c.finding_id) < (r.b_qkey, r.b_finding))
     + {_walk(t, "r.team_id", same_env, "r.b_qkey", "r.b_finding", "r.qkey", "r.finding_id",
              teams)}
     + 1
FROM b r JOIN gs ON gs.team_id = r.team_id AND gs.environment = r.environment AND gs.g = r.g
"""


def function_sql(t: Tables, *, name: str) -> str:
    """Two SQL functions that count one ranked row's rank from the buckets:
    `{name}_team(team, qkey, finding)` in its team's queue and
    `{name}_env(team, environment, qkey, finding)` in its environment's. NULL when the
    queue has no bucket (a queue stored before the keys). Only raw SQL that must count per
    row calls them (a finding group's best rank): pages count their rows as a set
    (`ranks_sql`), a reader that streams a whole queue in key order counts as it goes. The
    count inside the bucket is `_walk`'s (migration ranking.0010: the row comparisons
    before it took 0.6 ms a row for both ranks at a million findings).

    A function's statements are planned for any arguments, and for the count inside a
    bucket that plan guesses a ninth of the table: at ten million rows PostgreSQL chose a
    sequential scan (1.3 s a call) over the key index's range of at most a bucket, so the
    functions allow index scans only; and with that guess's cost PostgreSQL compiled each
    call (JIT, 4–20 ms), so they run without."""
    out = []
    for suffix, per_env, env, same_env, args in (
        ("team", "false", "''", "", ""),
        ("env", "true", "p_env", "AND x.environment = p_env", " p_env varchar,"),
    ):
        def queue(a: str, per_env: str = per_env, env: str = env) -> str:
            return f"{a}.team_id = p_team AND {a}.per_env = {per_env} AND {a}.environment = {env}"
        out.append(f"""
CREATE OR REPLACE FUNCTION {name}_{suffix}(p_team bigint,{args} p_qkey bigint, p_finding bigint)
RETURNS bigint LANGUAGE sql STABLE PARALLEL SAFE
SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $f$
WITH b AS (
    SELECT c.qkey, c.finding_id, c.g FROM {t.bucket} c
    WHERE {queue("c")} AND (c.qkey, c.finding_id) <= (p_qkey, p_finding)
    ORDER BY c.qkey DESC, c.finding_id DESC LIMIT 1
)
SELECT (SELECT coalesce(sum(gr.n), 0) FROM {t.group} gr WHERE {queue("gr")} AND gr.g < b.g)
     + (SELECT coalesce(sum(c.n), 0) FROM {t.bucket} c WHERE {queue("c")} AND c.g = b.g
          AND (c.qkey, c.finding_id) < (b.qkey, b.finding_id))
     + {_walk(t, "p_team", same_env, "b.qkey", "b.finding_id", "p_qkey", "p_finding")}
     + 1
FROM b
$f$;""")
    return "\n".join(out)


def delete_statements(t: Tables) -> list[str]:
    return [f"DELETE FROM {t.bucket} WHERE team_id = %(team)s",
            f"DELETE FROM {t.group} WHERE team_id = %(team)s"]


def _rebuild(t: Tables) -> str:
    """Every `spacing`-th place of each queue starts a bucket (the first at the sentinel),
    holding the rows up to the next; `group` consecutive buckets make a group."""
    return f"""
WITH q AS (
    SELECT false AS per_env, ''::varchar AS environment, qkey, finding_id,
           row_number() OVER (ORDER BY qkey, finding_id) AS pos, count(*) OVER () AS total
    FROM {t.ranked} WHERE team_id = %(team)s
    UNION ALL
    SELECT true, environment, qkey, finding_id,
           row_number() OVER (PARTITION BY environment ORDER BY qkey, finding_id),
           count(*) OVER (PARTITION BY environment)
    FROM {t.ranked} WHERE team_id = %(team)s
), ins AS (
    INSERT INTO {t.bucket}
    SELECT %(team)s, per_env, environment,
           CASE WHEN pos = 1 THEN %(min)s ELSE qkey END,
           CASE WHEN pos = 1 THEN %(min)s ELSE finding_id END,
           (pos - 1) / %(spacing)s / %(group)s * %(gap)s, least(%(spacing)s, total - pos + 1)
    FROM q WHERE (pos - 1) %% %(spacing)s = 0
    RETURNING per_env, environment, g, n
)
INSERT INTO {t.group} SELECT %(team)s, per_env, environment, g, sum(n) FROM ins
GROUP BY per_env, environment, g
"""


def _ensure(t: Tables) -> list[str]:
    """A queue that has no bucket yet (the team's or an environment's first finding)
    gets the sentinel's bucket and group."""
    return [
        f"""INSERT INTO {t.bucket}
        SELECT DISTINCT %(team)s, q.per_env, q.environment, %(min)s, %(min)s, 0, 0
        FROM (SELECT true AS per_env, environment FROM {t.new}
              UNION ALL SELECT false, '' FROM {t.new}) q ON CONFLICT DO NOTHING""",
        f"""INSERT INTO {t.group} SELECT DISTINCT %(team)s, q.per_env, q.environment, 0, 0
        FROM (SELECT true AS per_env, environment FROM {t.new}
              UNION ALL SELECT false, '' FROM {t.new}) q ON CONFLICT DO NOTHING""",
    ]


def _adjust(t: Tables) -> str:
    """The run's −1 (old keys) and +1 (new keys) located in their buckets, summed per
    bucket and per group, each bucket and group written once. Returns the buckets now too
    full."""
    return f"""
WITH delta AS (
    SELECT false AS per_env, ''::varchar AS environment, qkey, finding_id, -1 AS d
    FROM {t.old}
    UNION ALL SELECT true, environment, qkey, finding_id, -1 FROM {t.old}
    UNION ALL SELECT false, '', qkey, finding_id, 1 FROM {t.new}
    UNION ALL SELECT true, environment, qkey, finding_id, 1 FROM {t.new}
), per_bucket AS (
    SELECT d.per_env, d.environment, b.qkey, b.finding_id, b.g, sum(d.d) AS s
    FROM delta d CROSS JOIN LATERAL (
        SELECT c.qkey, c.finding_id, c.g FROM {t.bucket} c
        WHERE c.team_id = %(team)s AND c.per_env = d.per_env AND c.environment = d.environment
          AND (c.qkey, c.finding_id) <= (d.qkey, d.finding_id)
        ORDER BY c.qkey DESC, c.finding_id DESC LIMIT 1
    ) b
    GROUP BY d.per_env, d.environment, b.qkey, b.finding_id, b.g HAVING sum(d.d) <> 0
), groups AS (
    UPDATE {t.group} gr SET n = gr.n + s.s FROM (
        SELECT per_env, environment, g, sum(s) AS s FROM per_bucket
        GROUP BY per_env, environment, g
    ) s
    WHERE gr.team_id = %(team)s AND gr.per_env = s.per_env AND gr.environment = s.environment
      AND gr.g = s.g AND s.s <> 0
), buckets AS (
    UPDATE {t.bucket} c SET n = c.n + p.s FROM per_bucket p
    WHERE c.team_id = %(team)s AND c.per_env = p.per_env AND c.environment = p.environment
      AND c.qkey = p.qkey AND c.finding_id = p.finding_id
    RETURNING c.per_env, c.environment, c.qkey, c.finding_id, c.g, c.n
)
SELECT per_env, environment, qkey, finding_id, g FROM buckets WHERE n > %(limit)s
"""


def _split_sql(t: Tables, per_env: bool) -> str:
    """New thresholds every `spacing` rows of one bucket; its own count keeps the first
    part."""
    same_env = "AND x.environment = %(env)s" if per_env else ""
    return f"""
WITH rows AS (
    SELECT qkey, finding_id, row_number() OVER (ORDER BY qkey, finding_id) AS pos,
           count(*) OVER () AS total
    FROM {t.ranked} x WHERE x.team_id = %(team)s {same_env}
      AND (x.qkey, x.finding_id) >= (%(q)s, %(f)s) AND (x.qkey, x.finding_id) < (%(nq)s, %(nf)s)
), ins AS (
    INSERT INTO {t.bucket}
    SELECT %(team)s, %(per_env)s, %(env)s, qkey, finding_id, %(g)s,
           least(%(spacing)s, total - pos + 1)
    FROM rows WHERE pos > 1 AND (pos - 1) %% %(spacing)s = 0
    RETURNING n
)
UPDATE {t.bucket} SET n = n - (SELECT coalesce(sum(n), 0) FROM ins)
WHERE team_id = %(team)s AND per_env = %(per_env)s AND environment = %(env)s
  AND qkey = %(q)s AND finding_id = %(f)s
RETURNING (SELECT count(*) FROM ins)
"""


def _sizes(spacing: int | None, group: int | None) -> tuple[int, int]:
    """The bucket spacing and group size asked, else the module's (read when called)."""
    return spacing or SPACING, group or GROUP


def rebuild(cur: Any, *, team_id: int, t: Tables = PRODUCT, spacing: int | None = None,
            group: int | None = None) -> None:
    """The team's buckets and groups made anew from its ranked rows (inside the caller's
    transaction: readers see the old counts or the new, never half)."""
    spacing, group = _sizes(spacing, group)
    for statement in delete_statements(t):
        cur.execute(statement, {"team": team_id})
    cur.execute(_rebuild(t), {"team": team_id, "spacing": spacing, "group": group,
                              "gap": GAP, "min": MIN_KEY})


def keys_table(cur: Any, name: str) -> None:
    """An empty temporary table for a run's old or new keys, dropped at commit."""
    cur.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {name} (finding_id bigint, "
                f"qkey bigint, environment varchar(120)) ON COMMIT DROP")
    cur.execute(f"TRUNCATE {name}")


def adjust(cur: Any, *, team_id: int, t: Tables = PRODUCT, spacing: int | None = None,
           group: int | None = None, split_over: float = SPLIT_OVER) -> int:
    """The counts after a run that wrote some rows, inside its transaction, once `t.old`
    holds the keys of the rows it deleted or replaced and `t.new` those of the rows it
    wrote. Splits the buckets that grew too full; returns the number of buckets added."""
    full = adjust_counts(cur, team_id=team_id, t=t, spacing=spacing, split_over=split_over)
    return split(cur, team_id, full, t=t, spacing=spacing, group=group)


def adjust_counts(cur: Any, *, team_id: int, t: Tables = PRODUCT, spacing: int | None = None,
                  split_over: float = SPLIT_OVER) -> list[tuple[Any, ...]]:
    """`adjust` without the splits: returns the buckets grown past `split_over` ×
    `spacing` (per_env, environment, qkey, finding id, g)."""
    spacing, _group = _sizes(spacing, None)
    for statement in _ensure(t):
        cur.execute(statement, {"team": team_id, "min": MIN_KEY})
    cur.execute(_adjust(t), {"team": team_id, "limit": int(split_over * spacing)})
    return list(cur.fetchall())


def split(cur: Any, team_id: int, full: Iterable[tuple[Any, ...]], *, t: Tables = PRODUCT,
          spacing: int | None = None, group: int | None = None) -> int:
    """Splits each too-full bucket of `full` (per_env, environment, qkey, finding id, g),
    then any group left with more than 2 × `group` buckets. Returns the buckets added."""
    spacing, group = _sizes(spacing, group)
    added = 0
    for per_env, env, q, f, _g in full:
        queue = {"team": team_id, "per_env": per_env, "env": env}
        # Read again: an earlier split in this run may have moved it to a new group.
        cur.execute(f"SELECT g FROM {t.bucket} WHERE team_id = %(team)s AND per_env = "
                    "%(per_env)s AND environment = %(env)s AND qkey = %(q)s AND "
                    "finding_id = %(f)s", {**queue, "q": q, "f": f})
        g = cur.fetchone()[0]
        cur.execute(f"SELECT qkey, finding_id FROM {t.bucket} WHERE team_id = %(team)s "
                    "AND per_env = %(per_env)s AND environment = %(env)s AND "
                    "(qkey, finding_id) > (%(q)s, %(f)s) ORDER BY qkey, finding_id LIMIT 1",
                    {**queue, "q": q, "f": f})
        nq, nf = cur.fetchone() or (MAX_KEY, MAX_KEY)
        cur.execute(_split_sql(t, per_env), {**queue, "q": q, "f": f, "nq": nq, "nf": nf,
                                             "g": g, "spacing": spacing})
        added += cur.fetchone()[0]
        cur.execute(f"SELECT qkey, finding_id, n FROM {t.bucket} WHERE team_id = %(team)s "
                    "AND per_env = %(per_env)s AND environment = %(env)s AND g = %(g)s "
                    "ORDER BY qkey, finding_id", {**queue, "g": g})
        buckets = cur.fetchall()
        if len(buckets) > 2 * group:
            _split_group(cur, t, queue, g, buckets, group=group)
    return added


def _split_group(cur: Any, t: Tables, queue: dict[str, Any], g: int,
                 buckets: list[tuple[Any, ...]], *, group: int) -> None:
    cur.execute(f"SELECT min(g) FROM {t.group} WHERE team_id = %(team)s AND per_env = "
                "%(per_env)s AND environment = %(env)s AND g > %(g)s", {**queue, "g": g})
    nxt = cur.fetchone()[0]
    top = nxt if nxt is not None else g + GAP
    chunks = [buckets[i:i + group] for i in range(0, len(buckets), group)]
    numbers = [g + (top - g) * i // len(chunks) for i in range(len(chunks))]
    if len(set(numbers)) != len(numbers) or numbers[-1] >= top:
        # 32 halvings of one gap between two rebuilds: the next rewrite renumbers them.
        raise RuntimeError("no group number left between two groups; rebuild the buckets")
    moved = [(b, num) for chunk, num in zip(chunks[1:], numbers[1:], strict=True)
             for b in chunk]
    cur.execute(
        f"UPDATE {t.bucket} c SET g = u.g FROM unnest(%(qs)s::bigint[], %(fs)s::bigint[], "
        "%(gs)s::bigint[]) AS u(qkey, finding_id, g) WHERE c.team_id = %(team)s AND "
        "c.per_env = %(per_env)s AND c.environment = %(env)s AND c.qkey = u.qkey AND "
        "c.finding_id = u.finding_id",
        {**queue, "qs": [b[0] for b, _ in moved], "fs": [b[1] for b, _ in moved],
         "gs": [num for _, num in moved]})
    cur.execute(
        f"INSERT INTO {t.group} SELECT %(team)s, %(per_env)s, %(env)s, g, n "
        "FROM unnest(%(gs)s::bigint[], %(ns)s::bigint[]) AS u(g, n)",
        {**queue, "gs": numbers[1:], "ns": [sum(b[2] for b in chunk) for chunk in chunks[1:]]})
    cur.execute(
        f"UPDATE {t.group} SET n = %(n)s WHERE team_id = %(team)s AND per_env = %(per_env)s "
        "AND environment = %(env)s AND g = %(g)s",
        {**queue, "g": g, "n": sum(b[2] for b in chunks[0])})


def ranks_of(cur: Any, finding_ids: Iterable[int], *,
             t: Tables = PRODUCT) -> dict[int, tuple[int, int]]:
    """Finding id -> (rank, environment rank) counted from the buckets, for the ids that
    have a ranked row."""
    cur.execute(ranks_sql(t), {"ids": ids_text(finding_ids)})
    return {fid: (int(rank), int(env)) for fid, rank, env in cur.fetchall()}


def ranks_sql(t: Tables, *, teams: bool = False) -> str:
    """(finding id, rank, environment rank) of the ranked rows whose ids are `%(ids)s`
    (with `teams`, as `rank_sql`'s)."""
    return (f"WITH t(finding_id, rank) AS MATERIALIZED"
            f" ({rank_sql(t, per_env=False, teams=teams)}),"
            f" e(finding_id, rank) AS MATERIALIZED ({rank_sql(t, per_env=True, teams=teams)})"
            " SELECT t.finding_id, t.rank, e.rank FROM t JOIN e USING (finding_id)")


def ids_text(finding_ids: Iterable[int]) -> str:
    """Finding ids as the array literal `rank_sql`'s `%(ids)s` takes."""
    return "{" + ",".join(map(str, finding_ids)) + "}"
