"""Pages: the findings list (keyset-paginated, htmx table fragment, the bulk triage form) and
a finding's page with its evidence, history, comments and triage form (version-checked: a
conflict shows the other analyst's change and offers to re-apply). Bulk triage jobs and the
team's triage policy are in triage_views.py."""

from __future__ import annotations

import math
from datetime import date
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from trustrank.accounts.models import Membership, Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.findings import selectors
from trustrank.findings.apis import list_rows
from trustrank.findings.choices import (
    OPEN_STATES,
    VEX_RESPONSES,
    FindingKind,
    Justification,
    TriageState,
)
from trustrank.findings.filters import ORDERINGS, FindingFilterSet, findings_ordered
from trustrank.findings.list_cache import list_cache_get, list_cache_key, list_cache_set
from trustrank.findings.paging import (
    SEARCH_SORT_MAX,
    SortedMatches,
    capped_cached_count,
    rows_by_id,
)
from trustrank.findings.serializers import page_rows_for_ids
from trustrank.findings.services.triage import (
    UNSET,
    TriageConflict,
    TriageError,
    TriageForbidden,
    finding_comment_add,
    finding_triage,
)
from trustrank.findings.table import finding_rows_html
from trustrank.findings.totals import list_total
from trustrank.inventory.models import Project
from trustrank.lib.numbers import INT_MAX, int_or_none
from trustrank.ranking.explain import finding_rank_explain
from trustrank.ranking.templatetags.rank_tags import rank_why
from trustrank.vulns import selectors as vuln_selectors

PAGE_SIZE = 50
# What the list says about its order, by `ordering` (filters.ORDERINGS).
ORDER_TEXT = {
    "rank": "most urgent first: by the latest ranking run's rank (the SSVC decision, then the "
            "contextual score), the findings it has not ranked after, by baseline priority",
    "-rank": "least urgent first, by the latest ranking run's rank",
    "baseline": "highest baseline priority first",
    "due": "soonest due date first",
}
PROJECT_CHOICES_MAX = 300


def _offset_cursor(value: str) -> int:
    """`@<n>`: the position of a page in an order no index walks by key."""
    if not value.startswith("@"):
        return 0
    return min(int_or_none(value[1:]) or 0, 10_000_000)


def _cursor(value: str) -> tuple[float, int] | None:
    prio, _, raw_pk = value.partition(":")
    pk = int_or_none(raw_pk)
    try:
        number = float(prio)
    except ValueError:
        return None
    return (number, pk) if pk is not None and math.isfinite(number) else None


