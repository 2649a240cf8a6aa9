"""Storing a run's ranks: the rank contexts, the RankChange history with its reasons,
the new rank columns on the findings, and reading back what moved."""

from __future__ import annotations

import gc
import hashlib
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import islice, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson
from django.db import connection
from django.utils import timezone
from psycopg.copy import LibpqWriter

from trustrank.ranking.inputs import Gathered
from trustrank.ranking.models import RankChange, RankingRun
from trustrank.risk.results import RankedFinding, RankResult, factor_json


def services_json(result: RankResult) -> dict[str, dict[str, Any]]:
    """The per-service graph results by environment and name, as the run stores them."""
    out: dict[str, dict[str, Any]] = {}
    for s in result.services:
        out.setdefault(s.environment, {})[s.name] = {
            "trust": s.trust,
            "identity_trust": s.identity_trust,
            "exposure": s.exposure,
            "exposure_reason": s.exposure_reason,
            "path": list(s.path),
            "hops": orjson.loads(orjson.dumps(list(s.hops))),
        }
    return out


def services_store(
    result: RankResult, *, previous: RankResult | None = None, previous_digest: str = ""
) -> str:
    """Store the run's per-service results (a `ServiceResults` row unless one with the same
    content exists) and return their digest. When `previous`, whose results were stored
    under `previous_digest`, found the same for every service, nothing is built or sent:
    the ten thousand services of a large team are ten megabytes of JSON."""
    if previous is not None and previous_digest and result.services == previous.services:
        return previous_digest
    body = orjson.dumps(services_json(result), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(body).hexdigest()
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM ranking_serviceresults WHERE digest = %s", [digest])
        if cur.fetchone() is None:
            cur.execute(
                "INSERT INTO ranking_serviceresults (digest, data, created_at) "
                "VALUES (%s, %s::jsonb, now()) ON CONFLICT (digest) DO NOTHING",
                [digest, body.decode()],
            )
    return digest


def context_of(r: RankedFinding) -> dict[str, Any]:
    return {
        "deployed": r.deployed,
        "environment": r.environment,
        "service": r.service,
        "project_version": r.project_version,
        "exposure": r.exposure,
        "reachability": r.reachability,
        "exploitation": r.exploitation,
        "automatable": r.automatable,
        "human_impact": r.human_impact,
        "trust": r.trust,
        "path": list(r.path),
        "explanation": [factor_json(f) for f in r.explanation],
    }


_Row = tuple[int, int, str, float, str, str]


# Above this many changed ranks a run rewrites the team's queue whole (delete + COPY) rather
# than row by row.
_REWRITE_ABOVE = 250_000


def _store(
    *,
    run: RankingRun,
    result: RankResult,
    gathered: Gathered,
    before: dict[int, tuple[int, int, str, float, str, str]] | None = None,
    previous: RankResult | None = None,
    previous_ids: dict[str, int] | None = None,
    row_hashes: Callable[[Iterable[tuple[int, _Row]]], int] | None = None,
) -> tuple[dict[str, Any], dict[int, _Row], tuple[list[int], list[int]], int | None]:
    """Write the run's ranks; `before` is the stored queue when the caller knows it (an
    incremental run), else it is read; `previous` is the result `before` was made from, if
    the caller kept it, and `previous_ids` the finding ids it was made with. Returns the
    counts, the rows now stored, the findings whose row was written (new or changed)
    and whose row was dropped, and, when the whole queue was written and `row_hashes`
    given, `row_hashes` of every (finding id, row): computed chunk by chunk while
    PostgreSQL stores the chunk before, where it costs no wall time."""
    # A team's first queue from a full run is written by `store_columns` (the runs module
    # tries it first); with no stored row `_store_rows` writes every row as new.
    with _collector_paused():
        return _store_rows(run=run, result=result, gathered=gathered, before=before,
                           previous=previous, previous_ids=previous_ids,
                           row_hashes=row_hashes)


def _contexts_insert(cur: Any, new_context: dict[str, bytes]) -> None:
    """Store the contexts (digest -> JSON) not stored yet. Only those are sent: an
    incremental run's walked rows mostly keep theirs, and PostgreSQL parsed megabytes of
    JSON to find them there."""
    cur.execute(
        "SELECT digest FROM ranking_rankcontext WHERE digest = ANY(%s::varchar[])",
        ["{" + ",".join(new_context) + "}"],
    )
    stored = {row[0] for row in cur.fetchall()}
    # One JSON object (digest -> context) as one parameter: the driver quotes a string
    # in C, where a text array is escaped element by element in Python.
    cur.execute(
        "INSERT INTO ranking_rankcontext (digest, data, created_at) "
        "SELECT key, value, now() FROM jsonb_each(%s::jsonb) "
        "ON CONFLICT (digest) DO NOTHING",
        [_json_object({d: b for d, b in new_context.items() if d not in stored})],
    )


def _store_rows(
    *,
    run: RankingRun,
    result: RankResult,
    gathered: Gathered,
    before: dict[int, tuple[int, int, str, float, str, str]] | None,
    previous: RankResult | None,
    previous_ids: dict[str, int] | None,
    row_hashes: Callable[[Iterable[tuple[int, _Row]]], int] | None = None,
) -> tuple[dict[str, Any], dict[int, _Row], tuple[list[int], list[int]], int | None]:
    # The context of a ranked finding, keyed cheaply: the engine shares one factor tuple
    # per advisory facts and one per deployment context, so their identities (alive as
    # long as `result`) stand for their values; the other fields are plain values, sliced
    # in one go (`RankedFinding` order: exploitation, automatable, then deployed … path).
    # Hashing the factors themselves (dataclasses) cost seconds at a million findings;
    # equal contexts under different keys only compute the same digest twice.
    contexts: dict[tuple[Any, ...], tuple[str, bytes]] = {}
    rows: dict[int, tuple[int, int, str, float, str, str]] = {}
    env_counter: dict[str, int] = {}
    finding_ids = gathered.finding_ids
    changed_on_the_way: list[int] = []
    gone_on_the_way: list[int] | None = None

    def row_of(r: RankedFinding, n: int, env: str) -> tuple[int, int, str, float, str, str]:
        key = (id(r[9]), id(r[19]), r[7:9], r[10:19])
        ctx = contexts.get(key)
        if ctx is None:
            body = orjson.dumps(context_of(r), option=orjson.OPT_SORT_KEYS)
            ctx = contexts[key] = (hashlib.sha256(body).hexdigest(), body)
        return (r[1], n, env, r[2], r[3], ctx[0])

    reused = 0
    if previous is not None and before is not None and previous.findings:
        # An incremental run: most ranked findings are the previous result's objects at
        # the same places, whose stored rows stand; only the others are looked at.
        rows, changed_on_the_way, gone_on_the_way = _walk_changed(
            result.findings, previous.findings, before, finding_ids,
            previous_ids or finding_ids, row_of, differ=result.changed_places,
        )
        reused = len(before)
        env_counter = dict(Counter(map(itemgetter(2), rows.values())))
    else:
        rows, env_counter = _queue_rows(result.findings, finding_ids, contexts)
        if before is not None:
            changed_on_the_way = [fid for fid, row in rows.items() if before.get(fid) != row]
    new_context = {ctx[0]: ctx[1] for ctx in contexts.values()}
    with connection.cursor() as cur:
        _contexts_insert(cur, new_context)
        if before is None:
            cur.execute(
                "SELECT finding_id, rank, env_rank, environment, score, decision, context_id "
                "FROM ranking_rankedfinding WHERE team_id = %s",
                [run.team_id],
            )
            before = {row[0]: row[1:] for row in cur.fetchall()}
            if before:
                changed = [fid for fid, row in rows.items() if before.get(fid) != row]
                gone = [fid for fid in before if fid not in rows]
            else:
                # The team's first run: every row is new (no comparison per row).
                changed, gone = list(rows), []
        else:
            changed = changed_on_the_way
            gone = gone_on_the_way or []
        moved = [
            fid for fid in changed
            if fid not in before or before[fid][0] != rows[fid][0]
            or before[fid][3] != rows[fid][3] or before[fid][4] != rows[fid][4]
        ] if before else changed
        _history(cur, run=run, moved=moved, gone=gone, before=before, rows=rows,
                 new_context=new_context, first=not before)
        rewrite = len(changed) + len(gone) > _REWRITE_ABOVE
        if rewrite:
            cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [run.team_id])
            targets = list(rows)
        else:
            if gone:
                cur.execute(
                    "DELETE FROM ranking_rankedfinding WHERE finding_id = ANY(%s::bigint[])",
                    [_int_array(gone)],
                )
            if changed:
                cur.execute(
                    "DELETE FROM ranking_rankedfinding WHERE finding_id = ANY(%s::bigint[])",
                    [_int_array(changed)],
                )
            targets = changed
        hashed: list[int] = []
        on_chunk = None
        if rewrite and row_hashes is not None:
            def on_chunk(chunk: list[int]) -> None:
                hashed.append(row_hashes(zip(chunk, map(rows.__getitem__, chunk),
                                             strict=True)))
        _copy_ranked(cur, team_id=run.team_id, run_id=run.pk, targets=targets, rows=rows,
                     on_chunk=on_chunk)
        if rewrite:
            # The planner must know the new queue's size to walk its index for a page.
            cur.execute("ANALYZE ranking_rankedfinding")
    counts = {
        "by_environment": {env: n for env, n in sorted(env_counter.items())},
        # Distinct contexts of the whole queue, reused rows' included.
        "contexts": len(set(map(itemgetter(5), rows.values()))) if reused else len(new_context),
        "moved": len(moved),
        "updated": len(changed),
        "left_queue": len(gone),
    }
    return counts, rows, (changed, gone), sum(hashed) if on_chunk is not None else None


