"""Pages: the priorities queue (the home page), its ranking-run status and "Rank now"."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRefresh

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal, principal_for_request
from trustrank.findings.paging import capped_cached_count
from trustrank.lib.numbers import int_or_none
from trustrank.lib.pages import HtmxHttpRequest
from trustrank.ranking import selectors
from trustrank.ranking.filters import PriorityFilterSet
from trustrank.ranking.models import RunStatus
from trustrank.ranking.serializers import rank_fields
from trustrank.ranking.services.requests import ranking_run_request

PAGE_SIZE = 50
PENDING = (RunStatus.QUEUED, RunStatus.RUNNING)


def _runs_context(principal: Principal) -> dict[str, Any]:
    runs = selectors.ranking_runs_latest(principal=principal)
    rank_teams = list(Team.objects.filter(pk__in=principal.teams_with(Scope.TRIAGE)))
    return {
        "runs": runs,
        "pending": any(r.status in PENDING for r in runs),
        "rank_teams": rank_teams,
    }


@login_required
@require_GET
def priorities_page(request: HtmxHttpRequest) -> HttpResponse:
    """The ranked queue, team-wide or one environment's. Keyset pagination on the order
    of the ranked table's indexes (team, qkey, finding) and (team, environment, qkey,
    finding), the cursor holding each team's last (qkey, finding) shown, so page 1 of a
    million ranked findings reads 51 index entries and counts the ranks of 50; the total
    comes from the latest runs' counts unless a filter narrows the queue (then it is
    counted up to a cap)."""
    principal = principal_for_request(request)
    environment = request.GET.get("environment") or None
    queue = selectors.priority_list(
        principal=principal, environment=environment, open_only=False
    )
    filterset = PriorityFilterSet(request.GET, queryset=queue)
    # Invalid values (decision=urgent, kev=maybe) are a form error naming the field, and
    # no rows until they are fixed (the API answers 400).
    valid = filterset.is_valid()
    qs = filterset.qs if valid else queue.none()
    capped = False
    if not valid:
        count = 0
    elif filterset.is_filtered():
        # Ranks and decisions change only with a run, triage only with a write: both move
        # the generation the shared totals are kept under.
        count, capped = capped_cached_count(qs, team_ids=principal.team_ids)
    else:
        count = selectors.priority_count(principal=principal, environment=environment) or 0
    team_ids = sorted(principal.team_ids)
    after = selectors.queue_cursor_parse(request.GET.get("after", ""), team_ids=team_ids)
    found, nxt = selectors.priority_page(
        queue=qs, team_ids=team_ids, environment=environment, after=after, size=PAGE_SIZE
    )
    params = request.GET.copy()
    params.pop("after", None)
    first_query = params.urlencode()
    next_query = ""
    if nxt is not None:
        params["after"] = selectors.queue_cursor_text(nxt)
        next_query = params.urlencode()
    context: dict[str, Any] = {
        "filter": filterset,
        "rows": [(f, rank_fields(f)) for f in found],
        "today": timezone.localdate(),
        "count": count,
        "capped": capped,
        "environment": environment,
        "environments": selectors.priority_environments(principal=principal),
        "next_query": next_query,
        "first_query": first_query,
        "is_first_page": not after,
        **_runs_context(principal),
    }
    if request.htmx:
        return render(request, "ranking/_priorities_table.html", context)
    return render(request, "ranking/priorities.html", context)


@login_required
@require_GET
def priorities_status(request: HtmxHttpRequest) -> HttpResponse:
    """The latest runs' status, polled while one is queued or running; once none is, the
    page reloads so the new queue shows."""
    principal = principal_for_request(request)
    context = _runs_context(principal)
    if request.GET.get("pending") and not context["pending"]:
        return HttpResponseClientRefresh()
    return render(request, "ranking/_run_status.html", context)


@login_required
@require_POST
def priorities_rank_now(request: HtmxHttpRequest) -> HttpResponse:
    """Rank the team's findings now (scope triage): the run starts without the debounce."""
    principal = principal_for_request(request)
    allowed = principal.teams_with(Scope.TRIAGE)
    raw = request.POST.get("team", "")
    team_id = (int_or_none(raw) or -1) if raw else (allowed[0] if len(allowed) == 1 else -1)
    if team_id not in allowed:
        return HttpResponse("ranking needs the triage role in that team", status=403)
    ranking_run_request(
        team_id=team_id, trigger="page", requested_by=principal, delay_seconds=0
    )
    if request.htmx:
        return render(request, "ranking/_run_status.html", _runs_context(principal))
    return HttpResponseRedirect(reverse("ranking:priorities"))