@login_required
def finding_list_page(request: HttpRequest) -> HttpResponse:
    """The contextual order by default (the latest ranking run's ranks, then the unranked by
    baseline priority), read from the rank index a page at a time (rank_rows.RankOrderedRows);
    `ordering=baseline` pages by key on (baseline_priority, id), the index's order, so page
    1,000 costs what page 1 costs. The total is counted up to a cap, never over the table."""
    principal = principal_for_request(request)
    team_ids = principal.team_ids
    params = request.GET.copy()
    params.pop("after", None)
    base_query = params.urlencode()
    can_triage = principal.can(Scope.TRIAGE)
    htmx = bool(getattr(request, "htmx", False))
    query = request.META.get("QUERY_STRING", "")
    built: list[FindingFilterSet] = []

    def checked() -> FindingFilterSet:
        # Built only when something is rendered: a kept table and form need no FilterSet
        # (~3 ms of deep copies), as only a valid filter's are kept.
        if not built:
            built.append(FindingFilterSet(
                request.GET, queryset=selectors.finding_list(principal=principal), request=request
            ))
        return built[0]

    # The table (totals, rows, pager) depends on the findings, the query and who may triage:
    # kept under the teams' findings generation (list_cache.py). A bad filter is not kept.
    viewer = (can_triage, htmx, request.user.pk if "assignee" in request.GET else None)
    key = list_cache_key(what="page", team_ids=team_ids, query=query, viewer=viewer)
    table = list_cache_get(key)
    if table is None:
        filterset = checked()
        ordering = filterset.ordering_value()
        table_context = _table_context(request, filterset, team_ids=team_ids, ordering=ordering)
        table = render_to_string(
            "findings/_findings_table.html",
            {
                **table_context,
                "rows": finding_rows_html(
                    table_context["findings"], can_triage=can_triage, rank_why=rank_why
                ),
                "filter": filterset,
                "first_query": base_query,
                "ordering": ordering,
                "order_text": ORDER_TEXT.get(ordering, dict(ORDERINGS).get(ordering, ordering)),
                "can_triage": can_triage,
            },
            request=request,
        )
        if filterset.is_valid():
            list_cache_set(key, table)
    if htmx:
        return HttpResponse(table)
    members = _members(team_ids)
    projects = project_choices(team_ids)
    # The filter form shows the query's values and the teams' projects and members as
    # choices: kept by exactly those (its 20 widgets' templates cost ~8 ms to render).
    form_key = list_cache_key(what="filter-form", team_ids=team_ids, query=query, viewer=(
        can_triage, projects, [(u.pk, u.get_username()) for u in members],
    ), by_generation=False)
    filter_form = list_cache_get(form_key)
    if filter_form is None:
        filterset = checked()
        _filter_form_choices(filterset, projects=projects, members=members)
        filter_form = render_to_string(
            "findings/_filter_form.html", {"filter": filterset, "can_triage": can_triage},
            request=request,
        )
        if filterset.is_valid():
            list_cache_set(form_key, filter_form)
    context: dict[str, Any] = {
        "filter_form": mark_safe(filter_form),  # noqa: S308 - our own template's, escaped there
        "table": mark_safe(table),  # noqa: S308 - our own template's output, escaped there
        "first_query": base_query,
        "can_triage": can_triage,
        "states": TriageState.choices,
        "justifications": Justification.choices,
        # The assignee filter's members (the principal's teams) serve when they are the same.
        "members": (
            members
            if set(principal.teams_with(Scope.TRIAGE)) == set(principal.team_ids)
            else _members(principal.teams_with(Scope.TRIAGE))
        ),
    }
    return render(request, "findings/finding_list.html", context)


def _table_context(
    request: HttpRequest, filterset: FindingFilterSet, *, team_ids: Any, ordering: str
) -> dict[str, Any]:
    """Totals, rows and pager of the list's table."""
    # A bad value is a form error on the page (the API answers 400): no rows until it is
    # fixed, rather than a list that silently ignores what was asked.
    qs = filterset.qs if filterset.is_valid() else filterset.queryset.none()
    if ordering != "baseline":
        qs = findings_ordered(qs, ordering)
    # A search's matches are found, sorted and kept with their total; a broad search pages
    # like the list, its total SEARCH_SORT_MAX; the contextual order reads the rank index.
    found = list_rows(qs, team_ids=team_ids, ordering=ordering, search=filterset.searches(),
                      load=page_rows_for_ids, spellings=filterset.alone_spellings())
    matches, broad = found.matches, found.broad
    count_exact = True
    if matches is not None:
        count, capped = matches.count(), False
    elif broad:
        count, capped = SEARCH_SORT_MAX, True
    else:
        # Exact up to TRUSTRANK_FINDINGS_EXACT_COUNT_MAX, "about N" beyond (totals.py).
        total = list_total(qs, team_ids=team_ids)
        count, capped, count_exact = total.n, False, total.exact
    overdue_count, overdue_capped = capped_cached_count(
        qs.filter(state__in=OPEN_STATES, due__due_date__lt=timezone.localdate()), team_ids=team_ids
    )
    raw_after = request.GET.get("after", "")
    if ordering != "baseline":
        # Other orders than the baseline index's page by position; the contextual order reads
        # the rank index (rank_rows.RankOrderedRows), so a page costs its depth, not a team sort.
        offset = _offset_cursor(raw_after)
        window = slice(offset, offset + PAGE_SIZE + 1)
        if matches is not None:
            rows = page_rows_for_ids(qs, matches.ids(window))
        elif found.ranked is not None:
            rows = found.ranked[window]
        else:
            rows = rows_by_id(qs, window, load=page_rows_for_ids)
        next_after = f"@{offset + PAGE_SIZE}"
        is_first = offset == 0
    else:
        after = _cursor(raw_after)
        page_qs = qs
        if after is not None:
            prio, pk = after
            # A row comparison, not (a < x OR a = x AND b < y): PostgreSQL turns it into one
            # index range on (team, baseline_priority, id), so a deep page starts where it
            # should.
            page_qs = qs.filter(
                RawSQL(
                    '("findings_finding"."baseline_priority", "findings_finding"."id") < (%s, %s)',
                    (prio, pk),
                    output_field=BooleanField(),
                )
            )
        ids = None
        if matches is not None:
            ids = (
                matches.ids(slice(0, PAGE_SIZE + 1)) if after is None
                else matches.ids_after(after[1], PAGE_SIZE + 1)
            )
            if ids is None:  # past the kept head: this page's matches, sorted
                ids = SortedMatches(page_qs, team_ids=team_ids).query_ids(slice(0, PAGE_SIZE + 1))
        rows = (
            rows_by_id(page_qs, slice(0, PAGE_SIZE + 1), load=page_rows_for_ids)
            if ids is None else page_rows_for_ids(page_qs, ids)
        )
        next_after = f"{rows[PAGE_SIZE - 1].baseline_priority!r}:{rows[PAGE_SIZE - 1].pk}" if (
            len(rows) > PAGE_SIZE
        ) else ""
        is_first = after is None
    has_next = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    params = request.GET.copy()
    params.pop("after", None)
    next_query = ""
    if has_next:
        params["after"] = next_after
        next_query = params.urlencode()
    return {
        "findings": rows,
        "count": count,
        "capped": capped,
        "count_exact": count_exact,
        "overdue_count": overdue_count,
        "overdue_capped": overdue_capped,
        "next_query": next_query,
        "is_first_page": is_first,
        "today": timezone.localdate(),
    }