def _walk_changed(
    findings: tuple[RankedFinding, ...], prev: tuple[RankedFinding, ...],
    before: dict[int, tuple[int, int, str, float, str, str]], ids: dict[str, int],
    prev_ids: dict[str, int],
    row_of: Callable[[RankedFinding, int, str], tuple[int, int, str, float, str, str]],
    differ: list[int] | None = None,
) -> tuple[dict[int, tuple[int, int, str, float, str, str]], list[int], list[int]]:
    """(rows, changed, gone) of an incremental run, from the previous queue `prev` and its
    stored rows `before`. A finding that is the previous result's object at the same place
    keeps its stored row while every environment has as many findings before it as it had
    (its environment rank stands); only the other places are walked. A walked finding's
    environment rank is one more than that of the nearest finding of its environment
    before it, whose row is already final. `differ`, when the engine knew them, are the
    places whose finding is not the previous one (ascending); else they are found."""
    n, n_prev = len(findings), len(prev)
    if differ is None:
        common = min(n, n_prev)
        # One identity test per place (the cheapest pass there is), then work per change.
        differ = [i for i, x, y in zip(range(common), findings, prev, strict=False)
                  if x is not y]
        differ.extend(range(common, n))
    rows = dict(before)
    changed: list[int] = []
    out: list[int] = []  # previous findings no longer at their place
    came: set[int] = set()  # findings now at a place they were not at
    diff: dict[str, int] = {}  # findings per environment before here, now less then
    uneven = 0  # environments whose entry in `diff` is not zero

    # Per environment, the last walked place and its environment rank: a look back for
    # the nearest finding of an environment stops there.
    last_walked: dict[str, tuple[int, int]] = {}

    def env_rank_before(i: int, env: str) -> int:
        stop, rank = last_walked.get(env, (-1, 0))
        for k in range(i - 1, stop, -1):
            r = findings[k]
            if (r[11] if r[10] else "") == env:
                return rows[ids[r[0]]][1]
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
        env = r[11] if r[10] else ""
        same = i < n_prev and prev[i] is r
        if not same:
            if i < n_prev:
                p = prev[i]
                out.append(prev_ids[p[0]])
                uneven -= shift(p[11] if p[10] else "", -1)
            uneven -= shift(env, 1)
        fid = ids[r[0]]
        n_env = env_rank_before(i, env) + 1
        last_walked[env] = (i, n_env)
        old = before.get(fid)
        if not same:
            came.add(fid)
        if not (same and old is not None and old[1] == n_env):
            row = rows[fid] = row_of(r, n_env, env)
            if old != row:
                changed.append(fid)
        i += 1
    out.extend(prev_ids[p[0]] for p in prev[n:])
    gone = [fid for fid in out if fid not in came]
    for fid in gone:
        del rows[fid]
    return rows, changed, gone


