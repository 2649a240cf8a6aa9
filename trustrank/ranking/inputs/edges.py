"""The call edges' sums over the ranking window, per (caller, callee), read whole or brought
up to date from the previous read.

At 500,000 edges (the scale issue's graph) the whole aggregate is 1.2–1.7 s of every run,
even when no trace arrived since the previous one. An incremental gather asks instead which
edges have a row written since the previous read (`CallEdgeBucket.written_at`), or a bucket
that left the window or its "recent" hour since, and aggregates those edges alone, from the
(caller, callee, bucket) index. An edge is aggregated whole either way, so reading it again
changes nothing: the reads may overlap by the clock skew.

What this cannot see is a row that became visible more than `CLOCK_SKEW` after it was
written (a transaction held open that long after its insert) or one deleted without a
written row beside it (no product path deletes call edge rows but compaction, which writes
the folded row). A whole read every `FULL_EVERY` bounds how long either could go unseen.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

# Sums cast back to bigint: the rates are computed from ints. `%(pairs)s` narrows the read
# to some edges (or is empty).
_EDGES_SQL = """
SELECT caller_id, callee_id, sum(calls)::bigint, sum(errors)::bigint, sum(mtls_calls)::bigint,
       (sum(calls) FILTER (WHERE bucket_start >= %(recent)s))::bigint, max(calls)
  FROM (SELECT b.caller_id, b.callee_id, b.bucket_start, sum(b.calls)::bigint AS calls,
               sum(b.errors)::bigint AS errors, sum(b.mtls_calls)::bigint AS mtls_calls
          FROM runtime_calledgebucket b
          JOIN runtime_environment e ON e.id = b.environment_id
         WHERE e.team_id = %(team)s AND b.bucket_start >= %(since)s {pairs}
         -- A bucket may be several partial rows (one per load): the busiest bucket is
         -- the busiest of their sums.
         GROUP BY b.caller_id, b.callee_id, b.bucket_start) per_bucket
 GROUP BY caller_id, callee_id
 ORDER BY caller_id, callee_id
"""

_SOME_PAIRS = ("AND (b.caller_id, b.callee_id) IN "
               "(SELECT * FROM unnest(%(callers)s::bigint[], %(callees)s::bigint[]))")

# The edges whose sums may differ from the previous read's: a row written since it (less
# the skew), a bucket that left the window, or one that left the recent hour. Three index
# ranges, one per condition, with the team's environments as an array: written as one
# scan with ORs and a subquery, PostgreSQL read the whole table (0.1-0.2 s at 500,000
# rows, against 5 ms).
_CHANGED_SQL = """
SELECT b.caller_id, b.callee_id FROM runtime_calledgebucket b
 WHERE b.environment_id = ANY(%(envs)s) AND b.written_at >= %(written)s
UNION
SELECT b.caller_id, b.callee_id FROM runtime_calledgebucket b
 WHERE b.environment_id = ANY(%(envs)s)
   AND b.bucket_start >= %(was_since)s AND b.bucket_start < %(since)s
UNION
SELECT b.caller_id, b.callee_id FROM runtime_calledgebucket b
 WHERE b.environment_id = ANY(%(envs)s)
   AND b.bucket_start >= %(was_recent)s AND b.bucket_start < %(recent)s
"""

# A row visible later than this after its insert may be missed by an incremental read.
CLOCK_SKEW = timedelta(seconds=30)
# Read whole at least this often, whatever the reads in between found.
FULL_EVERY = timedelta(minutes=10)
# More changed edges than this share of the window's: read whole (one scan beats that many
# index ranges).
_SHARE_MAX = 4

# (caller, callee) -> (calls, errors, mTLS calls, calls in the recent hour, busiest bucket)
Sums = tuple[int, int, int, int | None, int | None]


@dataclass(frozen=True)
class EdgeWindow:
    """The sums of each edge with calls in the window `since`…, and when they were read
    (`read_at`, the database's clock) and last read whole (`full_at`). `pairs` is in
    (caller, callee) order. `same_as_before`: an incremental read found every sum as the
    previous read had it (`pairs` is then the previous read's very dictionary)."""

    pairs: dict[tuple[int, int], Sums]
    since: datetime
    recent_since: datetime
    read_at: datetime
    full_at: datetime
    same_as_before: bool = False


def _sums(rows: list[tuple[int, ...]]) -> dict[tuple[int, int], Sums]:
    return {(caller, callee): (int(total or 0), int(errors or 0), int(mtls or 0),
                               recent, peak)
            for caller, callee, total, errors, mtls, recent, peak in rows}


def edges_read(
    team_id: int, since: datetime, recent_since: datetime,
    previous: EdgeWindow | None = None,
) -> EdgeWindow:
    """The team's edge sums over the window starting at `since` (recent hour from
    `recent_since`), from `previous` where it still holds."""
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp(), "
                    "ARRAY(SELECT id FROM runtime_environment WHERE team_id = %s)", [team_id])
        read_at, envs = cur.fetchone()
        params: dict[str, Any] = {"team": team_id, "since": since, "recent": recent_since}
        if (previous is not None and since >= previous.since
                and recent_since >= previous.recent_since
                and read_at - previous.full_at < FULL_EVERY):
            cur.execute(_CHANGED_SQL, {**params, "envs": envs,
                                       "written": previous.read_at - CLOCK_SKEW,
                                       "was_since": previous.since,
                                       "was_recent": previous.recent_since})
            changed = cur.fetchall()
            if len(changed) * _SHARE_MAX <= len(previous.pairs):
                return _updated(cur, previous, changed, params, read_at=read_at)
        cur.execute(_EDGES_SQL.format(pairs=""), params)
        return EdgeWindow(_sums(cur.fetchall()), since, recent_since, read_at, read_at)


def _updated(
    cur: Any, previous: EdgeWindow, changed: list[tuple[int, int]], params: dict[str, Any],
    *, read_at: datetime,
) -> EdgeWindow:
    """`previous` with the `changed` edges read again (`params`: the window's)."""
    fresh: dict[tuple[int, int], Sums] = {}
    if changed:
        cur.execute(_EDGES_SQL.format(pairs=_SOME_PAIRS),
                    {**params, "callers": [c for c, _ in changed],
                     "callees": [c for _, c in changed]})
        fresh = _sums(cur.fetchall())
    old = previous.pairs
    differ = [pair for pair in changed if fresh.get(pair) != old.get(pair)]
    if not differ:
        return replace(previous, since=params["since"], recent_since=params["recent"],
                       read_at=read_at, same_as_before=True)
    pairs = dict(old)
    added = False
    for pair in differ:
        sums = fresh.get(pair)
        if sums is None:
            del pairs[pair]
        else:
            added = added or pair not in pairs
            pairs[pair] = sums
    if added:
        pairs = dict(sorted(pairs.items()))
    return EdgeWindow(pairs, params["since"], params["recent"], read_at, previous.full_at)
