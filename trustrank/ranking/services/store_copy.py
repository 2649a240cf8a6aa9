"""COPY of ranked rows in PostgreSQL's binary format, laid out by numpy a chunk at a time,
and the writer that sends a chunk while the next is made."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import numpy as np
from psycopg.copy import LibpqWriter

from trustrank.ranking.services.store_rows import Ids, QueueRows, Row
from trustrank.risk.inputs import DECISIONS

_CHUNK = 50_000

_C = TypeVar("_C")

# The search group of each of some finding ids, None when they are not known.
GroupsOf = Callable[[np.ndarray[Any, Any]], "np.ndarray[Any, Any] | None"]



def ranked_copy(table: str = "ranking_rankedfinding") -> str:
    """The ranked rows' COPY into `table` (the parent, or a team's new table:
    `store_table`), in the column order `_binary_rows` lays them out."""
    return (f"COPY {table} (finding_id, team_id, run_id, rank, env_rank, environment, "
            "score, decision, context_id, qkey, search_group) FROM STDIN (FORMAT BINARY)")


# COPY's binary format: the file header, and the end-of-data word.
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_BINARY_TRAILER = b"\xff\xff"


def _binary_rows(columns: list[tuple[str, Any]], n: int) -> bytes:
    """`n` rows in COPY's binary format: per row a field count, then each column's length
    and value, big-endian, laid out by one numpy record type. `columns` are (numpy type,
    value: one for every row, or an array of `n`; None for NULL in every row); an empty byte
    string is sent as an empty text."""
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for i, (kind, value) in enumerate(columns):
        fields.append((f"l{i}", ">i4"))
        if np.dtype(kind).itemsize and value is not None:
            fields.append((f"v{i}", kind))
    out = np.empty(n, dtype=np.dtype(fields))
    out["count"] = len(columns)
    for i, (kind, value) in enumerate(columns):
        out[f"l{i}"] = -1 if value is None else np.dtype(kind).itemsize
        if np.dtype(kind).itemsize and value is not None:
            out[f"v{i}"] = value
    return out.tobytes()


def _text_type(value: bytes) -> str:
    """The numpy type of a text column whose values are `len(value)` bytes long."""
    return f"S{len(value)}" if value else "S0"


def _copy_ranked(
    cur: Any, *, team_id: int, run_id: int, targets: Ids, rows: Mapping[int, Row],
    on_chunk: Callable[[Ids], None] | None = None, groups: GroupsOf | None = None,
    table: str = "ranking_rankedfinding",
) -> None:
    """COPY the ranked rows of `targets` into `table` (see `_copy_ranked_chunks`)."""
    _copy_ranked_chunks(
        cur, team_id=team_id, run_id=run_id, rows=QueueRows.of(rows), on_chunk=on_chunk,
        chunks=(targets[i : i + _CHUNK] for i in range(0, len(targets), _CHUNK)),
        groups=groups, table=table)


class ChunkHashes(Generic[_C]):
    """The sum of `hash_chunk` over the chunks a COPY sent (`add`): hashed as each is sent
    into the indexed parent, or, `deferred` (into a bare table of the team's own, which
    PostgreSQL takes faster than the rows are hashed), a chunk a `step`, while PostgreSQL
    builds the table's indexes (`store_table.TeamTable.index`)."""

    def __init__(self, hash_chunk: Callable[[_C], int], *, deferred: bool) -> None:
        self.hash_chunk, self.deferred = hash_chunk, deferred
        self.pending: list[_C] = []
        self.sum = 0

    def add(self, chunk: _C) -> None:
        self.pending.append(chunk)
        if not self.deferred:
            self.step()

    def step(self) -> bool:
        """Hash one chunk not hashed yet; False when there was none."""
        if not self.pending:
            return False
        self.sum += self.hash_chunk(self.pending.pop())
        return True


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

    def behind(self) -> bool:
        """Whether chunks wait behind the one PostgreSQL is taking: the caller has time."""
        return not self._pending.empty()

    def finish(self, exc: BaseException | None = None) -> None:
        self._pending.put(None)
        self._thread.join()
        if self._error is not None and exc is None:
            raise self._error
        super().finish(exc)


def _copy_ranked_chunks(
    cur: Any, *, team_id: int, run_id: int, chunks: Iterable[Ids], rows: QueueRows,
    on_chunk: Callable[[Ids], None] | None = None, groups: GroupsOf | None = None,
    table: str = "ranking_rankedfinding",
) -> None:
    """COPY the ranked rows of the finding ids of each chunk (each in `rows` by the time
    it comes) in the binary format, laid out by numpy a chunk at a time from the rows'
    columns: formatting a million rows as text cost seconds of the process (and PostgreSQL
    parsed every number back). Within a chunk the rows go grouped by environment,
    decision and context digest length (one record layout each; the groups in the order
    of their first row), in their order within a group. `on_chunk` is called with each
    chunk's ids once it is sent, while PostgreSQL stores it. `groups` gives the rows'
    search groups (`FindingIds.groups_of`); without them (or when it has none) they are
    NULL, which `store_groups.search_groups_mend` then sets."""
    encoded = [d.encode() for d in rows.digests]
    widths = np.array(list(map(len, encoded)), dtype=np.int64)
    widest = int(widths.max()) + 1 if len(widths) else 1
    tables = {size: np.array([b if len(b) == size else b"" for b in encoded],
                             dtype=f"S{size}") for size in set(widths.tolist()) if size}
    env_bytes = [e.encode() for e in rows.envs]
    with cur.copy(ranked_copy(table), writer=_QueuedWriter(cur.cursor)) as copy:
        copy.write(_BINARY_HEADER)
        for chunk in chunks:
            at = rows.places(chunk)
            if (at < 0).any():
                raise KeyError(chunk[int(np.flatnonzero(at < 0)[0])])
            context = rows.context[at]
            group = ((rows.env[at].astype(np.int64) * len(DECISIONS) + rows.decision[at])
                     * widest + widths[context])
            codes, first = np.unique(group, return_index=True)
            found = groups(rows.fid[at]) if groups is not None else None
            for code in codes[np.argsort(first)].tolist():
                some = at[group == code]
                env_code, rest = divmod(code, len(DECISIONS) * widest)
                decision, size = divmod(rest, widest)
                env_b, decision_b = env_bytes[env_code], DECISIONS[decision].encode()
                copy.write(_binary_rows([
                    (">i8", rows.fid[some]), (">i8", team_id), (">i8", run_id),
                    (">i4", rows.rank[some]), (">i4", rows.env_rank[some]),
                    (_text_type(env_b), env_b), (">f8", rows.score[some]),
                    (_text_type(decision_b), decision_b),
                    (f"S{size}", tables[size][rows.context[some]]) if size else ("S0", b""),
                    (">i8", rows.qkey[some]),
                    (">i8", None if found is None else found[group == code]),
                ], len(some)))
            if on_chunk is not None:
                on_chunk(chunk)
        copy.write(_BINARY_TRAILER)