def _queue_rows(
    findings: tuple[RankedFinding, ...], finding_ids: dict[str, int],
    contexts: dict[tuple[Any, ...], tuple[str, bytes]],
) -> tuple[dict[int, _Row], dict[str, int]]:
    """Every ranked finding's row (finding id -> (rank, env rank, environment, score,
    decision, context digest)), in queue order, and the findings per environment; the
    contexts met go into `contexts`."""
    rows: dict[int, _Row] = {}
    env_counter: dict[str, int] = {}
    for _chunk in _queue_row_chunks(findings, finding_ids, contexts, rows, env_counter):
        pass
    return rows, env_counter


_CHUNK = 50_000


def _queue_row_chunks(
    findings: tuple[RankedFinding, ...], finding_ids: dict[str, int],
    contexts: dict[tuple[Any, ...], tuple[str, bytes]], rows: dict[int, _Row],
    env_counter: dict[str, int],
) -> Iterator[list[int]]:
    """`_queue_rows` a chunk at a time: each chunk's rows go into `rows` (in queue order)
    before its finding ids are yielded, so a COPY can send them while the next are made;
    `env_counter` is filled first. Column by column, each a pass in C over the chunk: a
    Python loop with a few lookups per finding cost seconds at a million findings."""
    n = len(findings)
    # The environment a finding is queued in: its context's when it runs somewhere.
    envs = [r[11] if r[10] else "" for r in findings]
    env_codes: dict[str, int] = {}
    codes = np.fromiter(map(env_codes.setdefault, envs, map(len, repeat(env_codes, n))),
                        dtype=np.int64, count=n)
    env_rank = np.empty(n, dtype=np.int64)
    for env, code in env_codes.items():
        at = np.flatnonzero(codes == code)
        env_rank[at] = np.arange(1, len(at) + 1)
        env_counter[env] = len(at)
    env_ranks = env_rank.tolist()
    # The context of a ranked finding, keyed cheaply: the engine shares one factor tuple
    # per advisory facts and one per deployment context, so their identities (alive as
    # long as `findings`) stand for their values; the other fields are plain values
    # (`RankedFinding` order: exploitation, automatable, then deployed … path). Each key
    # is numbered by the first place it occurs at; its digest is made once, from there.
    first: dict[tuple[Any, ...], int] = {}
    digest_at: dict[int, str] = {}
    for start in range(0, n, _CHUNK):
        part = findings[start : start + _CHUNK]
        end = start + len(part)
        ids = list(map(finding_ids.__getitem__, map(itemgetter(0), part)))
        keys = zip(map(id, map(itemgetter(9), part)), map(id, map(itemgetter(19), part)),
                   map(itemgetter(slice(7, 9)), part), map(itemgetter(slice(10, 19)), part),
                   strict=True)
        known = len(first)
        places = list(map(first.setdefault, keys, range(start, end)))
        for key, i in islice(first.items(), known, None):
            ctx = contexts.get(key)
            if ctx is None:
                body = orjson.dumps(context_of(findings[i]), option=orjson.OPT_SORT_KEYS)
                ctx = contexts[key] = (hashlib.sha256(body).hexdigest(), body)
            digest_at[i] = ctx[0]
        rows.update(zip(ids, zip(
            range(start + 1, end + 1), env_ranks[start:end], envs[start:end],
            map(itemgetter(2), part), map(itemgetter(3), part),
            map(digest_at.__getitem__, places), strict=True,
        ), strict=True))
        yield ids


