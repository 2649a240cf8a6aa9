"""The bucket layout of bench/rank_positions.py: the product's (trustrank/ranking/positions.py,
whose docstring describes it), on the bench's own tables, so the bench measures the very
SQL the ranking store runs.

`rp_ranked` holds the ranked rows (`team_id`, `environment`, `qkey`, `finding_id`), and
`rp_old` / `rp_new` a run's changed rows before and after; the bench fills them itself.
"""

from __future__ import annotations

from typing import Any

import psycopg

from trustrank.ranking import positions

TABLES = positions.Tables(ranked="rp_ranked", bucket="rp_bucket", group="rp_group",
                          old="rp_old", new="rp_new")

GAP, MIN_KEY, MAX_KEY = positions.GAP, positions.MIN_KEY, positions.MAX_KEY
SCHEMA = positions.schema(TABLES)
RANK = positions.rank_sql(TABLES, per_env=False)
ENV_RANK = positions.rank_sql(TABLES, per_env=True)
# A page at an offset; `{columns}` and `{page}` are filled by the bench.
DEEP_PAGE = positions.page_sql(TABLES, columns="{columns}", page="{page}")


def rebuild(conn: psycopg.Connection, *, teams: tuple[int, ...], spacing: int,
            group: int) -> None:
    with conn.transaction(), conn.cursor() as cur:
        for team in teams:
            positions.rebuild(cur, team_id=team, t=TABLES, spacing=spacing, group=group)
    conn.execute("ANALYZE rp_bucket")
    conn.execute("ANALYZE rp_group")


def adjust(conn: psycopg.Connection, params: dict[str, Any], *, spacing: int,
           split_over: float) -> list[tuple[Any, ...]]:
    """The run's counts, inside its transaction (after rp_old and rp_new are filled).
    Returns the buckets that grew past `split_over` × `spacing`, for `split`."""
    with conn.cursor() as cur:
        return positions.adjust_counts(cur, team_id=params["team"], t=TABLES, spacing=spacing,
                                       split_over=split_over)


def split(conn: psycopg.Connection, team: int, full: list[tuple[Any, ...]], *, spacing: int,
          group: int) -> int:
    """Splits each too-full bucket, then any group left with more than 2 × `group`
    buckets. Returns the number of buckets added."""
    with conn.cursor() as cur:
        return positions.split(cur, team, full, t=TABLES, spacing=spacing, group=group)
