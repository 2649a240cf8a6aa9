"""Reads of the ranked queue and of ranking runs, scoped to the principal's teams."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet, Subquery
from django.db.models.fields.json import KeyTransform
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankChange, RankingRun, RunStatus, ServiceResults


def priority_list(
    *, principal: Principal, environment: str | None = None, open_only: bool = True
) -> QuerySet[Finding]:
    """Open findings in rank order: the team's queue, or one environment's. The order walks
    the ranked table's (team, rank) or (team, environment, env_rank) index. `open_only=False`
    leaves the states to the caller's filter (PriorityFilterSet defaults to open)."""
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
    # Ranks are unique within a team's queue: with one team the rank alone orders, which
    # lets PostgreSQL read the index in order and stop after a page.
    tiebreak = [] if len(principal.team_ids) == 1 else ["ranked__team_id"]
    if environment is not None:
        return qs.filter(ranked__environment=environment).order_by(
            "ranked__env_rank", *tiebreak
        )
    return qs.order_by("ranked__rank", *tiebreak)


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


def _latest_services_part(team_id: int, path: list[str]) -> Any:
    """The part at `path` of the per-service results of the team's latest finished run:
    only that part of the JSON is sent (one query)."""
    latest = (
        RankingRun.objects.filter(team_id=team_id, status=RunStatus.DONE)
        .order_by("-finished_at", "-pk")
        .values("services_digest")[:1]
    )
    part: Any = "data"
    for key in path:
        part = KeyTransform(key, part)
    return (
        ServiceResults.objects.filter(digest=Subquery(latest))
        .annotate(part=part)
        .values_list("part", flat=True)
        .first()
    )


def service_results(*, team_id: int, environment: str) -> dict[str, dict[str, Any]]:
    """Trust, exposure and path from the internet (with each hop's evidence) of each
    service of one environment, by service name, as the team's latest finished run computed
    them ({} before any run). Only that environment's part of the run's JSON is read."""
    part = _latest_services_part(team_id, [environment])
    return part if isinstance(part, dict) else {}


def service_result(*, team_id: int, environment: str, service: str) -> dict[str, Any] | None:
    """One service's entry of `service_results` (None when the latest run has none)."""
    part = _latest_services_part(team_id, [environment, service])
    return part if isinstance(part, dict) else None


def priority_environments(*, principal: Principal) -> list[str]:
    """Names of the environments of the principal's teams, for the queue's selector."""
    from trustrank.runtime.models import Environment

    return list(
        Environment.objects.filter(team_id__in=principal.team_ids)
        .order_by("name")
        .values_list("name", flat=True)
        .distinct()
    )