def _members(team_ids: list[int] | Any) -> list[Any]:
    """Users who may be assigned findings of these teams (one row per user)."""
    from django.contrib.auth import get_user_model

    return list(
        get_user_model()
        .objects.filter(pk__in=Membership.objects.filter(team_id__in=list(team_ids))
                        .values("user_id"))
        .order_by("username")
    )


def project_choices(team_ids: list[int] | Any) -> list[tuple[int, str]]:
    """The teams' projects (id, name) for the project filter, at most PROJECT_CHOICES_MAX + 1
    (more than the max: the filter takes an id). The list page's and the groups page's."""
    return list(
        Project.objects.filter(team_id__in=list(team_ids))
        .order_by("name")
        .values_list("pk", "name")[: PROJECT_CHOICES_MAX + 1]
    )


def _filter_form_choices(
    filterset: FindingFilterSet, *, projects: list[tuple[int, str]], members: list[Any]
) -> None:
    """Selects for the numeric filters that name the teams' projects and members (the
    values stay numbers, validated by the shared FilterSet)."""
    from django import forms

    form = filterset.form
    if len(projects) <= PROJECT_CHOICES_MAX:
        form.fields["project"].widget = forms.Select(choices=[("", "All"), *projects])
    else:
        # Thousands of options would weigh more than the page's rows; the project page links
        # here with ?project=<id>, and the field takes an id.
        form.fields["project"].widget = forms.NumberInput(attrs={"placeholder": "project id"})
    form.fields["assignee"].widget = forms.Select(
        choices=[("", "Anyone"), ("me", "Me"), ("none", "Unassigned"),
                 *((u.pk, u.get_username()) for u in members)]
    )
    form.fields["due_before"].widget = forms.DateInput(attrs={"type": "date"})
    for name in ("kind", "severity", "state", "match_status", "decision"):
        form.fields[name].widget.attrs.update({"size": "3"})


@login_required
def finding_page(request: HttpRequest, finding_id: int) -> HttpResponse:
    return _finding_page_render(request, finding_id=finding_id)


