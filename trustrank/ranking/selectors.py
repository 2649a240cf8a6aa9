"""Reads of the ranked queue and of ranking runs, scoped to the principal's teams."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connection
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.models import Finding
from trustrank.findings.ranked import ENV_RANK_ANNOTATION, RANK_ANNOTATION
from trustrank.ranking import ranks
from trustrank.ranking.models import RankChange, RankingRun, RunStatus, ServiceResultRow


def priority_list(
    *, principal: Principal, environment: str | None = None, open_only: bool = True
) -> QuerySet[Finding]:
    """Open findings of the principal's teams in each team's queue order, the team's or one
    environment's: by the ranked row's (qkey, finding), the order of its (team, qkey,
    finding) and (team, environment, qkey, finding) indexes. With several teams the rows
    are ordered team by team; `priority_page` and `PriorityQueue` give the merged order.
    `open_only=False` leaves the states to the caller's filter (PriorityFilterSet defaults
    to open)."""
    qs = Finding.objects.filter(ranked__team_id__in=principal.team_ids)
    if open_only:
        qs = qs.filter(state__in=OPEN_STATES)
    # Only the ranked row is joined (the order walks its index); the rest of a page's rows
    # come by id, a query each. Joined all together, the seven-table statement took
    # PostgreSQL 11-75 ms to plan (the findings table has thirty indexes to weigh) against
    # 2 ms to run, on every page; the lean join plans in half a millisecond.
    qs = qs.select_related("ranked").prefetch_related(
        "project", "project_version", "ranked__context", "team", "assignee", "due"
    )
    if environment is not None:
        qs = qs.filter(ranked__environment=environment)
    # With one team the key alone orders, which lets PostgreSQL read the index in order and
    # stop after a page.
    team = [] if len(principal.team_ids) == 1 else ["ranked__team_id"]
    return qs.order_by(*team, "ranked__qkey", "ranked__finding_id")


def ranks_attach(findings: list[Finding]) -> None:
    """Set the current ranks (`Finding.rank` / `env_rank` read them) on findings already
    fetched, counted for them all at once (ranks.ranks_of; None for the unranked)."""
    _ranks_set(findings, ranks.ranks_of((f.pk for f in findings),
                                        teams={f.team_id for f in findings}))


def _ranks_set(findings: list[Finding], counted: dict[int, tuple[int, int]]) -> None:
    for f in findings:
        rank, env = counted.get(f.pk, (None, None))
        setattr(f, RANK_ANNOTATION, rank)
        setattr(f, ENV_RANK_ANNOTATION, env)


# A page's position in the queue: per team, the (qkey, finding id) of the last row shown.
QueueCursor = dict[int, tuple[int, int]]


def _after_key(key: tuple[int, int]) -> RawSQL:
    """Rows after `key` in a team's queue, as one row comparison: PostgreSQL continues the
    (team, [environment,] qkey, finding) index range where the previous page ended."""
    return RawSQL(
        '("ranking_rankedfinding"."qkey", "ranking_rankedfinding"."finding_id") > (%s, %s)',
        key, output_field=BooleanField(),
    )


# A team's row in a merge: (team, qkey, finding id).
Head = tuple[int, int, int]


def _merged(
    heads: list[Head], *, environment: str | None
) -> tuple[list[Head], dict[int, tuple[int, int]]]:
    """Rows of several teams' queues in the merged order, by rank (the environment's when
    one is shown), then team, then finding, as one queue; and their counted ranks."""
    counted = ranks.ranks_of((fid for _t, _q, fid in heads), teams={t for t, _q, _f in heads})
    at = 1 if environment is not None else 0
    rows = [h for h in heads if h[2] in counted]
    rows.sort(key=lambda h: (counted[h[2]][at], h[0], h[2]))
    return rows, counted


def _fetch_in_order(
    queue: QuerySet[Finding], heads: list[Head], counted: dict[int, tuple[int, int]]
) -> list[Finding]:
    """The findings of `heads`, in their order, with their counted ranks set."""
    by_id = {f.pk: f for f in queue.filter(pk__in=[fid for _t, _q, fid in heads]).order_by()}
    rows = [by_id[fid] for _t, _q, fid in heads if fid in by_id]
    _ranks_set(rows, counted)
    return rows


def priority_page(
    *, queue: QuerySet[Finding], team_ids: list[int], environment: str | None,
    after: QueueCursor, size: int,
) -> tuple[list[Finding], QueueCursor | None]:
    """One page of `priority_list`'s queue after the cursor, with the rows' current ranks,
    and the cursor of the next page (None after the last).

    One team: the page is read along the key index. Several teams: the merged order
    restricted to one team is that team's key order, so the next `size` rows are among the
    next `size` + 1 of each team; those heads (ids and keys, a query a team) get their
    ranks counted (teams × (size + 1) rows, about 0.15 ms each), are merged, and the page's
    findings are fetched by id."""
    if len(team_ids) == 1:
        qs = queue
        if team_ids[0] in after:
            qs = qs.filter(_after_key(after[team_ids[0]]))
        found = list(qs[: size + 1])
        more, rows = len(found) > size, found[:size]
        shown = [(team_ids[0], f.ranked.qkey, f.pk) for f in rows]
        ranks_attach(rows)
    else:
        heads: list[Head] = []
        for team_id in team_ids:
            qs = queue.filter(ranked__team_id=team_id)
            if team_id in after:
                qs = qs.filter(_after_key(after[team_id]))
            heads += [(team_id, q, fid) for q, fid in
                      qs.values_list("ranked__qkey", "ranked__finding_id")[: size + 1]]
        merged, counted = _merged(heads, environment=environment)
        more, shown = len(merged) > size, merged[:size]
        rows = _fetch_in_order(queue, shown, counted)
    if not more:
        return rows, None
    nxt = dict(after)
    for team_id, qkey, fid in shown:
        nxt[team_id] = (qkey, fid)
    return rows, nxt


def queue_cursor_parse(value: str, *, team_ids: list[int]) -> QueueCursor:
    """A cursor from `queue_cursor_text`; {} (the first page) when it is not one."""
    out: QueueCursor = {}
    for part in value.split(","):
        try:
            team_id, qkey, fid = (int(v) for v in part.split(":"))
        except ValueError:
            return {}
        if team_id in team_ids:
            out[team_id] = (qkey, fid)
    return out


def queue_cursor_text(cursor: QueueCursor) -> str:
    """`team:qkey:finding` of each team's last row shown, comma-separated."""
    return ",".join(f"{t}:{q}:{fid}" for t, (q, fid) in sorted(cursor.items()))


