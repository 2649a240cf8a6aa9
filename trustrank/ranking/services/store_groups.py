"""The ranked rows' search groups (`RankedFinding.search_group`) kept equal to their
findings' after each store.

The store writes a row's group with the row, from the gather. A row is written only when
its own values changed, so a finding whose component changed (its group with it) while its
rank did not keeps the group it was written with; and a finding written after the gather
read it may be stored with the group it had then. Both were written since the previous
run began: `search_groups_mend` sets, after the store and in its transaction, the group of
every ranked row whose finding was written since then (the findings' (team, updated_at)
index: a few rows) where it differs, and of any row without one (written by a store
before ranking.0012). Whatever a finding's row holds, the findings list checks findings
written since the latest run against the filter itself (trustrank/findings/search_groups.py).
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

# The finding's stored group (`Finding.search_group`, a generated column).
_GROUP = "f.search_group"


def search_groups_mend(*, team_id: int, since: datetime | None,
                       table: str = "ranking_rankedfinding") -> int:
    """Set the search group of the team's ranked rows that have none, and (with `since`,
    the previous run's start less the clock skew) of those whose finding was written since
    where it differs. Returns how many rows were set. `table`: where the run wrote the
    team's rows (`store_table.TeamTable.ranked`)."""
    with connection.cursor() as cur:
        # Table names of our own and a constant expression; the values are parameters.
        cur.execute(
            f"UPDATE {table} r "  # noqa: S608
            f"SET search_group = {_GROUP} FROM findings_finding f "
            "WHERE r.team_id = %s AND r.search_group IS NULL AND f.id = r.finding_id",
            [team_id],
        )
        n = max(cur.rowcount, 0)
        if since is not None:
            cur.execute(
                f"UPDATE {table} r SET search_group = g.grp "  # noqa: S608
                f"FROM (SELECT f.id, {_GROUP} AS grp FROM findings_finding f "
                "WHERE f.team_id = %s AND f.updated_at >= %s) g "
                "WHERE r.team_id = %s AND r.finding_id = g.id "
                "AND r.search_group IS DISTINCT FROM g.grp",
                [team_id, since, team_id],
            )
            n += max(cur.rowcount, 0)
    return n
