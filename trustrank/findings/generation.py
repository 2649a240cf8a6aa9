"""The findings generation of a set of teams: a value that changes whenever a finding of theirs
is written or deleted, a ranking run of theirs ends, or a due date, Jira link or triage policy
is written. What the list keeps (totals, order heads, pages) is keyed by it, so nothing kept
outlives a write (`paging`, `list_cache`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from django.core.signals import request_finished, request_started
from django.db import connection

# Tables whose rows a findings page shows beside the findings' own (due dates, Jira links, the
# policy the due dates follow): any insert, update or delete in them moves the generation.
_SIDE_TABLES = ("findings_findingdue", "jira_jiraissuelink", "findings_triagepolicy")

_memo = threading.local()


def _generation_memo_start(**_: Any) -> None:
    _memo.generations = {}


def _generation_memo_end(**_: Any) -> None:
    _memo.generations = None


# A web request reads the generation once: its totals, its search and its kept page share it.
# Outside a request (a worker's job) every call reads it again.
request_started.connect(_generation_memo_start, dispatch_uid="findings_generation_memo")
request_finished.connect(_generation_memo_end, dispatch_uid="findings_generation_memo_end")


def findings_generation(*, team_ids: Iterable[int]) -> str:
    """Changes whenever a finding of these teams is written or deleted, a ranking run of
    theirs ends, or a due date, Jira link or triage policy is written. Read once per request
    (and per team set) in a web request."""
    ids = sorted({int(t) for t in team_ids})
    if not ids:
        return "none"
    memo = getattr(_memo, "generations", None)
    # Inside a transaction (a test, a job) a write may follow: read it again each time.
    if connection.in_atomic_block:
        memo = None
    key = (connection.alias, tuple(ids))
    if memo is not None and key in memo:
        return str(memo[key])
    with connection.cursor() as cur:
        # One correlated subquery per team: each is a backward walk of (team, updated_at).
        cur.execute(
            "SELECT (SELECT max(m) FROM (SELECT (SELECT max(updated_at) FROM findings_finding"
            "  WHERE team_id = t) AS m FROM unnest(%s::bigint[]) AS t) AS x),"
            " (SELECT max(id) FROM ranking_rankingrun"
            "  WHERE team_id = ANY(%s::bigint[]) AND status = 'done'),"
            # Deletions leave updated_at alone; the table's deletion counter moves instead
            # (flushed by the deleting session within seconds).
            # The counters are read by the functions behind pg_stat_user_tables and
            # pg_stat_xact_user_tables (their n_tup_del, n_tup_ins, n_tup_upd): planning
            # those views (a grouped join over pg_class) cost PostgreSQL ~1.5 ms of CPU in
            # every list request.
            " pg_stat_get_tuples_deleted('findings_finding'::regclass),"
            # The side tables' writes: those flushed, and this transaction's own.
            " (SELECT sum(pg_stat_get_tuples_inserted(r) + pg_stat_get_tuples_updated(r)"
            "  + pg_stat_get_tuples_deleted(r))"
            "  FROM unnest(%s::text[]) AS n, to_regclass(n) AS r),"
            " (SELECT sum(pg_stat_get_xact_tuples_inserted(r)"
            "  + pg_stat_get_xact_tuples_updated(r) + pg_stat_get_xact_tuples_deleted(r))"
            "  FROM unnest(%s::text[]) AS n, to_regclass(n) AS r)",
            [ids, ids, list(_SIDE_TABLES), list(_SIDE_TABLES)],
        )
        updated, run, deleted, side, own = cur.fetchone()
    found = (
        f"{updated.isoformat() if updated else '-'}/{run or 0}/{deleted or 0}"
        f"/{side or 0}.{own or 0}"
    )
    if memo is not None:
        memo[key] = found
    return found