class PriorityQueue:
    """`priority_list`'s queue as a sequence in the merged order, for page-number
    pagination (Django's Paginator slices it): a slice's rows carry their current ranks.

    One team: the slice is an OFFSET along the key index, and only its rows' ranks are
    counted. Several teams: each team's first `stop` rows (ids and keys) get their ranks
    counted and are merged, so page n costs teams × n × page size rank counts (about
    0.15 ms each): fine for the first pages, slow deep in a large queue."""

    ordered = True

    def __init__(self, queue: QuerySet[Finding], *, team_ids: list[int],
                 environment: str | None) -> None:
        self.queue = queue
        self.team_ids = team_ids
        self.environment = environment

    def count(self) -> int:
        return self.queue.count()

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, part: slice) -> list[Finding]:
        start, stop = part.start or 0, part.stop
        if len(self.team_ids) == 1:
            rows = list(self.queue[start:stop])
            ranks_attach(rows)
            return rows
        heads: list[Head] = []
        for team_id in self.team_ids:
            qs = self.queue.filter(ranked__team_id=team_id).values_list(
                "ranked__qkey", "ranked__finding_id")
            heads += [(team_id, q, fid) for q, fid in (qs[:stop] if stop is not None else qs)]
        merged, counted = _merged(heads, environment=self.environment)
        return _fetch_in_order(self.queue, merged[start:stop], counted)


def priority_count(*, principal: Principal, environment: str | None = None) -> int | None:
    """The queue's length from the latest runs' counts (no COUNT over a million rows);
    None when a team has no finished run yet."""
    total = 0
    for team_id in principal.team_ids:
        run = (
            RankingRun.objects.filter(team_id=team_id, status=RunStatus.DONE)
            .order_by("-finished_at", "-pk")
            .only("counts")
            .first()
        )
        if run is None:
            continue
        counts = run.counts or {}
        if environment is None:
            total += int(counts.get("findings", 0))
        else:
            total += int((counts.get("by_environment") or {}).get(environment, 0))
    return total


def ranking_run_get_for_principal(*, principal: Principal, run_id: Any) -> RankingRun:
    try:
        pk = int(run_id)
    except (TypeError, ValueError) as exc:
        raise Http404("no such ranking run") from exc
    run = RankingRun.objects.filter(pk=pk, team_id__in=principal.team_ids).first()
    if run is None:
        raise Http404("no such ranking run")
    return run


def ranking_run_list(*, principal: Principal) -> QuerySet[RankingRun]:
    return RankingRun.objects.filter(team_id__in=principal.team_ids).order_by("-created_at", "-pk")


