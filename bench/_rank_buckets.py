"""The bucket layout of bench/rank_positions.py: queue-key ranks whose counts an incremental
run updates in a few rows per changed finding (issue 26).

Each queue (the team's: `per_env` false; each environment's: `per_env` true) is cut into
buckets at key thresholds, every `spacing` positions at a rebuild; the first bucket starts
at the sentinel below every key. A bucket holds `n`, the rows of its queue from its
threshold up to the next bucket's. Buckets belong to groups (`g`, ascending with the key;
`group` buckets each at a rebuild, numbers 2^32 apart so that a split fits new ones
between), and `rp_group` holds each group's `n`, the sum of its buckets'. So:

    rank = sum(n) of the groups before the finding's group
         + sum(n) of the buckets before its bucket in that group
         + the rows from its bucket's threshold up to its key (index-only count) + 1

An incremental run adds the changed findings' −1 (old key) and +1 (new key) to their
buckets and groups: one statement, the deltas summed per bucket and per group, so it
writes at most one row per changed bucket and one per changed group (O(changed findings),
not O(queue / spacing) as the prefix counts of `rp_checkpoint` do).

A bucket that grew past `split_over` × `spacing` rows (many findings entering one narrow
key range) is split in the same run, right after the counts: its rows are read in key order
(fewer than a few `spacing`) and new thresholds put every `spacing` of them; its group's
sum does not change. A group that then holds more than 2 × `group` buckets is cut into
groups of `group` buckets numbered between it and the next group (its buckets' `g` and two
or more group rows rewritten). Buckets that shrink are not merged in the run: an emptier
bucket only makes its count cheaper; a full run's rebuild evens them out.
"""

from __future__ import annotations

from typing import Any

import psycopg

GAP = 2**32
MIN_KEY = -(2**63)
MAX_KEY = 2**63 - 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS rp_bucket (
    team_id int NOT NULL, per_env bool NOT NULL, environment varchar(120) NOT NULL,
    qkey bigint NOT NULL, finding_id bigint NOT NULL, g bigint NOT NULL, n bigint NOT NULL,
    PRIMARY KEY (team_id, per_env, environment, qkey, finding_id)
) WITH (fillfactor = 80);
CREATE INDEX IF NOT EXISTS rp_bucket_group
    ON rp_bucket (team_id, per_env, environment, g, qkey, finding_id);
CREATE TABLE IF NOT EXISTS rp_group (
    team_id int NOT NULL, per_env bool NOT NULL, environment varchar(120) NOT NULL,
    g bigint NOT NULL, n bigint NOT NULL, PRIMARY KEY (team_id, per_env, environment, g)
) WITH (fillfactor = 80);
"""

DELETE = [
    "DELETE FROM rp_bucket WHERE team_id = %(team)s",
    "DELETE FROM rp_group WHERE team_id = %(team)s",
]

# Every `spacing`-th position of each queue starts a bucket (the first at the sentinel),
# holding the rows up to the next; `group` consecutive buckets make a group.
REBUILD = """
WITH q AS (
    SELECT false AS per_env, ''::varchar AS environment, qkey, finding_id,
           row_number() OVER (ORDER BY qkey, finding_id) AS pos, count(*) OVER () AS total
    FROM rp_ranked WHERE team_id = %(team)s
    UNION ALL
    SELECT true, environment, qkey, finding_id,
           row_number() OVER (PARTITION BY environment ORDER BY qkey, finding_id),
           count(*) OVER (PARTITION BY environment)
    FROM rp_ranked WHERE team_id = %(team)s
), ins AS (
    INSERT INTO rp_bucket
    SELECT %(team)s, per_env, environment,
           CASE WHEN pos = 1 THEN %(min)s ELSE qkey END,
           CASE WHEN pos = 1 THEN %(min)s ELSE finding_id END,
           (pos - 1) / %(spacing)s / %(group)s * %(gap)s, least(%(spacing)s, total - pos + 1)
    FROM q WHERE (pos - 1) %% %(spacing)s = 0
    RETURNING per_env, environment, g, n
)
INSERT INTO rp_group SELECT %(team)s, per_env, environment, g, sum(n) FROM ins
GROUP BY per_env, environment, g
"""


def _queue(alias: str, per_env: bool, env: str) -> str:
    return (f"{alias}.team_id = r.team_id AND {'' if per_env else 'NOT '}{alias}.per_env"
            f" AND {alias}.environment = {env}")


def _rank_sql(per_env: bool) -> str:
    env = "r.environment" if per_env else "''"
    same_env = "AND x.environment = r.environment" if per_env else ""
    return f"""
