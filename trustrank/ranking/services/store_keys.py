"""Queue keys of the stored rows and the bucket counts kept beside them
(`trustrank.ranking.positions`): what a run writes so that a rank can be counted from the
key instead of read from the row.

A row's key is a function of its decision, its score and its context (the context holds
whether the finding runs anywhere and its four SSVC inputs), so it is made per distinct
context and combined with the decision and score columns by numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trustrank.ranking import positions
from trustrank.ranking.inputs import rank_settings
from trustrank.ranking.services.store_rows import Ids, QueueRows
from trustrank.risk.queue_key import key_parts_of, queue_keys
from trustrank.risk.results import RankedFinding

# (deployed, SSVC level) of a ranked finding's context.
Parts = tuple[bool, int]


def keys_of(decision: np.ndarray[Any, Any], score: np.ndarray[Any, Any],
            context: np.ndarray[Any, Any], parts: list[Parts]) -> np.ndarray[Any, Any]:
    """The queue key of each row from its decision, score and context code, `parts` being
    each context code's (deployed, level)."""
    deployed = np.array([p[0] for p in parts], dtype=bool).reshape(len(parts))
    level = np.array([p[1] for p in parts], dtype=np.int64).reshape(len(parts))
    return queue_keys(decision, deployed[context], level[context], score)


def _keys_into(cur: Any, table: str, rows: QueueRows, fids: Ids) -> None:
    """The (finding id, key, environment) of the rows of `fids` that `rows` has, into
    temporary `table`."""
    at = rows.places(np.asarray(fids, dtype=np.int64))
    at = at[at >= 0]
    positions.keys_table(cur, table)
    with cur.copy(f"COPY {table} (finding_id, qkey, environment) FROM STDIN") as copy:
        for fid, qkey, env in zip(rows.fid[at].tolist(), rows.qkey[at].tolist(),
                                  map(rows.envs.__getitem__, rows.env[at].tolist()),
                                  strict=True):
            copy.write_row((fid, qkey, env))


def buckets_store(cur: Any, *, team_id: int, rows: QueueRows, before: QueueRows | None,
                  changed: Ids, gone: Ids, rewrite: bool) -> str:
    """The team's bucket counts after the store wrote `changed` rows (and deleted `gone`
    ones) of `rows` over `before`: rebuilt when the queue was rewritten, else adjusted by
    the old and new keys. Counts that then disagree with the queue's size, per queue (a
    finding deleted between runs took its row but not its count; a queue stored before
    keys were), are rebuilt. Returns which it was: "adjusted" or "rebuilt"."""
    if not rewrite and before is not None:
        _keys_into(cur, positions.PRODUCT.old, before, [*np.asarray(changed).tolist(),
                                                        *np.asarray(gone).tolist()])
        _keys_into(cur, positions.PRODUCT.new, rows, changed)
        positions.adjust(cur, team_id=team_id)
        if _counts_agree(cur, team_id, rows):
            return "adjusted"
    if not _rebuild_from_rows(cur, team_id, rows):
        positions.rebuild(cur, team_id=team_id)
    return "rebuilt"


def _rebuild_from_rows(cur: Any, team_id: int, rows: QueueRows) -> bool:
    """`positions.rebuild` from the rows in memory, when they are by place and in key order
    (as a run makes them): every `SPACING`-th place of each queue starts a bucket, so the
    thresholds and counts are slices of the columns, and a few thousand rows are sent
    instead of PostgreSQL numbering the queue twice (5.5 s at a million). False, writing
    nothing, when the rows are not in key order."""
    n = len(rows)
    if not rows.by_place:
        return False
    q, f = rows.qkey, rows.fid
    if n > 1 and not ((q[1:] > q[:-1]) | ((q[1:] == q[:-1]) & (f[1:] > f[:-1]))).all():
        return False
    spacing, group, t = positions.SPACING, positions.GROUP, positions.PRODUCT
    buckets: list[tuple[Any, ...]] = []
    groups: dict[tuple[bool, str, int], int] = {}
    queues = [(False, "", np.arange(n))]
    queues += [(True, env, np.flatnonzero(rows.env == code))
               for code, env in enumerate(rows.envs)]
    for per_env, env, places in queues:
        for k, start in enumerate(range(0, len(places), spacing)):
            at = int(places[start])
            count = min(spacing, len(places) - start)
            g = k // group * positions.GAP
            key = (positions.MIN_KEY, positions.MIN_KEY) if k == 0 else (
                int(q[at]), int(f[at]))
            buckets.append((team_id, per_env, env, *key, g, count))
            groups[(per_env, env, g)] = groups.get((per_env, env, g), 0) + count
    for statement in positions.delete_statements(t):
        cur.execute(statement, {"team": team_id})
    with cur.copy(f"COPY {t.bucket} (team_id, per_env, environment, qkey, finding_id, g, n) "
                  "FROM STDIN") as copy:
        for row in buckets:
            copy.write_row(row)
    with cur.copy(f"COPY {t.group} (team_id, per_env, environment, g, n) FROM STDIN") as copy:
        for (per_env, env, g), count in groups.items():
            copy.write_row((team_id, per_env, env, g, count))
    return True


def _counts_agree(cur: Any, team_id: int, rows: QueueRows) -> bool:
    cur.execute(
        f"SELECT per_env, environment, sum(n) FROM {positions.PRODUCT.group} "  # noqa: S608
        "WHERE team_id = %s GROUP BY per_env, environment", [team_id])
    counts = {(per_env, env): int(n) for per_env, env, n in cur.fetchall() if n}
    want = {(True, env): n for env, n in rows.env_counts().items()}
    if len(rows):
        want[(False, "")] = len(rows)
    return counts == want


class KeyParts:
    """The (deployed, level) of each context digest a run made, from a ranked finding
    holding it, and the keys of the rows holding those contexts."""

    def __init__(self) -> None:
        self._parts = key_parts_of(rank_settings())
        self.by_digest: dict[str, Parts] = {}

    def add(self, digest: str, r: RankedFinding) -> None:
        if digest not in self.by_digest:
            self.by_digest[digest] = self._parts(r)

    def update_at(self, rows: QueueRows, at: np.ndarray[Any, Any]) -> None:
        """`update` for the rows at places `at` alone, rows this run made, into the rows'
        own key column (`store_moved.rows_moved`'s). A row the run kept keeps its key: it
        follows from the row's own values and its context's parts, which are as they were
        (where `update` found every row of the run's contexts by a mask of ten million
        and copied the column: 0.04 s a run)."""
        if not len(at):
            return
        table = [self.by_digest.get(d, (False, 0)) for d in rows.digests]
        rows.qkey[at] = keys_of(rows.decision[at], rows.score[at], rows.context[at], table)

    def update(self, rows: QueueRows) -> None:
        """Set the key of every row of `rows` whose context is one of the run's (the
        others keep theirs: rows the run did not make again)."""
        known = np.array([d in self.by_digest for d in rows.digests], dtype=bool)
        table = [self.by_digest.get(d, (False, 0)) for d in rows.digests]
        mine = known[rows.context] if len(rows.digests) else np.zeros(len(rows), bool)
        if mine.all():
            rows.qkey = keys_of(rows.decision, rows.score, rows.context, table)
        elif mine.any():
            rows.qkey = rows.qkey.copy()
            rows.qkey[mine] = keys_of(rows.decision[mine], rows.score[mine],
                                      rows.context[mine], table)