# COPY's binary format: the file header, and the end-of-data word.
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_BINARY_TRAILER = b"\xff\xff"


def _binary_rows(columns: list[tuple[str, Any]], n: int) -> bytes:
    """`n` rows in COPY's binary format: per row a field count, then each column's length
    and value, big-endian, laid out by one numpy record type. `columns` are (numpy type,
    value: one for every row, or an array of `n`); an empty byte string is sent as an empty
    text."""
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for i, (kind, _value) in enumerate(columns):
        fields.append((f"l{i}", ">i4"))
        if np.dtype(kind).itemsize:
            fields.append((f"v{i}", kind))
    out = np.empty(n, dtype=np.dtype(fields))
    out["count"] = len(columns)
    for i, (kind, value) in enumerate(columns):
        out[f"l{i}"] = np.dtype(kind).itemsize
        if np.dtype(kind).itemsize:
            out[f"v{i}"] = value
    return out.tobytes()


def _text_type(value: bytes) -> str:
    """The numpy type of a text column whose values are `len(value)` bytes long."""
    return f"S{len(value)}" if value else "S0"


def _copy_ranked(
    cur: Any, *, team_id: int, run_id: int, targets: list[int],
    rows: dict[int, tuple[int, int, str, float, str, str]],
    on_chunk: Callable[[list[int]], None] | None = None,
) -> None:
    """COPY the ranked rows of `targets` (see `_copy_ranked_chunks`)."""
    _copy_ranked_chunks(
        cur, team_id=team_id, run_id=run_id, rows=rows, on_chunk=on_chunk,
        chunks=(targets[i : i + _CHUNK] for i in range(0, len(targets), _CHUNK)))