def _finding_page_render(
    request: HttpRequest, *, finding_id: int, conflict: dict[str, Any] | None = None,
    status: int = 200,
) -> HttpResponse:
    principal = principal_for_request(request)
    finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
    is_vulnerability = finding.kind == FindingKind.VULNERABILITY
    audit = list(selectors.finding_audit_trail(finding=finding))
    usernames = selectors.audit_usernames(events=audit)
    for e in audit:
        after = e.after if isinstance(e.after, dict) else {}
        before = e.before if isinstance(e.before, dict) else {}
        e.assignee_changed = (  # type: ignore[attr-defined]
            "version" in after and before.get("assignee") != after.get("assignee")
        )
        e.assignee_name = usernames.get(  # type: ignore[attr-defined]
            str(after.get("assignee")), "nobody"
        )
    advisories = (
        vuln_selectors.advisories_for_finding(finding=finding) if is_vulnerability else []
    )
    context = {
        "finding": finding,
        "advisories": [
            {
                "advisory": a,
                "affected": vuln_selectors.affected_for_package(
                    advisory=a, ecosystem=finding.ecosystem, package_name=finding.package_name
                ),
            }
            for a in advisories
        ],
        "kev": vuln_selectors.kev_entry_for(cve_id=finding.cve_id) if is_vulnerability else None,
        "epss_history": (
            vuln_selectors.epss_history_for(cve_id=finding.cve_id) if is_vulnerability else []
        ),
        "audit": audit,
        "comments": selectors.finding_comments(finding=finding),
        "can_triage": principal.can("triage", finding.team_id),
        "states": TriageState.choices,
        "justifications": Justification.choices,
        "responses": VEX_RESPONSES,
        "ranking": finding_rank_explain(finding=finding),
        "members": _members([finding.team_id]),
        "conflict": conflict,
        "today": timezone.localdate(),
        # The Jira issues opened for it (trustrank/jira), oldest first.
        "jira_links": list(finding.jira_links.all()),
    }
    return render(request, "findings/finding.html", context, status=status)


@login_required
@require_POST
def finding_triage_submit(request: HttpRequest, finding_id: int) -> HttpResponse:
    """The finding page's form: carries the version it showed; if someone changed the finding
    since, the page comes back (409) with their change and a button to re-apply this one."""
    principal = principal_for_request(request)
    finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
    post = request.POST
    raw_version = post.get("version", "")
    expected = int_or_none(raw_version, minimum=1, maximum=INT_MAX)
    assignee: Any = UNSET
    if "assignee" in post:
        assignee = post.get("assignee") or None
    due: Any = UNSET
    if "due_date" in post:
        raw_due = post.get("due_date", "").strip()
        # Unchanged and never set by hand: leave the policy's date alone.
        unchanged = raw_due == (finding.due_date.isoformat() if finding.due_date else "")
        if not (unchanged and not finding.due_date_manual):
            try:
                due = date.fromisoformat(raw_due) if raw_due else None
            except ValueError:
                messages.error(request, "due date: use YYYY-MM-DD")
                return HttpResponseRedirect(reverse("findings:finding", args=[finding.pk]))
    mine: dict[str, Any] = {
        "state": post.get("state", ""),
        "justification": post.get("justification", ""),
        "response": post.getlist("response"),
        "detail": post.get("detail", ""),
        "assignee": post.get("assignee", ""),
        "due_date": post.get("due_date", ""),
        "reason": post.get("reason", ""),
    }
    try:
        finding_triage(
            finding=finding,
            principal=principal,
            state=mine["state"],
            justification=mine["justification"],
            response=mine["response"],
            detail=mine["detail"],
            reason=mine["reason"],
            expected_version=expected,
            assignee=assignee,
            due_date=due,
        )
        messages.success(request, "Triage saved.")
    except TriageForbidden as exc:
        return HttpResponse(str(exc), status=403)
    except TriageConflict as exc:
        conflict = {
            "changes": selectors.finding_changes_since(
                finding=exc.finding, version=exc.expected_version
            ),
            "mine": mine,
            "expected_version": exc.expected_version,
        }
        return _finding_page_render(
            request, finding_id=finding.pk, conflict=conflict, status=409
        )
    except TriageError as exc:
        messages.error(request, str(exc))
    return HttpResponseRedirect(reverse("findings:finding", args=[finding.pk]))


@login_required
@require_POST
def finding_comment_submit(request: HttpRequest, finding_id: int) -> HttpResponse:
    principal = principal_for_request(request)
    finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
    try:
        finding_comment_add(finding=finding, principal=principal, body=request.POST.get("body", ""))
    except TriageForbidden as exc:
        return HttpResponse(str(exc), status=403)
    except TriageError as exc:
        messages.error(request, str(exc))
    return HttpResponseRedirect(reverse("findings:finding", args=[finding.pk]))
