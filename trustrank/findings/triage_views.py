"""Team-wide triage pages: bulk triage submitted from the findings list (applied at once, or
a job whose progress page the htmx fragment polls) and the team's triage policy (due dates
by ranking decision)."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import principal_for_request
from trustrank.findings import selectors
from trustrank.findings.choices import Justification, TriageState
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.services.bulk import bulk_triage_submit
from trustrank.findings.services.bulk_selection import BulkFilterError, BulkSelectionError
from trustrank.findings.services.due_dates import (
    DECISION_FIELDS,
    triage_policy_for,
    triage_policy_set,
)
from trustrank.findings.services.triage import TriageError, TriageForbidden
from trustrank.jobs.models import JobStatus
from trustrank.lib.numbers import INT_MAX, int_or_none
from trustrank.lib.params import param_rows


@login_required
@require_POST
def finding_bulk_triage_submit(request: HttpRequest) -> HttpResponse:
    """The list's bulk form: the ticked rows (id:version, so a row changed since the page
    showed it is not overwritten) or, with `select_all`, every finding the filter matches."""
    principal = principal_for_request(request)
    post = request.POST
    filter_query = post.get("filter_query", "")
    back = reverse("findings:finding-list") + (f"?{filter_query}" if filter_query else "")
    changes: dict[str, Any] = {}
    for name in ("state", "justification"):
        if post.get(name):
            changes[name] = post[name]
    if post.get("assignee"):
        changes["assignee"] = None if post["assignee"] == "none" else post["assignee"]
    if post.get("clear_due_date"):
        changes["due_date"] = None
    elif post.get("due_date"):
        try:
            changes["due_date"] = date.fromisoformat(post["due_date"])
        except ValueError:
            messages.error(request, "due date: use YYYY-MM-DD")
            return HttpResponseRedirect(back)
    ids: list[int] | None = None
    versions: dict[str, int] = {}
    filter_params: Any = None
    if post.get("select_all"):
        filter_params = QueryDict(filter_query)
    else:
        ids = []
        for item in post.getlist("ids"):
            raw_pk, _, raw_version = item.partition(":")
            pk = int_or_none(raw_pk, minimum=1)
            if pk is not None:
                ids.append(pk)
                version = int_or_none(raw_version, minimum=1, maximum=INT_MAX)
                if version is not None:
                    versions[str(pk)] = version
        if not ids:
            messages.error(request, "Select findings first (or all that match the filter).")
            return HttpResponseRedirect(back)
    try:
        submitted = bulk_triage_submit(
            principal=principal, changes=changes, reason=post.get("reason", ""), ids=ids,
            versions=versions, filter_params=filter_params,
            user_id=principal.user.pk if principal.user is not None else None,
        )
    except TriageForbidden as exc:
        return HttpResponse(str(exc), status=403)
    except (BulkSelectionError, BulkFilterError, TriageError) as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(back)
    if submitted.job is not None:
        return HttpResponseRedirect(
            reverse("findings:bulk-triage-job", args=[submitted.job.pk])
        )
    assert submitted.result is not None
    result = submitted.result
    text = f"Bulk triage: {result.changed} changed, {result.unchanged} already so"
    if result.conflicts:
        text += (
            f"; {len(result.conflicts)} not changed because someone else changed them since "
            "this page showed them: " + ", ".join(f"#{i}" for i in result.conflicts[:20])
        )
        messages.warning(request, text + ".")
    else:
        messages.success(request, text + ".")
    return HttpResponseRedirect(back)


# The findings filters' own labels ("Search", "KEV", "EPSS from"...) for a job's selection.
_FILTER_LABELS = {
    name: str(f.label) for name, f in FindingFilterSet.base_filters.items() if f.label
}


def _bulk_change_rows(changes: dict[str, Any]) -> list[tuple[str, str]]:
    """What a bulk triage sets, as (label, text): states and justifications by their names,
    the assignee by username, a cleared due date as such."""
    from django.contrib.auth import get_user_model

    shown: dict[str, Any] = {}
    for name, value in (changes or {}).items():
        if name == "state":
            value = dict(TriageState.choices).get(value, value)
        elif name == "justification":
            value = dict(Justification.choices).get(value, value)
        elif name == "assignee":
            user = None
            if value is not None and int_or_none(str(value)) is not None:
                user = get_user_model().objects.filter(pk=int(value)).first()
            value = "nobody (unassigned)" if value is None else (
                user.get_username() if user is not None else f"user {value}"
            )
        elif name == "due_date" and value is None:
            value = "cleared"
        shown[name] = value
    return param_rows(shown)


@login_required
def bulk_triage_job_page(request: HttpRequest, job_id: int) -> HttpResponse:
    """A bulk triage job's progress; the htmx fragment polls while it runs."""
    job = selectors.bulk_triage_job_get_for_principal(
        principal=principal_for_request(request), job_id=job_id
    )
    context = {
        "job": job,
        "change_rows": _bulk_change_rows(job.changes),
        "filter_rows": param_rows(job.filter, labels=_FILTER_LABELS) if job.filter else [],
        "running": job.status in (JobStatus.QUEUED, JobStatus.RUNNING),
        "percent": int(100 * job.progress_done / job.progress_total)
        if job.progress_total else 0,
    }
    if getattr(request, "htmx", False):
        return render(request, "findings/_bulk_job_status.html", context)
    return render(request, "findings/bulk_job.html", context)


@login_required
def triage_policy_page(request: HttpRequest) -> HttpResponse:
    """Due dates by ranking decision, per team; team admins change them."""
    principal = principal_for_request(request)
    teams = list(Team.objects.filter(pk__in=principal.team_ids).order_by("name"))
    errors: dict[str, str] = {}
    if request.method == "POST":
        team_id = int_or_none(request.POST.get("team", ""))
        if team_id is None or team_id not in principal.team_ids:
            return HttpResponse("no such team", status=404)
        values: dict[str, int | None] = {}
        for name in DECISION_FIELDS.values():
            raw = request.POST.get(name, "").strip()
            if raw == "":
                values[name] = None
            elif (days := int_or_none(raw, maximum=3650)) is not None:
                values[name] = days
            else:
                errors[f"{team_id}:{name}"] = "a number of days (0–3650), or empty for none"
        if not errors:
            try:
                triage_policy_set(principal=principal, team_id=team_id, values=values)
            except TriageForbidden as exc:
                return HttpResponse(str(exc), status=403)
            messages.success(request, "Triage policy saved; due dates recomputed.")
            return HttpResponseRedirect(reverse("findings:triage-policy"))
    labels = {"immediate_days": "Immediate", "out_of_cycle_days": "Out-of-cycle",
              "scheduled_days": "Scheduled", "defer_days": "Defer"}
    rows = []
    for t in teams:
        policy = triage_policy_for(team_id=t.pk)
        rows.append(
            {
                "team": t,
                "values": [(n, label, getattr(policy, n)) for n, label in labels.items()],
                "can_edit": principal.can(Scope.ADMIN, t.pk),
            }
        )
    return render(
        request, "findings/triage_policy.html", {"rows": rows, "errors": errors},
        status=400 if errors else 200,
    )