class _QueuedWriter(LibpqWriter):
    """psycopg's writer, fed by a thread from a short queue: `write` returns at once, so
    the next chunk is made (and the last one hashed) while PostgreSQL stores this one.
    With the plain writer each `write` waited until PostgreSQL had taken nearly the whole
    chunk, so the two took turns. Unlike psycopg's `QueuedLibpqWriter` (1,024 buffers of
    128 KiB), at most `depth` chunks wait: megabytes, not a hundred."""

    def __init__(self, cursor: Any, depth: int = 2) -> None:
        super().__init__(cursor)
        self._pending: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._send, name="ranked-copy", daemon=True)
        self._thread.start()

    def _send(self) -> None:
        try:
            while (data := self._pending.get()) is not None:
                super().write(data)  # waits on the socket with the GIL released
        except BaseException as exc:  # raised by write() or finish(), in the caller's thread
            self._error = exc
            while self._pending.get() is not None:
                pass

    def write(self, data: Any) -> None:
        if self._error is not None:
            raise self._error
        self._pending.put(data)

    def finish(self, exc: BaseException | None = None) -> None:
        self._pending.put(None)
        self._thread.join()
        if self._error is not None and exc is None:
            raise self._error
        super().finish(exc)


def _copy_ranked_chunks(
    cur: Any, *, team_id: int, run_id: int, chunks: Iterable[list[int]],
    rows: dict[int, tuple[int, int, str, float, str, str]],
    on_chunk: Callable[[list[int]], None] | None = None,
) -> None:
    """COPY the ranked rows of the finding ids of each chunk (each in `rows` by the time
    it comes) in the binary format, laid out by numpy a chunk at a time: formatting a
    million rows as text cost seconds of the process (and PostgreSQL parsed every number
    back). Within a chunk the rows go grouped by environment, decision and context digest
    length (one record layout each), in their order within a group. `on_chunk` is called
    with each chunk's ids once it is sent, while PostgreSQL stores it."""
    with cur.copy(
        "COPY ranking_rankedfinding (finding_id, team_id, run_id, rank, env_rank, "
        "environment, score, decision, context_id) FROM STDIN (FORMAT BINARY)",
        writer=_QueuedWriter(cur.cursor),
    ) as copy:
        copy.write(_BINARY_HEADER)
        for chunk in chunks:
            n = len(chunk)
            values = list(map(rows.__getitem__, chunk))
            digests: dict[str, int] = {}
            digest_code = np.fromiter(
                map(digests.setdefault, map(itemgetter(5), values),
                    map(len, repeat(digests, n))),
                dtype=np.int64, count=n)
            encoded = [d.encode() for d in digests]
            width = np.array(list(map(len, encoded)), dtype=np.int64)[digest_code]
            groups: dict[tuple[str, str, int], int] = {}
            group = np.fromiter(
                map(groups.setdefault,
                    zip(map(itemgetter(2), values), map(itemgetter(4), values),
                        width.tolist(), strict=True),
                    map(len, repeat(groups, n))),
                dtype=np.int64, count=n)
            fid = np.array(chunk, dtype=np.int64)
            rank = np.fromiter(map(itemgetter(0), values), dtype=np.int64, count=n)
            env_rank = np.fromiter(map(itemgetter(1), values), dtype=np.int64, count=n)
            score = np.fromiter(map(itemgetter(3), values), dtype=np.float64, count=n)
            for (env, decision, size), code in groups.items():
                at = np.flatnonzero(group == code)
                env_b, decision_b = env.encode(), decision.encode()
                context_type = f"S{size}"
                table = np.array([b if len(b) == size else b"" for b in encoded],
                                 dtype=context_type) if size else None
                copy.write(_binary_rows([
                    (">i8", fid[at]), (">i8", team_id), (">i8", run_id), (">i4", rank[at]),
                    (">i4", env_rank[at]), (_text_type(env_b), env_b), (">f8", score[at]),
                    (_text_type(decision_b), decision_b),
                    (context_type, table[digest_code[at]] if table is not None else b""),
                ], len(at)))
            if on_chunk is not None:
                on_chunk(chunk)
        copy.write(_BINARY_TRAILER)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Storing makes a few million small tuples and no reference cycles; the cyclic
    collector would walk the whole heap (the engine's result included) again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _int_array(ids: list[int]) -> str:
    """A PostgreSQL array literal of integers (a string parameter: the driver adapts a
    Python list of a hundred thousand ints element by element)."""
    return "{" + ",".join(map(str, ids)) + "}"


def _json_object(bodies: dict[str, bytes]) -> str:
    """`{"digest": <context JSON>, …}` from already serialised bodies."""
    return "{" + ",".join(f'"{d}":{b.decode()}' for d, b in bodies.items()) + "}"


def _history(
    cur: Any,
    *,
    run: RankingRun,
    moved: list[int],
    gone: list[int],
    before: dict[int, tuple[Any, ...]],
    rows: dict[int, tuple[int, int, str, float, str, str]],
    new_context: dict[str, bytes],
    first: bool,
) -> None:
    """RankChange rows: findings whose rank, score or decision moved, entered the queue
    (after the team's first run: on the first, everything is new and nothing moved) or
    left it."""
    if first:
        return
    old_ctx = _contexts({before[f][5] for f in moved if f in before} - new_context.keys())
    now = timezone.now()
    parsed: dict[str, Any] = {}
    whys: dict[tuple[str, str], str] = {}

    def ctx(digest: str) -> Any:
        if digest not in parsed:
            parsed[digest] = (
                orjson.loads(new_context[digest]) if digest in new_context
                else old_ctx.get(digest)
            )
        return parsed[digest]

    def why_of(old_digest: str, new_digest: str) -> str:
        # Many moved findings share a pair of contexts: compare each pair once.
        pair = (old_digest, new_digest)
        why = whys.get(pair)
        if why is None:
            why = whys[pair] = orjson.dumps(_why(ctx(old_digest), ctx(new_digest))).decode()
        return why

    if gone:
        # A ranked row may outlive its finding (the table has no foreign key: a finding
        # deleted while a run stored its rank); its history went with the finding.
        cur.execute(
            "SELECT id FROM findings_finding WHERE id = ANY(%s::bigint[])", [_int_array(gone)]
        )
        existing = {row[0] for row in cur.fetchall()}
        gone = [fid for fid in gone if fid in existing]
    # COPY's text formatted here, as for the ranks: the driver's row path costs a call per
    # value. Decisions are fixed words and `why` is JSON (orjson escapes every control
    # character), so only the backslashes of the JSON need doubling.
    at = now.isoformat()
    whys_text: dict[str, str] = {}

    def text(why: str) -> str:
        t = whys_text.get(why)
        if t is None:
            t = whys_text[why] = why.replace("\\", "\\\\")
        return t

    lines: list[str] = []
    append = lines.append
    for fid in moved:
        new = rows[fid]
        old = before.get(fid)
        if old is None:
            append(f"{run.pk}\t{fid}\t{new[0]}\t{new[3]!r}\t{new[4]}\t\\N\t\\N\t\t[]\t{at}\n")
        else:
            append(f"{run.pk}\t{fid}\t{new[0]}\t{new[3]!r}\t{new[4]}\t{old[0]}\t{old[3]!r}\t"
                   f"{old[4]}\t{text(why_of(old[5], new[5]))}\t{at}\n")
    for fid in gone:
        old = before[fid]
        append(f"{run.pk}\t{fid}\t\\N\t\\N\t\t{old[0]}\t{old[3]!r}\t{old[4]}\t[]\t{at}\n")
    with cur.copy(
        "COPY ranking_rankchange (run_id, finding_id, rank, score, decision, previous_rank, "
        "previous_score, previous_decision, why, at) FROM STDIN"
    ) as copy:
        for i in range(0, len(lines), 20_000):
            copy.write("".join(lines[i : i + 20_000]))


def _contexts(digests: set[str]) -> dict[str, Any]:
    from trustrank.ranking.models import RankContext

    return dict(RankContext.objects.filter(digest__in=digests).values_list("digest", "data"))


def _why(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The factors whose value or effect changed, largest effect change first."""
    if not before or not after:
        return []
    a = {f["name"]: f for f in before.get("explanation", [])}
    b = {f["name"]: f for f in after.get("explanation", [])}
    out = []
    for name in sorted(a.keys() | b.keys()):
        x, y = a.get(name), b.get(name)
        if x and y and x["value"] == y["value"] and x["effect"] == y["effect"]:
            continue
        out.append({
            "factor": name,
            "before": x["value"] if x else None,
            "after": y["value"] if y else None,
            "effect_change": round((y["effect"] if y else 0.0) - (x["effect"] if x else 0.0), 4),
        })
    out.sort(key=lambda c: (-abs(c["effect_change"]), c["factor"]))
    return out


def ranking_changes(*, run: RankingRun, limit: int = 50) -> list[RankChange]:
    """What moved most in this run: `moved` is positive when a finding rose; a finding new
    to the queue (or leaving it) counts as moving from (or to) its end."""
    from django.db.models import F, IntegerField, Value
    from django.db.models.functions import Abs, Coalesce

    span = int((run.counts or {}).get("findings", 0)) + 1
    moved = Coalesce(F("previous_rank"), Value(span), output_field=IntegerField()) - Coalesce(
        F("rank"), Value(span), output_field=IntegerField()
    )
    return list(
        RankChange.objects.filter(run=run)
        .annotate(moved=moved, distance=Abs(moved))
        .select_related("finding")
        .order_by("-distance", "finding_id")[:limit]
    )

