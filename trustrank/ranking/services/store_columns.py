"""A team's first queue stored from the engine's columns (`RankResult.columns`).

What `store._store_rows` does with a pass over a million ranked tuples (the environment,
the context key and the row of each), done here by array operations on the queue's
columns: the environment of a place is its tail's, its context is that of its pair of
codes (`queue.RankedColumns`), its environment rank is its place among the places of its
environment. The rows, their digest and what is sent to PostgreSQL are the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import Any

import numpy as np
import orjson
from django.conf import settings
from django.db import connection

from trustrank.ranking.inputs import Gathered
from trustrank.ranking.inputs.ids import finding_pks, search_groups_of
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.side import SideWrite
from trustrank.ranking.services.store import _REWRITE_ABOVE
from trustrank.ranking.services.store_contexts import _contexts_insert, context_of
from trustrank.ranking.services.store_copy import (
    _BINARY_HEADER,
    _BINARY_TRAILER,
    _CHUNK,
    ChunkHashes,
    _binary_rows,
    _QueuedWriter,
    _text_type,
    ranked_copy,
)
from trustrank.ranking.services.store_keys import buckets_store
from trustrank.ranking.services.store_rows import Ids, OwnRow, QueueRows
from trustrank.ranking.services.store_table import PARENT, TeamTable
from trustrank.risk.inputs import DECISIONS
from trustrank.risk.results import RankResult


def place_ids(result: RankResult, finding_ids: Mapping[str, int]) -> np.ndarray[Any, Any]:
    """The database id of the finding at each place of the queue."""
    return finding_pks(finding_ids, map(itemgetter(0), result.findings), len(result.findings))


@dataclass
class _Queue:
    """The stored columns of a queue, place by place, and what they are codes of."""

    fid: np.ndarray[Any, Any]
    env_rank: np.ndarray[Any, Any]
    env: np.ndarray[Any, Any]  # code in `envs`
    score: np.ndarray[Any, Any]
    decision: np.ndarray[Any, Any]  # index in DECISIONS
    context: np.ndarray[Any, Any]  # code in `digests`
    envs: list[str]
    digests: list[str]
    bodies: dict[str, bytes]  # digest -> context JSON
    qkey: np.ndarray[Any, Any]  # the queue key (`store_keys`)
    # The finding's search group, None when the findings were read without them.
    group: np.ndarray[Any, Any] | None = None


def _queue(result: RankResult, fid: np.ndarray[Any, Any]) -> _Queue:
    cols = result.columns
    n = len(result.findings)
    # A tail is (deployed, environment, …): a finding is queued in its context's
    # environment when it runs somewhere, else in ''.
    env_codes: dict[str, int] = {}
    tail_env = np.fromiter(
        (env_codes.setdefault(t[1] if t[0] else "", len(env_codes)) for t in cols.tails),
        dtype=np.int64, count=len(cols.tails))
    env = tail_env[cols.tail] if n else np.zeros(0, dtype=np.int64)
    # Environment rank: a place's position among its environment's places, from 1.
    by_env = np.argsort(env, kind="stable")
    counts = np.bincount(env, minlength=len(env_codes))
    env_rank = np.empty(n, dtype=np.int32)
    env_rank[by_env] = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts,
                                                                counts) + 1
    del by_env
    # A context per distinct (middle, tail) pair, made from the first place holding it;
    # equal JSON under two pairs is one digest. Codes are first made one per content as
    # `store._store_rows` keys contexts (the factor tuples by identity, the other fields
    # by value): the findings scored one by one (identity and reliability findings,
    # versions deployed nowhere) have codes of their own but mostly equal contents.
    mid_of = _canonical(cols.mids, lambda m: (id(m[2]), m[0], m[1]))
    tail_of, tail_count = _canonical(cols.tails, lambda t: (id(t[9]), t[:9])), len(cols.tails)
    pair = mid_of[cols.mid] * max(1, tail_count) + tail_of[cols.tail]
    _pairs, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    del pair, _pairs
    digest_codes: dict[str, int] = {}
    bodies: dict[str, bytes] = {}
    code_of_pair = np.empty(len(first), dtype=np.int64)
    for k, i in enumerate(first.tolist()):
        body = orjson.dumps(context_of(result.findings[i]), option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(body).hexdigest()
        bodies.setdefault(digest, body)
        code_of_pair[k] = digest_codes.setdefault(digest, len(digest_codes))
    return _Queue(
        fid=fid, env_rank=env_rank, env=env.astype(np.int32), score=cols.score,
        decision=cols.decision, context=code_of_pair.astype(np.int32)[inverse.reshape(-1)],
        envs=list(env_codes), digests=list(digest_codes), bodies=bodies, qkey=cols.qkey,
    )


def _canonical(values: list[tuple[Any, ...]],
               key: Callable[[tuple[Any, ...]], Any]) -> np.ndarray[Any, Any]:
    """Per value, the code of the first value with the same `key`."""
    codes: dict[Any, int] = {}
    return np.fromiter(map(codes.setdefault, map(key, values), range(len(values))),
                       dtype=np.int64, count=len(values))


def _rows(q: _Queue) -> QueueRows:
    """The queue's rows (its columns, as they are stored)."""
    return QueueRows(fid=q.fid, rank=np.arange(1, len(q.fid) + 1), env_rank=q.env_rank,
                     env=q.env, score=q.score, decision=q.decision, context=q.context,
                     envs=q.envs, digests=q.digests, by_place=True, qkey=q.qkey)


