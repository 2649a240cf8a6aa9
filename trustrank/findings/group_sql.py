"""The SQL the finding groups (groups.py) read: the filtered findings with their queue keys,
and the rank of a group's first finding, counted from its key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import F, QuerySet

from trustrank.findings.models import Finding

# The SQL of the rank, in its team's queue, of the ranked row an alias names (its team_id,
# qkey, finding_id and stored rank): trustrank.ranking.ranks.rank_sql, which the pages pass
# in, as this app sits below ranking.
RankSql = Callable[[str], str]


def rank_of(rank_sql: RankSql, *, team: str, key: str) -> str:
    """The SQL of the rank of the ranked row whose key array (`base_sql`'s g_key, or the
    least of them) is `key`, in team `team`: counted once for this one row."""
    return (
        f"(SELECT {rank_sql('k')} FROM (SELECT {team} AS team_id, {key}[1] AS qkey,"  # noqa: S608
        f" {key}[2] AS finding_id, {key}[3] AS rank) k)"
    )


def teams_many() -> str:
    """SQL: whether the groups' findings span several teams (from `per_team`). One team's
    ranks go in the order of their keys, so its groups are ordered by their least key and a
    rank is counted only for the page; across teams the key does not order the ranks, so a
    rank is counted for each group's least key in each team (a few per group)."""
    return "(SELECT count(DISTINCT team_id) > 1 FROM per_team)"



def _plain(qs: QuerySet[Finding]) -> QuerySet[Finding]:
    """The queryset without the DISTINCT django-filter's multiple-choice filters add: every
    finding filter joins to-one relations only (ranked is one-to-one), so no row repeats, and
    a DISTINCT over the wide rows would stop PostgreSQL flattening the subquery (measured:
    a hash aggregate of every filtered finding, 3 s at a million). Should a filter ever join
    a to-many relation, the rows are de-duplicated by id instead."""
    qs = qs.order_by()
    to_many = any(
        getattr(getattr(join, "join_field", None), "one_to_many", False)
        or getattr(getattr(join, "join_field", None), "many_to_many", False)
        for join in qs.query.alias_map.values()
    )
    if to_many:
        return Finding.objects.filter(pk__in=qs.values("pk"))
    plain = qs.all()
    plain.query.distinct = False
    plain.query.distinct_fields = ()
    return plain


def base_sql(qs: QuerySet[Finding]) -> tuple[str, tuple[Any, ...]]:
    """The filtered findings as a subquery of the columns the groupings read, with their
    queue key as an array (qkey, finding id, stored rank; NULL when unranked): the least
    array is the finding first in the team's queue, whose rank the group shows.

    The rank is joined here on (finding, team) rather than through the ORM's `ranked__`: with
    the team in the join, PostgreSQL reads only that team's ranks through their
    (team, qkey, finding) index instead of hashing the whole ranks table, which other teams
    may fill."""
    values = _plain(qs).values(
        "id",
        "team_id",
        "ecosystem",
        "package_name",
        "component_name",
        "component_version",
        "vuln_id",
        "cve_id",
        "severity",
        "state",
        "project_id",
        "in_kev",
        g_fixed=F("fixed_versions"),
        g_aliases=F("aliases"),
        g_title=F("title"),
    )
    sql, params = values.query.sql_with_params()
    # Ranks through the finding's own relation (ranking's RankedFinding points at it): this
    # app sits below ranking and does not import it.
    ranks = Finding._meta.get_field("ranked").related_model._meta.db_table
    wrapped = (
        "SELECT f.*, CASE WHEN r.finding_id IS NOT NULL THEN"  # noqa: S608
        " ARRAY[r.qkey, r.finding_id, r.rank::bigint] END AS g_key,"
        f" r.decision AS g_decision FROM ({sql}) f "
        f"LEFT JOIN {ranks} r ON r.finding_id = f.id AND r.team_id = f.team_id"
    )
    return wrapped, tuple(params)
