"""Storing a run's ranks: the new rows and those whose own values (`store_rows.OwnRow`)
changed, the contexts they point at, and the history of own changes (`store_history`).
A row whose ranks alone changed (others rose above it) is not written: its `rank`,
`env_rank` and `run` stay those of the run that last wrote it; readers count ranks from
the key (`trustrank.ranking.ranks`). The COPY is `store_copy`'s; a full run's queue
`store_columns`' (the team's first) or `store_again`'s (over a stored one); the
per-service results `store_services`'."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice, repeat
from operator import itemgetter
from typing import Any

import numpy as np
from django.db import connection

from trustrank.ranking.inputs import Gathered
from trustrank.ranking.inputs.ids import finding_pks, int_array, pk_of, search_groups_of
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.store_compare import (
    compare_rows,
    compared_rows,
    moved_rows,
    stored_compared,
)
from trustrank.ranking.services.store_contexts import _context_body, _contexts_insert
from trustrank.ranking.services.store_copy import _CHUNK, ChunkHashes, _copy_ranked
from trustrank.ranking.services.store_history import _history
from trustrank.ranking.services.store_keys import KeyParts, buckets_store
from trustrank.ranking.services.store_moved import (
    queued_in,
    rows_moved,
    rows_walked,
    walked_located,
)
from trustrank.ranking.services.store_rows import (
    _DECISION_INDEX,
    Ids,
    OwnRow,
    QueueRows,
    env_ranks,
)
from trustrank.ranking.services.store_table import PARENT, TeamTable
from trustrank.risk.collector import collector_paused
from trustrank.risk.results import RankedFinding, RankResult

_Row = tuple[int, int, str, float, str, str]


# Above this many changed rows (own values) a run rewrites the team's queue whole (delete +
# COPY) rather than row by row.
_REWRITE_ABOVE = 250_000
# An incremental run's rows are walked place by place from the previous queue's while few
# places changed (a few microseconds a changed place, in Python), and gathered by place
# otherwise (`store_moved.rows_moved`: passes in C over every place, 50-70 ns a place at a
# million and at ten million alike). Walked up to a share of the places (and at least
# `_WALK_MIN`, at most `_REWRITE_ABOVE`): at a million findings a trace window that
# renumbered about 160,000 places was stored in 1.3 s walked (profiled), 0.1 s gathered.
_WALK_SHARE = 50
_WALK_MIN = 1_000


def _store(
    *,
    run: RankingRun,
    result: RankResult,
    gathered: Gathered,
    before: Mapping[int, _Row] | None = None,
    previous: RankResult | None = None,
    previous_ids: Mapping[str, int] | None = None,
    row_hashes: Callable[[Iterable[tuple[int, OwnRow]]], int] | None = None,
    team_table: TeamTable | None = None,
) -> tuple[dict[str, Any], QueueRows, tuple[Ids, list[int]], int | None]:
    """Write the rows whose own values changed (the rows in memory hold every rank as of
    this run); `before` is the stored queue when known (an incremental run), else
    compared as it is read (`store_compare`);
    `previous` the result it was made from, `previous_ids` its finding ids. Returns the
    counts, the rows, the findings whose row was written and whose row was dropped, and,
    when the whole queue was written and `row_hashes` given, `row_hashes` of every
    (finding id, own values), made chunk by chunk while PostgreSQL stores the one before.
    With `team_table`, a rewrite of a queue large enough goes into a table of its own
    (`store_table`)."""
    # A full run's queue is written from its columns (`store_columns`, `store_again`: the
    # runs module tries them first); with no stored row `_store_rows` writes every row as
    # new.
    with collector_paused():
        return _store_rows(run=run, result=result, gathered=gathered, before=before,
                           previous=previous, previous_ids=previous_ids,
                           row_hashes=row_hashes, team_table=team_table)


def rewrites_rows(changed_places: Sequence[int] | None, places: int) -> bool:
    """Whether the rows of an incremental result of `places` places whose `changed_places`
    are these are not walked from the previous queue but gathered from its rows by where
    each finding was (`store_moved.rows_moved`), or made anew column by column and compared
    with the stored ones: either way the store reads nothing of the previous queue's
    findings."""
    return changed_places is not None and len(changed_places) > min(
        _REWRITE_ABOVE, max(_WALK_MIN, places // _WALK_SHARE))


def _store_rows(
    *,
    run: RankingRun,
    result: RankResult,
    gathered: Gathered,
    before: Mapping[int, _Row] | None,
    previous: RankResult | None,
    previous_ids: Mapping[str, int] | None,
    row_hashes: Callable[[Iterable[tuple[int, OwnRow]]], int] | None = None,
    team_table: TeamTable | None = None,
) -> tuple[dict[str, Any], QueueRows, tuple[Ids, list[int]], int | None]:
    # The context of a ranked finding, keyed by the identities of the engine's shared
    # `facts` and `context` tuples (alive as long as `result`): see `_queue_rows`.
    contexts: dict[tuple[Any, ...], tuple[str, bytes]] = {}
    bodies: dict[str, bytes] = {}
    parts = KeyParts()
    rows: QueueRows
    env_counter: dict[str, int] = {}
    finding_ids = gathered.finding_ids
    changed_on_the_way: Ids = []
    gone_on_the_way: list[int] | None = None
    moved_on_the_way: Ids | None = None

    def row_of(r: RankedFinding, n: int, env: str) -> tuple[int, int, str, float, str, str]:
        key = (id(r[4]), id(r[5]))
        ctx = contexts.get(key)
        if ctx is None:
            ctx = contexts[key] = _context_body(r, bodies, parts)
        return (r[1], n, env, r[2], r[3], ctx[0])

    reused = 0
    if before is not None:
        before = QueueRows.of(before)
    differ = result.changed_places
    moves = result.moves
    gathered_by_place = rewrites_rows(differ, len(result.findings))
    if (previous is not None and before is not None and gathered_by_place
            and moves is not None and before.by_place and len(before) == moves.previous):
        # Most places moved: the kept findings' rows are the previous run's, by place.
        rows, changed_on_the_way, gone_on_the_way = rows_moved(
            result.findings, moves, before, finding_ids, row_of)
        parts.update_at(rows, moves.fresh)
        rows.ordered_after(before, moves.kept, moves.fresh)
        reused = len(before)
        env_counter = rows.env_counts()
    elif previous is not None and before is not None and gathered_by_place:
        # Most places changed (one finding rising shifts every rank below it): every row
        # made column by column, as a full run does, beats walking the places one by one
        # (33 of a profiled 184 s at a million), then compared with the stored ones.
        rows, env_counter = _queue_rows(result.findings, finding_ids, contexts, bodies, parts)
        changed_on_the_way, gone_on_the_way, moved_on_the_way = compared_rows(rows, before)
        reused = len(before)
    elif previous is not None and before is not None and previous.findings:
        # An incremental run: most ranked findings are the previous result's objects at
        # the same places, whose stored rows stand; only the others are looked at.
        rows, changed_on_the_way, gone_on_the_way = _walk_changed(
            result.findings, previous.findings, before, finding_ids,
            previous_ids or finding_ids, row_of, differ=result.changed_places,
        )
        parts.update(rows)
        reused = len(before)
        env_counter = rows.env_counts()
    else:
        rows, env_counter = _queue_rows(result.findings, finding_ids, contexts, bodies, parts)
        if before is not None:
            changed_on_the_way = compare_rows(rows, before)[0]
    new_context = bodies  # digest -> JSON of every context met
    changed: Ids
    with connection.cursor() as cur:
        _contexts_insert(cur, new_context)
        if before is None:
            # The stored rows compared as they are read: only those that changed are kept.
            compared = stored_compared(run.team_id, rows, rewrite_above=_REWRITE_ABOVE)
            changed, gone, moved_on_the_way = compared.changed, compared.gone, compared.moved
            before, first = compared.before, not compared.stored
        else:
            changed = changed_on_the_way
            gone = gone_on_the_way or []
            first = not before
        moved: Ids = (moved_on_the_way if moved_on_the_way is not None
                      else moved_rows(changed, before, rows) if before else changed)
        _history(cur, run=run, moved=moved, gone=gone, before=before, rows=rows,
                 new_context=new_context, first=first)
        rewrite = len(changed) + len(gone) > _REWRITE_ABOVE
        target = PARENT
        if rewrite:
            if team_table is not None:
                target = team_table.load_into(cur, len(rows))
            if target == PARENT:  # else the swap retires the old rows
                cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s",
                            [run.team_id])
            targets: Ids = rows.fid
        else:
            delete_rows(cur, run.team_id, gone, changed)
            targets = changed
        hashes: ChunkHashes[Ids] | None = None
        if rewrite and row_hashes is not None:
            hashes = ChunkHashes(lambda chunk: row_hashes(rows.own_items(chunk)),
                                 deferred=target != PARENT)
        _copy_ranked(cur, team_id=run.team_id, run_id=run.pk, targets=targets, rows=rows,
                     on_chunk=hashes.add if hashes is not None else None, table=target,
                     groups=lambda pks: search_groups_of(gathered.finding_ids, pks))
        if team_table is not None:
            team_table.index(cur, meanwhile=hashes.step if hashes is not None else None)
        buckets = buckets_store(cur, team_id=run.team_id, rows=rows, before=before,
                                changed=changed, gone=gone, rewrite=rewrite)
        if rewrite and target == PARENT:
            # The planner must know the new queue's size to walk its index for a page.
            cur.execute("ANALYZE ranking_rankedfinding")
    counts = {
        "by_environment": {env: n for env, n in sorted(env_counter.items())},
        # Distinct contexts of the whole queue, reused rows' included.
        "contexts": rows.distinct_contexts() if reused else len(new_context),
        "moved": len(moved),
        "updated": len(changed),
        "left_queue": len(gone),
        "buckets": buckets,
    }
    return counts, rows, (changed, gone), hashes.sum if hashes is not None else None


def delete_rows(cur: Any, team_id: int, *fids: Ids) -> None:
    """Delete the team's ranked rows of each of `fids`."""
    for some in fids:
        if len(some):
            # The team named: the statement reads the team's partition alone.
            cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s "
                        "AND finding_id = ANY(%s::bigint[])", [team_id, int_array(some)])


