"""Reads of the ranked queue and of ranking runs, scoped to the principal's teams."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.findings.models import OPEN_STATES, Finding
from trustrank.ranking.models import RankChange, RankingRun, RunStatus


def priority_list(*, principal: Principal, environment: str | None = None) -> QuerySet[Finding]:
    """Open findings in rank order: the team's queue, or one environment's. The order walks
    the ranked table's (team, rank) or (team, environment, env_rank) index."""
    qs = Finding.objects.filter(
        ranked__team_id__in=principal.team_ids, state__in=OPEN_STATES
    ).select_related("project", "project_version", "ranked__context", "team")
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
    return list(
        RankChange.objects.filter(finding=finding).order_by("-at", "-pk")[:limit]
    )[::-1]
