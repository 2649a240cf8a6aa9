"""A ranked finding's rank, counted from its queue key, for every reader.

A ranking run writes the rows whose own key changed, so the `rank` and `env_rank` columns
of a ranked row hold its ranks as of the run that last wrote it. The current rank is the
row's place in its team's queue ordered by (qkey, finding), counted from the bucket counts
(`trustrank.ranking.positions`). So:

- a page in queue order orders by (team, qkey, finding) (the key index), and for one
  environment by the same after filtering on the environment;
- the ranks of a page's rows, or of a handful, are counted in one statement for them all
  (`ranks_of`, `team_ranks_of`): about 0.1 ms a row for both ranks at a million findings;
- inside raw SQL that must count per row (a group's best rank), `rank_sql()` calls the SQL
  function `ranking_rank_team` (migrations ranking.0008 and 0010): about 0.3 ms a row
  for both ranks, three times the set-based count, so only for a few dozen rows;
- a reader that streams a whole queue in key order counts the ranks as it goes.

A queue stored before the keys has no buckets; its rows keep the ranks they were stored
with, which nothing has shifted since.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import connection

from trustrank.ranking import positions
from trustrank.ranking.models import RankingRun, RunStatus

# Writes committed just before a gather began may carry an earlier updated_at.
CLOCK_SKEW = timedelta(seconds=30)


def ranked_rows_as_of(team_id: int) -> datetime | None:
    """When the team's ranked rows were read as of, less CLOCK_SKEW: the start of its latest
    done run (its gather began after). Every finding written since may differ from its row;
    one not written since is as its row says. None before the team's first run."""
    run = (RankingRun.objects.filter(team_id=team_id, status=RunStatus.DONE)
           .order_by("-finished_at", "-pk").values_list("started_at", "created_at").first())
    if run is None:
        return None
    return (run[0] or run[1]) - CLOCK_SKEW


def rank_sql(alias: str) -> str:
    """The team-queue rank of the ranked row aliased `alias`, inside raw SQL."""
    return (f"coalesce({positions.FUNCTION}_team({alias}.team_id, {alias}.qkey,"
            f" {alias}.finding_id), {alias}.rank)")


def env_rank_sql(alias: str) -> str:
    """The environment-queue rank of the ranked row aliased `alias`, inside raw SQL."""
    return (f"coalesce({positions.FUNCTION}_env({alias}.team_id, {alias}.environment,"
            f" {alias}.qkey, {alias}.finding_id), {alias}.env_rank)")


def ranks_of(
    finding_ids: Iterable[int], *, teams: Iterable[int] | None = None,
) -> dict[int, tuple[int, int]]:
    """Finding id -> (rank, environment rank), for the ids that are ranked: counted for the
    whole set in one statement, the stored ranks where a queue has no counts. `teams`: the
    findings' teams (or more), when the caller knows them; else they are read first."""
    rows = _counted(finding_ids, positions.ranks_sql(positions.PRODUCT, teams=True),
                    "rank, r.env_rank", teams=teams)
    return {fid: (int(rank), int(env)) for fid, rank, env in rows}


def team_ranks_of(finding_ids: Iterable[int]) -> dict[int, int]:
    """Finding id -> rank in its team's queue, for the ids that are ranked."""
    rows = _counted(finding_ids, positions.rank_sql(positions.PRODUCT, per_env=False,
                                                    teams=True), "rank")
    return {fid: int(rank) for fid, rank in rows}


# The ranked rows of a queue that has no counts yet (stored before the keys), as stored.
_UNCOUNTED = """
UNION ALL SELECT r.finding_id, r.{columns} FROM ranking_rankedfinding r
WHERE r.finding_id = ANY(%(ids)s::bigint[]) AND r.team_id = ANY(%(teams)s::bigint[])
  AND NOT EXISTS (
    SELECT 1 FROM ranking_rankbucket c
    WHERE c.team_id = r.team_id AND NOT c.per_env AND c.environment = '')"""


def _counted(finding_ids: Iterable[int], sql: str, stored: str, *,
             teams: Iterable[int] | None = None) -> list[tuple[int, ...]]:
    """The rows of `sql` (`teams=True`) and `_UNCOUNTED` for `finding_ids`. Their findings'
    teams (`teams`, else a primary-key read of them) are named in the statement as
    constants: a ranked row is of its finding's team, and with the teams known PostgreSQL
    plans only their partitions of the ranked rows (`positions._TEAMS`)."""
    ids = sorted(set(finding_ids))
    if not ids:
        return []
    if teams is None:
        from trustrank.findings.models import Finding

        teams = Finding.objects.filter(pk__in=ids).values_list("team_id", flat=True)
    named = sorted(set(teams))
    if not named:
        return []
    with connection.cursor() as cur:
        cur.execute(sql + _UNCOUNTED.format(columns=stored),
                    {"ids": positions.ids_text(ids), "teams": positions.ids_text(named)})
        return cur.fetchall()