def _chunks(q: _Queue) -> Iterator[tuple[int, int, list[int]]]:
    """(start, end, finding ids) of each chunk of places."""
    for start in range(0, len(q.fid), _CHUNK):
        end = min(len(q.fid), start + _CHUNK)
        yield start, end, q.fid[start:end].tolist()


def _copy(cur: Any, q: _Queue, *, team_id: int, run_id: int,
          chunks: Iterable[tuple[int, int, list[int]]],
          on_chunk: Callable[[int, int], None],
          fill: Callable[[], bool] | None = None, table: str = PARENT,
          eager: bool = True) -> None:
    """COPY the places of each chunk into `table` in the binary format, grouped within a chunk by
    environment, decision and digest length (one record layout each), as
    `store._copy_ranked_chunks` sends rows. `on_chunk` is called once each chunk is sent;
    then `fill`, a step of other work that says whether it did any, once and again for as
    long as chunks wait to be sent: the process works while PostgreSQL does, not after.
    Not `eager`, `fill` runs only while chunks wait."""
    encoded = [d.encode() for d in q.digests]
    width = np.array([len(b) for b in encoded], dtype=np.int64)
    widest = int(width.max()) + 1 if len(width) else 1
    tables = {size: np.array([b if len(b) == size else b"" for b in encoded], dtype=f"S{size}")
              for size in set(width.tolist()) if size}
    env_bytes = [e.encode() for e in q.envs]
    writer = _QueuedWriter(cur.cursor)
    with cur.copy(ranked_copy(table), writer=writer) as copy:
        copy.write(_BINARY_HEADER)
        for start, end, _ids in chunks:
            context = q.context[start:end]
            group = ((q.env[start:end].astype(np.int64) * len(DECISIONS)
                      + q.decision[start:end]) * widest + width[context])
            for code in np.unique(group).tolist():
                at = np.flatnonzero(group == code) + start
                env_code, rest = divmod(code, len(DECISIONS) * widest)
                decision, size = divmod(rest, widest)
                env_b, decision_b = env_bytes[env_code], DECISIONS[decision].encode()
                copy.write(_binary_rows([
                    (">i8", q.fid[at]), (">i8", team_id), (">i8", run_id),
                    (">i4", at + 1), (">i4", q.env_rank[at]), (_text_type(env_b), env_b),
                    (">f8", q.score[at]), (_text_type(decision_b), decision_b),
                    (f"S{size}", tables[size][q.context[at]]) if size else ("S0", b""),
                    (">i8", q.qkey[at]),
                    (">i8", None if q.group is None else q.group[at]),
                ], len(at)))
            on_chunk(start, end)
            # Not `eager`: only while PostgreSQL is behind (the caller has other time).
            if fill is not None and (not eager or fill()):
                while writer.behind() and fill():
                    pass
        copy.write(_BINARY_TRAILER)


def _contexts_stored(bodies: dict[str, bytes]) -> None:
    """`_contexts_insert` on the calling thread's connection."""
    with connection.cursor() as cur:
        _contexts_insert(cur, bodies)