SELECT r.finding_id,
       (SELECT coalesce(sum(gr.n), 0) FROM rp_group gr
        WHERE {_queue("gr", per_env, env)} AND gr.g < b.g)
     + (SELECT coalesce(sum(c.n), 0) FROM rp_bucket c
        WHERE {_queue("c", per_env, env)} AND c.g = b.g
          AND (c.qkey, c.finding_id) < (b.qkey, b.finding_id))
     + (SELECT count(*) FROM rp_ranked x WHERE x.team_id = r.team_id {same_env}
          AND (x.qkey, x.finding_id) >= (b.qkey, b.finding_id)
          AND (x.qkey, x.finding_id) < (r.qkey, r.finding_id))
     + 1
FROM rp_ranked r
CROSS JOIN LATERAL (
    SELECT c.qkey, c.finding_id, c.g FROM rp_bucket c
    WHERE {_queue("c", per_env, env)} AND (c.qkey, c.finding_id) <= (r.qkey, r.finding_id)
    ORDER BY c.qkey DESC, c.finding_id DESC LIMIT 1
) b
WHERE r.finding_id = ANY(%(ids)s)
"""


RANK = _rank_sql(False)
ENV_RANK = _rank_sql(True)

# A page at an offset: the group whose positions hold it (a running sum over the groups),
# then the bucket in it (a running sum over its buckets), then fewer than a bucket's rows.
DEEP_PAGE = """
WITH grp AS (
    SELECT g, n, sum(n) OVER (ORDER BY g) - n AS start FROM rp_group
    WHERE team_id = %(team)s AND NOT per_env AND environment = ''
), gp AS (
    SELECT g, start FROM grp WHERE start <= %(offset)s AND start + n > %(offset)s
), bk AS (
    SELECT c.qkey, c.finding_id, c.n,
           gp.start + sum(c.n) OVER (ORDER BY c.qkey, c.finding_id) - c.n AS start
    FROM gp JOIN rp_bucket c ON c.team_id = %(team)s AND NOT c.per_env
      AND c.environment = '' AND c.g = gp.g
), b AS (
    SELECT * FROM bk WHERE start <= %(offset)s AND start + n > %(offset)s
)
SELECT {columns}, %(offset)s + row_number() OVER (ORDER BY qkey, finding_id) AS rank FROM (
    SELECT r.* FROM b CROSS JOIN LATERAL (
        SELECT r.* FROM rp_ranked r WHERE r.team_id = %(team)s
          AND (r.qkey, r.finding_id) >= (b.qkey, b.finding_id)
        ORDER BY r.qkey, r.finding_id OFFSET %(offset)s - b.start LIMIT {page}
    ) r
) p
"""

# A queue that has no bucket yet (an environment's first finding) gets the sentinel's.
ENSURE = [
    """INSERT INTO rp_bucket SELECT DISTINCT %(team)s, true, environment, %(min)s, %(min)s, 0, 0
    FROM rp_new ON CONFLICT DO NOTHING""",
    """INSERT INTO rp_group SELECT DISTINCT %(team)s, true, environment, 0, 0
    FROM rp_new ON CONFLICT DO NOTHING""",
]

# The run's −1 (old keys) and +1 (new keys) located in their buckets, summed per bucket and
# per group, each bucket and group written once. Returns the buckets now too full.
ADJUST = """
WITH delta AS (
    SELECT false AS per_env, ''::varchar AS environment, qkey, finding_id, -1 AS d FROM rp_old
    UNION ALL SELECT true, environment, qkey, finding_id, -1 FROM rp_old
    UNION ALL SELECT false, '', qkey, finding_id, 1 FROM rp_new
    UNION ALL SELECT true, environment, qkey, finding_id, 1 FROM rp_new
), per_bucket AS (
    SELECT d.per_env, d.environment, b.qkey, b.finding_id, b.g, sum(d.d) AS s
    FROM delta d CROSS JOIN LATERAL (
        SELECT c.qkey, c.finding_id, c.g FROM rp_bucket c
        WHERE c.team_id = %(team)s AND c.per_env = d.per_env AND c.environment = d.environment
          AND (c.qkey, c.finding_id) <= (d.qkey, d.finding_id)
        ORDER BY c.qkey DESC, c.finding_id DESC LIMIT 1
    ) b
    GROUP BY d.per_env, d.environment, b.qkey, b.finding_id, b.g HAVING sum(d.d) <> 0
), groups AS (
    UPDATE rp_group gr SET n = gr.n + s.s FROM (
        SELECT per_env, environment, g, sum(s) AS s FROM per_bucket
        GROUP BY per_env, environment, g
    ) s
    WHERE gr.team_id = %(team)s AND gr.per_env = s.per_env AND gr.environment = s.environment
      AND gr.g = s.g AND s.s <> 0
), buckets AS (
    UPDATE rp_bucket c SET n = c.n + p.s FROM per_bucket p
    WHERE c.team_id = %(team)s AND c.per_env = p.per_env AND c.environment = p.environment
      AND c.qkey = p.qkey AND c.finding_id = p.finding_id
    RETURNING c.per_env, c.environment, c.qkey, c.finding_id, c.g, c.n
)
SELECT per_env, environment, qkey, finding_id, g FROM buckets WHERE n > %(limit)s
"""

BUCKET_GROUP = """
SELECT g FROM rp_bucket WHERE team_id = %(team)s AND per_env = %(per_env)s
  AND environment = %(env)s AND qkey = %(q)s AND finding_id = %(f)s
