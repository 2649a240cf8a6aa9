"""Reads of replay runs; every one is scoped to the principal's teams."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.cluster.models import ReplayRun


def replay_run_list(*, principal: Principal) -> QuerySet[ReplayRun]:
    # The uploaded CSVs can be megabytes; lists never need them.
    return (
        ReplayRun.objects.filter(team_id__in=principal.team_ids)
        .select_related("team")
        .defer("pods_csv", "nodes_csv", "result")
        .order_by("-created_at", "-pk")
    )


def replay_run_get_for_principal(*, principal: Principal, run_id: int) -> ReplayRun:
    """The one access helper for a run: 404 for anything outside the principal's teams."""
    run = (
        ReplayRun.objects.filter(team_id__in=principal.team_ids, pk=run_id)
        .select_related("team")
        .defer("pods_csv", "nodes_csv")
        .first()
    )
    if run is None:
        raise Http404("No such replay run.")
    return run
