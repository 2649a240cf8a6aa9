"""A ranked finding's rank, counted from its queue key, for every reader.

A ranking run writes the rows whose own key changed, so the `rank` and `env_rank` columns
of a ranked row hold its ranks as of the run that last wrote it. The current rank is the
row's place in its team's queue ordered by (qkey, finding), counted from the bucket counts
(`trustrank.ranking.positions`) by the SQL functions `ranking_rank_team` and
`ranking_rank_env` (migration ranking.0008). So:

- a page in queue order orders by `QUEUE_ORDER` (the (team, qkey, finding) index), and for
  one environment by `ENV_QUEUE_ORDER` after filtering on the environment;
- the rank of a row on a page, or of a handful, is `team_rank()` / `env_rank()` as an ORM
  annotation, or `rank_sql()` / `env_rank_sql()` inside raw SQL: about 0.15 ms a row;
- a reader that streams a whole queue in key order counts the ranks as it goes.

A queue stored before the keys has no buckets; its rows keep the ranks they were stored
with, which nothing has shifted since (the functions return NULL there).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, F, Func
from django.db.models.functions import Coalesce

from trustrank.ranking.positions import FUNCTION

# The queue order of ranked rows (relative to a RankedFinding queryset): one team's, or one
# environment's once filtered on it. The finding id breaks ties, as in the engine.
QUEUE_ORDER = ("qkey", "finding_id")


def team_rank(prefix: str = "") -> Coalesce:
    """The rank in the team's queue of the ranked row at `prefix` (e.g. "ranked__" from a
    Finding queryset), as an expression to annotate."""
    counted = Func(F(f"{prefix}team_id"), F(f"{prefix}qkey"), F(f"{prefix}finding_id"),
                   function=f"{FUNCTION}_team", output_field=BigIntegerField())
    return Coalesce(counted, F(f"{prefix}rank"), output_field=BigIntegerField())


def env_rank(prefix: str = "") -> Coalesce:
    """The rank in its environment's queue of the ranked row at `prefix`."""
    counted = Func(F(f"{prefix}team_id"), F(f"{prefix}environment"), F(f"{prefix}qkey"),
                   F(f"{prefix}finding_id"), function=f"{FUNCTION}_env",
                   output_field=BigIntegerField())
    return Coalesce(counted, F(f"{prefix}env_rank"), output_field=BigIntegerField())


def rank_sql(alias: str) -> str:
    """The team-queue rank of the ranked row aliased `alias`, inside raw SQL."""
    return (f"coalesce({FUNCTION}_team({alias}.team_id, {alias}.qkey, {alias}.finding_id),"
            f" {alias}.rank)")


def env_rank_sql(alias: str) -> str:
    """The environment-queue rank of the ranked row aliased `alias`, inside raw SQL."""
    return (f"coalesce({FUNCTION}_env({alias}.team_id, {alias}.environment, {alias}.qkey,"
            f" {alias}.finding_id), {alias}.env_rank)")


def ranks_of(finding_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """Finding id -> (rank, environment rank), for the ids that are ranked: one statement."""
    return {fid: (int(rank), int(env)) for fid, rank, env in _counted(
        finding_ids, f"{rank_sql('r')}, {env_rank_sql('r')}")}


def team_ranks_of(finding_ids: Iterable[int]) -> dict[int, int]:
    """Finding id -> rank in its team's queue, for the ids that are ranked: one statement."""
    return {fid: int(rank) for fid, rank in _counted(finding_ids, rank_sql("r"))}


def _counted(finding_ids: Iterable[int], columns: str) -> list[tuple[Any, ...]]:
    ids = sorted(set(finding_ids))
    if not ids:
        return []
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT r.finding_id, {columns} FROM ranking_rankedfinding r"  # noqa: S608
            " WHERE r.finding_id = ANY(%s)",
            [ids],
        )
        return cur.fetchall()