def _walk_changed(
    findings: Sequence[RankedFinding], prev: Sequence[RankedFinding],
    before: Mapping[int, _Row], ids: Mapping[str, int], prev_ids: Mapping[str, int],
    row_of: Callable[[RankedFinding, int, str], _Row],
    differ: Sequence[int] | None = None,
) -> tuple[QueueRows, list[int], list[int]]:
    """(rows, changed, gone) of an incremental run, from the previous queue `prev` and its
    stored rows `before`. A finding that is the previous result's object at the same place
    keeps its stored row while every environment has as many findings before it as it had
    (its environment rank stands); only the other places are walked. A walked finding's
    environment rank is one more than that of the nearest finding of its environment
    before it, whose row is already final. `differ`, when the engine knew them, are the
    places whose finding is not the previous one (ascending); else they are found.

    The rows come as columns by place: place i holds the row `before` has for `prev[i]`
    until the walk gives it another."""
    n, n_prev = len(findings), len(prev)
    if differ is None:
        common = min(n, n_prev)
        # One identity test per place (the cheapest pass there is), then work per change.
        differ = [i for i, x, y in zip(range(common), findings, prev, strict=False)
                  if x is not y]
        differ.extend(range(common, n))
    old_rows = QueueRows.of(before)
    pk, prev_pk = pk_of(ids), pk_of(prev_ids)
    # The row in `before` of the finding at each previous place.
    if old_rows.by_place and len(old_rows) == n_prev:
        of_prev = np.arange(n_prev)
    else:
        of_prev = old_rows.places(np.fromiter(map(prev_pk, map(
            itemgetter(0), prev)), dtype=np.int64, count=n_prev))
    # The rows of the places that differ, where their findings had one.
    differ_ids = [pk(findings[i][0]) for i in differ if i < n]
    old_place = dict(zip(differ_ids, old_rows.places(differ_ids).tolist(), strict=True))
    env_rank_of = old_rows.env_rank[of_prev]  # by place, for places not walked
    walked: list[int] = []
    walked_rows: list[_Row] = []
    walked_ids: list[int] = []
    changed: list[int] = []
    out: list[int] = []  # previous findings no longer at their place
    came: set[int] = set()  # findings now at a place they were not at
    diff: dict[str, int] = {}  # findings per environment before here, now less then
    uneven = 0  # environments whose entry in `diff` is not zero

    # Per environment, the last walked place and its environment rank: a look back for
    # the nearest finding of an environment stops there (the places between are not
    # walked: they keep their previous row).
    last_walked: dict[str, tuple[int, int]] = {}

    def env_rank_before(i: int, env: str) -> int:
        stop, rank = last_walked.get(env, (-1, 0))
        for k in range(i - 1, stop, -1):
            r = findings[k]
            if queued_in(r) == env:
                return int(env_rank_of[k])
        return rank

    def shift(env: str, by: int) -> int:
        value = diff[env] = diff.get(env, 0) + by
        return (value == 0) - (value - by == 0)  # change in the count of zero entries

    pos, i = 0, 0
    while True:
        if not uneven:
            # Every environment as before: skip to the next place that differs.
            while pos < len(differ) and differ[pos] < i:
                pos += 1
            if pos == len(differ):
                break
            i = differ[pos]
        if i >= n:
            break
        r = findings[i]
        env = queued_in(r)
        same = i < n_prev and prev[i] is r
        if not same:
            if i < n_prev:
                p = prev[i]
                out.append(prev_pk(p[0]))
                uneven -= shift(queued_in(p), -1)
            uneven -= shift(env, 1)
        fid = pk(r[0])
        n_env = env_rank_before(i, env) + 1
        last_walked[env] = (i, n_env)
        at = int(of_prev[i]) if same else old_place.get(fid, -1)
        old = old_rows.row_at(at) if at >= 0 else None
        if not same:
            came.add(fid)
        if not (same and old is not None and old[1] == n_env):
            row = row_of(r, n_env, env)
            walked.append(i)
            walked_rows.append(row)
            walked_ids.append(fid)
            if old is None or old[2:] != row[2:]:  # its own values, not its ranks
                changed.append(fid)
        i += 1
    out.extend(prev_pk(p[0]) for p in prev[n:])
    gone = [fid for fid in out if fid not in came]
    rows = rows_walked(old_rows, of_prev[:n], n, walked, walked_ids, walked_rows)
    if old_rows.by_place and len(old_rows) == n_prev:
        rows.locate_by(walked_located(old_rows, n, walked, walked_ids))
    return rows, changed, gone


