"""Each finding's rank in its team's queue, for an export: counted from the queue key in one
pass, joined to the exported findings.

The stored `rank` and `env_rank` of a ranked row are its ranks as of the run that last wrote
it (trustrank/ranking/ranks.py). Counting one rank from the bucket counts costs ~0.15 ms, so
a million-row export would spend minutes on it; a window over the team's ranked rows in key
order numbers them all in about a second a million (an index walk of (team, qkey, finding)
for the team's rank, one sort for the environments'). The numbering is over the whole
queue, so a filtered export shows each finding's rank in the queue, not its place among the
rows kept: the pass costs the same whatever the filter, which a small filtered export pays
too (about 1 s per million ranked rows of its team; rows of a page use the per-row
functions instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import BigIntegerField, QuerySet
from django.db.models.expressions import Expression
from django.db.models.sql.constants import LOUTER

from trustrank.findings.models import Finding


class QueueRanksJoin:
    """`LEFT JOIN` of the team's queue numbering to the findings: `rank` in key order,
    `env_rank` in key order within each environment. Django joins only relations, so this
    is an alias_map entry of its own (the interface `Join` documents: table_name,
    table_alias, join_type, parent_alias, as_sql, relabeled_clone)."""

    table_name = "queue_ranks"
    nullable = True
    filtered_relation = None

    def __init__(self, team_id: int, parent_alias: str, table_alias: str | None = None) -> None:
        self.team_id = team_id
        self.parent_alias = parent_alias
        self.table_alias = table_alias
        self.join_type = LOUTER

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        qn = compiler.quote_name_unless_alias
        alias, parent = qn(self.table_alias), qn(self.parent_alias)
        # The aliases are Django's, quoted; the team is a parameter.
        return (
            "LEFT OUTER JOIN (SELECT finding_id,"  # noqa: S608
            " row_number() OVER (ORDER BY qkey, finding_id) AS rank,"
            " row_number() OVER (PARTITION BY environment ORDER BY qkey, finding_id)"
            " AS env_rank FROM ranking_rankedfinding WHERE team_id = %s)"
            f" {alias} ON ({alias}.finding_id = {parent}.id)",
            (self.team_id,),
        )

    def relabeled_clone(self, change_map: dict[str, str]) -> QueueRanksJoin:
        return QueueRanksJoin(
            self.team_id, change_map.get(self.parent_alias, self.parent_alias),
            change_map.get(self.table_alias or "", self.table_alias),
        )

    def demote(self) -> QueueRanksJoin:
        return self  # a finding without a ranked row keeps its row: always an outer join

    promote = demote

    @property
    def identity(self) -> tuple[Any, ...]:
        return (self.__class__, self.team_id, self.parent_alias)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QueueRanksJoin) and self.identity == other.identity

    def __hash__(self) -> int:
        return hash(self.identity)


class QueueRank(Expression):
    """One column (`rank` or `env_rank`) of the joined queue numbering."""

    output_field = BigIntegerField()

    def __init__(self, alias: str, column: str) -> None:
        super().__init__()
        self.alias, self.column = alias, column

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        alias = compiler.quote_name_unless_alias(self.alias)
        return f"{alias}.{connection.ops.quote_name(self.column)}", ()

    def relabeled_clone(self, relabels: Mapping[str, str]) -> QueueRank:
        return QueueRank(relabels.get(self.alias, self.alias), self.column)

    def get_group_by_cols(self) -> list[Any]:
        return [self]


def queue_ranks(qs: QuerySet[Finding], *, team_id: int) -> tuple[QueueRank, QueueRank]:
    """The (rank, environment rank) of each finding of `qs` in the team's queue, NULL for
    one not ranked: joins the queue's numbering (QueueRanksJoin) into `qs`."""
    query = qs.query
    alias = query.join(QueueRanksJoin(team_id, query.get_initial_alias()))  # type: ignore[arg-type]
    return QueueRank(alias, "rank"), QueueRank(alias, "env_rank")


def queue_ranks_unread(qs: QuerySet[Any]) -> None:
    """Leaves the numbering out of `qs` (in place), for a query that reads no rank (a
    count): PostgreSQL cannot drop an unread join to a derived table by itself."""
    for alias, join in qs.query.alias_map.items():
        if isinstance(join, QueueRanksJoin):
            qs.query.alias_refcount[alias] = 0
