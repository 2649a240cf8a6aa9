"""A full run's queue stored over the team's stored one, from the engine's columns: the rows
made as a team's first queue's are (`store_columns`), compared with the stored rows as
they are read (`store_compare`), the history written from the rows that changed, and
then the changed rows alone written, or the whole queue when many changed.

The hourly full run of a team the worker kept is such a run. It made its rows finding by
finding and read the stored queue whole to compare: at ten million findings it peaked at
8.8-9.3 GB, where the team's first full run peaks at 7.1 GB."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from django.db import connection

from trustrank.ranking.inputs import Gathered
from trustrank.ranking.inputs.ids import search_groups_of
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services import store
from trustrank.ranking.services.store_columns import queue_counts, queue_of, store_whole
from trustrank.ranking.services.store_compare import stored_compared
from trustrank.ranking.services.store_contexts import _contexts_insert
from trustrank.ranking.services.store_copy import _copy_ranked
from trustrank.ranking.services.store_history import _history
from trustrank.ranking.services.store_keys import buckets_store
from trustrank.ranking.services.store_rows import Ids, OwnRow, QueueRows
from trustrank.ranking.services.store_table import TeamTable
from trustrank.risk.results import RankResult


def store_again_from_columns(
    *, run: RankingRun, result: RankResult, gathered: Gathered,
    row_hashes: Callable[[Iterable[tuple[int, OwnRow]]], int] | None,
    fid: np.ndarray[Any, Any] | None = None,
    meanwhile: Callable[[], bool] | None = None,
    team_table: TeamTable | None = None,
) -> tuple[dict[str, Any], QueueRows, tuple[Ids, list[int]], int | None] | None:
    """Store a full run's queue (a result with columns; None without) over the team's
    stored rows, as `store._store` would: the history of every row whose key, score or
    decision changed, that is new or that left; then, when more than `_REWRITE_ABOVE` rows
    changed or left, the whole queue written anew (`store_columns.store_whole`, hashed on
    the way), else those rows alone. Returns what `store._store` returns; the hash of the
    rows only when the whole queue was written."""
    if result.columns is None:
        return None
    q, rows = queue_of(result, gathered, fid)
    with connection.cursor() as cur:
        compared = stored_compared(run.team_id, rows, rewrite_above=store._REWRITE_ABOVE)
        changed, gone = compared.changed, compared.gone
        _history(cur, run=run, moved=compared.moved, gone=gone, before=compared.before,
                 rows=rows, new_context=q.bodies, first=not compared.stored)
        rows_hash: int | None = None
        if not compared.stored or len(changed) + len(gone) > store._REWRITE_ABOVE:
            rows_hash, buckets = store_whole(
                cur, q, rows, run=run, row_hashes=row_hashes, meanwhile=meanwhile,
                team_table=team_table, replaces=True)
        else:
            _contexts_insert(cur, q.bodies)
            store.delete_rows(cur, run.team_id, gone, changed)
            _copy_ranked(cur, team_id=run.team_id, run_id=run.pk, targets=changed, rows=rows,
                         groups=lambda pks: search_groups_of(gathered.finding_ids, pks))
            buckets = buckets_store(cur, team_id=run.team_id, rows=rows,
                                    before=compared.before, changed=changed, gone=gone,
                                    rewrite=False)
    counts = queue_counts(q, moved=len(compared.moved), updated=len(changed),
                          left_queue=len(gone), buckets=buckets)
    return counts, rows, (changed, gone), rows_hash