def rank_history(*, finding: Finding, limit: int = 200) -> list[RankChange]:
    """The finding's ranks over time: every recorded move, and its place since the run that
    first ranked it (a first run records no moves, so that point comes from the queue)."""
    changes = list(
        RankChange.objects.filter(finding=finding).order_by("-at", "-pk")[:limit]
    )[::-1]
    ranked = finding.ranked_or_none
    if ranked is not None and (not changes or changes[0].previous_rank is not None):
        first = (
            RankingRun.objects.filter(team_id=finding.team_id, status=RunStatus.DONE)
            .order_by("finished_at", "pk")
            .only("finished_at")
            .first()
        )
        entered = changes[0] if changes else None
        start = RankChange(
            finding=finding,
            rank=entered.previous_rank if entered else ranked.rank,
            score=entered.previous_score if entered else ranked.score,
            decision=(entered.previous_decision if entered else ranked.decision) or "",
            at=(first.finished_at if first and first.finished_at else finding.first_seen),
        )
        if start.rank is not None:
            changes.insert(0, start)
    return changes


def ranking_runs_latest(*, principal: Principal) -> list[RankingRun]:
    """Each of the principal's teams' most recent run, whatever its status (one query)."""
    return list(
        RankingRun.objects.filter(team_id__in=principal.team_ids)
        .select_related("team")
        .defer("weights")
        .order_by("team_id", "-created_at", "-pk")
        .distinct("team_id")
    )


def ranking_run_latest_done(*, team_id: int) -> RankingRun | None:
    return (
        RankingRun.objects.filter(team_id=team_id, status=RunStatus.DONE)
        .defer("weights")
        .order_by("-finished_at", "-pk")
        .first()
    )


def _latest_digest_sql(team: str, done: str) -> str:
    """SQL of the per-service results digest of a team's latest finished run, its team and
    the done status given as the placeholders `team` and `done`."""
    return (
        f"SELECT services_digest FROM {RankingRun._meta.db_table} WHERE team_id = {team}"  # noqa: S608
        f" AND status = {done} ORDER BY finished_at DESC, id DESC LIMIT 1"
    )


_ROWS = ServiceResultRow._meta.db_table


def service_results_named(
    *, team_id: int, environment: str, names: Iterable[str]
) -> dict[str, dict[str, Any]] | None:
    """Trust, exposure and path from the internet (with each hop's evidence) of the services
    `names` of one environment (those the run has), by name, as the team's latest finished
    run computed them; None when that run has no service in the environment (or there is
    none). One statement: the page's own rows by their key, and whether the environment
    has any (a row without a name)."""
    sql = f"""
        WITH d AS MATERIALIZED ({_latest_digest_sql("%(team)s", "%(done)s")})
        SELECT NULL, NULL WHERE EXISTS (
            SELECT 1 FROM {_ROWS} r WHERE r.digest = (SELECT * FROM d)
               AND r.environment = %(env)s)
        UNION ALL
        SELECT r.name, r.data FROM {_ROWS} r
         WHERE r.digest = (SELECT * FROM d) AND r.environment = %(env)s
           AND r.name = ANY(%(names)s)
    """  # noqa: S608 (our own table names; the values are parameters)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"env": environment, "names": sorted(set(names)), "team": team_id,
                             "done": RunStatus.DONE})
        rows = cursor.fetchall()
    # The environment's row is the one without a name (a service's name is never NULL).
    if all(key is not None for key, _ in rows):
        return None
    return {key: json.loads(value) if isinstance(value, str) else value
            for key, value in rows if key is not None}


def service_exposure_condition(
    *, team_id: int, environment: str
) -> Callable[[str, str, bool], RawSQL]:
    """For the runtime filters (`ExposureCondition`): the SQL condition that the service
    named by a column's value has, in the team's latest finished run, the exposure given
    (`other`: an exposure, and not that one). Read in PostgreSQL from the run's rows of
    the environment (an index by exposure); none when there is no run."""

    def condition(column: str, exposure: str, other: bool) -> RawSQL:
        test = "r.exposure NOT IN ('', %s)" if other else "r.exposure = %s"
        return RawSQL(  # noqa: S611 (our own tables and the column a FilterSet names)
            f"""{column} IN (
                SELECT r.name FROM {_ROWS} r
                 WHERE r.digest = ({_latest_digest_sql("%s", "%s")})
                   AND r.environment = %s AND {test})""",  # noqa: S608 (values are params)
            [team_id, RunStatus.DONE, environment, exposure],
            output_field=BooleanField(),
        )

    return condition


def service_result(*, team_id: int, environment: str, service: str) -> dict[str, Any] | None:
    """One service's entry of `service_results_named` (None when the latest run has none)."""
    named = service_results_named(team_id=team_id, environment=environment, names=[service])
    return (named or {}).get(service)


def priority_environments(*, principal: Principal) -> list[str]:
    """Names of the environments of the principal's teams, for the queue's selector."""
    from trustrank.runtime.models import Environment

    return list(
        Environment.objects.filter(team_id__in=principal.team_ids)
        .order_by("name")
        .values_list("name", flat=True)
        .distinct()
    )
