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



def group_order(tail: tuple[str, ...], *, alias: str = "") -> str:
    """The groups' order, most urgent first: highest decision level, best rank, least key,
    then `tail` (columns of `ordered`, with their direction); `alias.` before each column."""
    at = f"{alias}." if alias else ""
    return ", ".join(
        f"{at}{term}" for term in
        ("level DESC", "order_rank ASC NULLS LAST", "best_key ASC NULLS LAST", *tail)
    )


def group_page_sql(
    *, base: str, keys: tuple[str, ...], level: str, rank_sql: RankSql,
    per_team: tuple[str, ...] = (), merged: tuple[str, ...] = (), tail: tuple[str, ...],
) -> str:
    """The CTEs `per_team`, `ordered` and `page` of a grouping of `base` (aliased b) by the
    columns `keys`: a group's decision level (`level`, SQL over b), least key, team and
    count per team (with `per_team`'s aggregates, `expr AS name`), then per group (with
    `merged`, their aggregates over per_team t), its total of groups and rank, and the page
    (LIMIT %s OFFSET %s) cut in `group_order(tail)`, each group with its `best_rank`.

    The page is cut from an aggregate over the narrow columns; the caller joins a second
    copy of the filtered findings to it for the detail. A materialised CTE read twice would
    spill every wide row to disk instead. A group's rows are kept per team: each team's
    least key gives the rank of that team's part."""
    columns = ", ".join(f"b.{k}" for k in keys)
    per_team_sql = "".join(f", {a}" for a in per_team)
    merged_sql = "".join(f", {a}" for a in merged)
    # Django's own SQL, our columns and constants; the values stay parameters.
    return f"""
        WITH per_team AS (
            SELECT {columns}, b.team_id,
                   max({level}) AS level, min(b.g_key) AS best_key, count(*) AS n
                   {per_team_sql}
            FROM ({base}) b
            GROUP BY {columns}, b.team_id
        ),
        ordered AS (
            SELECT {", ".join(f"t.{k}" for k in keys)}, max(t.level) AS level,
                   sum(t.n)::bigint AS n{merged_sql},
                   min(t.best_key) AS best_key, min(t.team_id) AS team_id,
                   min(CASE WHEN {teams_many()} AND t.best_key IS NOT NULL
                       THEN {rank_of(rank_sql, team="t.team_id", key="t.best_key")} END)
                       AS order_rank,
                   count(*) OVER () AS total
            FROM per_team t
            GROUP BY {", ".join(f"t.{k}" for k in keys)}
        ),
        page AS (
            SELECT o.*, CASE WHEN o.order_rank IS NOT NULL THEN o.order_rank
                             WHEN o.best_key IS NOT NULL
                             THEN {rank_of(rank_sql, team="o.team_id", key="o.best_key")}
                        END AS best_rank
            FROM (
                SELECT * FROM ordered
                ORDER BY {group_order(tail)}
                LIMIT %s OFFSET %s
            ) o
        )"""  # noqa: S608


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