def store_first_from_columns(
    *, run: RankingRun, result: RankResult, gathered: Gathered,
    row_hashes: Callable[[Iterable[tuple[int, OwnRow]]], int] | None,
    fid: np.ndarray[Any, Any] | None = None,
    meanwhile: Callable[[], bool] | None = None,
    team_table: TeamTable | None = None,
) -> tuple[dict[str, Any], QueueRows, tuple[Ids, list[int]], int | None] | None:
    """Write the team's first queue from a result with columns (a full run), each chunk's
    rows made and hashed while PostgreSQL stores the chunk before. None when the result has
    no columns or the team has stored rows (then `store_again.store_again_from_columns`
    compares). `fid`: the database id per place, when the caller made it (`place_ids`).
    `meanwhile`, `team_table`: as `store_whole` takes them."""
    if result.columns is None:
        return None
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM ranking_rankedfinding WHERE team_id = %s LIMIT 1",
                    [run.team_id])
        if cur.fetchone() is not None:
            return None
        q, rows = queue_of(result, gathered, fid)
        rows_hash, buckets = store_whole(cur, q, rows, run=run, row_hashes=row_hashes,
                                         meanwhile=meanwhile, team_table=team_table)
    counts = queue_counts(q, moved=len(rows), updated=len(rows), left_queue=0,
                          buckets=buckets)
    return counts, rows, (rows.fid, []), rows_hash


def queue_of(result: RankResult, gathered: Gathered,
             fid: np.ndarray[Any, Any] | None) -> tuple[_Queue, QueueRows]:
    """A full run's queue as stored columns, search groups included, and as rows."""
    q = _queue(result, place_ids(result, gathered.finding_ids) if fid is None else fid)
    q.group = search_groups_of(gathered.finding_ids, q.fid)
    return q, _rows(q)


def store_whole(
    cur: Any, q: _Queue, rows: QueueRows, *, run: RankingRun,
    row_hashes: Callable[[Iterable[tuple[int, OwnRow]]], int] | None,
    meanwhile: Callable[[], bool] | None = None, team_table: TeamTable | None = None,
    replaces: bool = False,
) -> tuple[int | None, str]:
    """Write every row of the queue `q` (whose rows are `rows`), with its contexts and
    bucket counts; `replaces`: the team's stored rows go (a new table of its own, or
    deleted first). Returns `row_hashes` of every row, when given, and how the buckets
    were made. `meanwhile`: a step of other work that says whether it did any, called
    while PostgreSQL stores the chunks (storing a million rows is PostgreSQL's work for
    seconds; see `_copy`). A queue of `TRUSTRANK_RANKING_SIDE_WRITES_ABOVE` places or more
    has its contexts stored on a connection of its own meanwhile (`side.SideWrite`). With
    `team_table`, a queue large enough goes into a table of its own, indexed after
    (`store_table`)."""
    target = team_table.load_into(cur, len(q.fid)) if team_table is not None else PARENT
    if replaces and target == PARENT:  # else the swap retires the old rows
        cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [run.team_id])
    hashes: ChunkHashes[slice] = ChunkHashes(
        lambda part: row_hashes(zip(q.fid[part].tolist(), rows.own_rows_at(part),
                                    strict=True)) if row_hashes is not None else 0,
        deferred=target != PARENT)

    def on_chunk(start: int, end: int) -> None:
        hashes.add(slice(start, end))

    def fill() -> bool:
        # The deferred hashes first, then the run's other work.
        return hashes.step() or (meanwhile() if meanwhile is not None else False)

    contexts = (SideWrite("ranking-contexts", partial(_contexts_stored, q.bodies))
                if len(q.fid) >= settings.TRUSTRANK_RANKING_SIDE_WRITES_ABOVE else None)
    try:
        _copy(cur, q, team_id=run.team_id, run_id=run.pk, chunks=_chunks(q),
              on_chunk=on_chunk, fill=fill, table=target, eager=target == PARENT)
        if team_table is not None:
            team_table.index(cur, meanwhile=fill)
    finally:
        if contexts is not None:
            contexts.wait()
    if contexts is not None:
        contexts.result()
    else:
        _contexts_insert(cur, q.bodies)
    buckets = buckets_store(cur, team_id=run.team_id, rows=rows, before=None,
                            changed=rows.fid, gone=[], rewrite=True)
    if len(rows) > _REWRITE_ABOVE and target == PARENT:
        # The planner must know the new queue's size to walk its index for a page.
        cur.execute("ANALYZE ranking_rankedfinding")
    return (hashes.sum if row_hashes is not None else None), buckets


def queue_counts(q: _Queue, **counts: Any) -> dict[str, Any]:
    """A stored queue's counts: findings per environment, distinct contexts and `counts`
    (moved, updated, left_queue, buckets)."""
    return {
        "by_environment": {
            env: int(c) for env, c in sorted(zip(q.envs, np.bincount(
                q.env, minlength=len(q.envs)).tolist(), strict=True)) if c},
        "contexts": len(q.bodies),
        **counts,
    }