"""
NEXT_BUCKET = """
SELECT qkey, finding_id FROM rp_bucket
WHERE team_id = %(team)s AND per_env = %(per_env)s AND environment = %(env)s
  AND (qkey, finding_id) > (%(q)s, %(f)s)
ORDER BY qkey, finding_id LIMIT 1
"""

# New thresholds every `spacing` rows of one bucket; its own count keeps the first part.
SPLIT = """
WITH rows AS (
    SELECT qkey, finding_id, row_number() OVER (ORDER BY qkey, finding_id) AS pos,
           count(*) OVER () AS total
    FROM rp_ranked x WHERE x.team_id = %(team)s {same_env}
      AND (x.qkey, x.finding_id) >= (%(q)s, %(f)s) AND (x.qkey, x.finding_id) < (%(nq)s, %(nf)s)
), ins AS (
    INSERT INTO rp_bucket
    SELECT %(team)s, %(per_env)s, %(env)s, qkey, finding_id, %(g)s,
           least(%(spacing)s, total - pos + 1)
    FROM rows WHERE pos > 1 AND (pos - 1) %% %(spacing)s = 0
    RETURNING n
)
UPDATE rp_bucket SET n = n - (SELECT coalesce(sum(n), 0) FROM ins)
WHERE team_id = %(team)s AND per_env = %(per_env)s AND environment = %(env)s
  AND qkey = %(q)s AND finding_id = %(f)s
RETURNING (SELECT count(*) FROM ins)
"""

GROUP_BUCKETS = """
SELECT qkey, finding_id, n FROM rp_bucket
WHERE team_id = %(team)s AND per_env = %(per_env)s AND environment = %(env)s AND g = %(g)s
ORDER BY qkey, finding_id
"""
NEXT_GROUP = """
SELECT min(g) FROM rp_group
WHERE team_id = %(team)s AND per_env = %(per_env)s AND environment = %(env)s AND g > %(g)s
"""
MOVE_BUCKETS = """
UPDATE rp_bucket c SET g = u.g FROM unnest(%(qs)s::bigint[], %(fs)s::bigint[], %(gs)s::bigint[])
    AS u(qkey, finding_id, g)