def _queue_rows(
    findings: Sequence[RankedFinding], finding_ids: Mapping[str, int],
    contexts: dict[tuple[Any, ...], tuple[str, bytes]], bodies: dict[str, bytes],
    parts: KeyParts,
) -> tuple[QueueRows, dict[str, int]]:
    """Every ranked finding's row, by place, and the findings per environment; the
    contexts met go into `contexts` (their JSON, one per digest, into `bodies`). Column by
    column, each a pass in C over a chunk: a Python loop with a few lookups per finding
    cost seconds at a million findings."""
    n = len(findings)
    # The environment a finding is queued in: its context's when it runs somewhere.
    env_codes: dict[str, int] = {}
    codes = np.fromiter(map(env_codes.setdefault, map(queued_in, findings),
                            map(len, repeat(env_codes, n))), dtype=np.int32, count=n)
    env_rank = env_ranks(codes, len(env_codes))
    env_counter = dict(zip(env_codes, np.bincount(codes, minlength=len(env_codes)).tolist(),
                           strict=True))
    # The context of a ranked finding, keyed cheaply: the engine shares one `facts` tuple
    # per advisory facts and one `context` per deployment context, so their identities
    # (alive as long as `findings`) stand for their values. Each key is numbered by the
    # first place it occurs at; its digest is made once, from there.
    first: dict[tuple[Any, ...], int] = {}
    code_at: dict[int, int] = {}
    digest_codes: dict[str, int] = {}
    fid = np.empty(n, dtype=np.int64)
    context = np.empty(n, dtype=np.int32)
    for start in range(0, n, _CHUNK):
        part = findings[start : start + _CHUNK]
        end = start + len(part)
        fid[start:end] = finding_pks(finding_ids, map(itemgetter(0), part), len(part))
        keys = zip(map(id, map(itemgetter(4), part)), map(id, map(itemgetter(5), part)),
                   strict=True)
        known = len(first)
        places = list(map(first.setdefault, keys, range(start, end)))
        for key, i in islice(first.items(), known, None):
            ctx = contexts.get(key)
            if ctx is None:
                ctx = contexts[key] = _context_body(findings[i], bodies)
            if ctx[0] not in digest_codes:
                parts.add(ctx[0], findings[i])
            code_at[i] = digest_codes.setdefault(ctx[0], len(digest_codes))
        context[start:end] = list(map(code_at.__getitem__, places))
    rows = QueueRows(
        fid=fid, rank=np.arange(1, n + 1), env_rank=env_rank, env=codes,
        score=np.fromiter(map(itemgetter(2), findings), dtype=np.float64, count=n),
        decision=np.fromiter(map(_DECISION_INDEX.__getitem__, map(itemgetter(3), findings)),
                             dtype=np.int8, count=n),
        context=context, envs=list(env_codes), digests=list(digest_codes), by_place=True)
    parts.update(rows)
    return rows, env_counter