WHERE c.team_id = %(team)s AND c.per_env = %(per_env)s AND c.environment = %(env)s
  AND c.qkey = u.qkey AND c.finding_id = u.finding_id
"""
NEW_GROUPS = """
INSERT INTO rp_group SELECT %(team)s, %(per_env)s, %(env)s, g, n
FROM unnest(%(gs)s::bigint[], %(ns)s::bigint[]) AS u(g, n)
"""
GROUP_SET = """
UPDATE rp_group SET n = %(n)s
WHERE team_id = %(team)s AND per_env = %(per_env)s AND environment = %(env)s AND g = %(g)s
"""


def rebuild(conn: psycopg.Connection, *, teams: tuple[int, ...], spacing: int,
            group: int) -> None:
    with conn.transaction():
        for team in teams:
            for statement in DELETE:
                conn.execute(statement, {"team": team})
            conn.execute(REBUILD, {"team": team, "spacing": spacing, "group": group,
                                   "gap": GAP, "min": MIN_KEY})
    conn.execute("ANALYZE rp_bucket")
    conn.execute("ANALYZE rp_group")


def adjust(conn: psycopg.Connection, params: dict[str, Any], *, spacing: int,
           split_over: float) -> list[tuple[Any, ...]]:
    """The run's counts, inside its transaction (after rp_old and rp_new are filled).
    Returns the buckets that grew past `split_over` × `spacing`, for `split`."""
    team = params["team"]
    for statement in ENSURE:
        conn.execute(statement, {"team": team, "min": MIN_KEY})
    return conn.execute(
        ADJUST, {"team": team, "limit": int(split_over * spacing)}
    ).fetchall()


def split(conn: psycopg.Connection, team: int, full: list[tuple[Any, ...]], *, spacing: int,
          group: int) -> int:
    """Splits each too-full bucket, then any group left with more than 2 × `group`
    buckets. Returns the number of buckets added."""
    added = 0
    for per_env, env, q, f, _ in full:
        queue = {"team": team, "per_env": per_env, "env": env}
        # read again: an earlier split in this run may have moved it to a new group
        g = conn.execute(BUCKET_GROUP, {**queue, "q": q, "f": f}).fetchone()[0]
        nxt = conn.execute(NEXT_BUCKET, {**queue, "q": q, "f": f}).fetchone()
        nq, nf = nxt or (MAX_KEY, MAX_KEY)
        sql = SPLIT.format(same_env="AND x.environment = %(env)s" if per_env else "")
        added += conn.execute(sql, {**queue, "q": q, "f": f, "nq": nq, "nf": nf, "g": g,
                                    "spacing": spacing}).fetchone()[0]
        buckets = conn.execute(GROUP_BUCKETS, {**queue, "g": g}).fetchall()
        if len(buckets) > 2 * group:
            _split_group(conn, queue, g, buckets, group=group)
    return added


def _split_group(conn: psycopg.Connection, queue: dict[str, Any], g: int,
                 buckets: list[tuple[Any, ...]], *, group: int) -> None:
    nxt = conn.execute(NEXT_GROUP, {**queue, "g": g}).fetchone()[0]
    top = nxt if nxt is not None else g + GAP
    chunks = [buckets[i:i + group] for i in range(0, len(buckets), group)]
    numbers = [g + (top - g) * i // len(chunks) for i in range(len(chunks))]
    if len(set(numbers)) != len(numbers) or numbers[-1] >= top:
        # 32 halvings of one gap between two rebuilds: the full run's rebuild renumbers.
        raise RuntimeError("no group number left between two groups; rebuild the buckets")
    moved = [(b, num) for chunk, num in zip(chunks[1:], numbers[1:], strict=True) for b in chunk]
    conn.execute(MOVE_BUCKETS, {**queue, "qs": [b[0] for b, _ in moved],
                                "fs": [b[1] for b, _ in moved], "gs": [num for _, num in moved]})
    conn.execute(NEW_GROUPS, {**queue, "gs": numbers[1:],
                              "ns": [sum(b[2] for b in chunk) for chunk in chunks[1:]]})
    conn.execute(GROUP_SET, {**queue, "g": g, "n": sum(b[2] for b in chunks[0])})
