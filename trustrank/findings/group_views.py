"""The findings groups page: /findings/groups/?by=fix|vulnerability with the findings list's
filters."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render

from trustrank.accounts.principal import principal_for_request
from trustrank.findings.choices import Severity
from trustrank.findings.group_apis import PageParamError, groups_filterset, page_request
from trustrank.findings.groups import GROUP_BY_CHOICES, finding_groups
from trustrank.findings.views import PROJECT_CHOICES_MAX, project_choices
from trustrank.lib.pages import HtmxHttpRequest
from trustrank.ranking.ranks import rank_sql
from trustrank.risk.inputs import DECISIONS

PAGE_SIZE = 50


class _GroupPages(list[int]):
    """What Paginator needs to number pages: a length, without the rows."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self._count = count

    def __len__(self) -> int:
        return self._count


@login_required
def finding_groups_page(request: HtmxHttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    by = request.GET.get("by") or "fix"
    projects = project_choices(principal.team_ids)
    context: dict[str, Any] = {
        "by": by,
        "choices": GROUP_BY_CHOICES,
        # A select of the projects, unless there are too many for one (twenty thousand
        # options weighed 0.6 s of the page): then the filter takes a project id.
        "projects": projects if len(projects) <= PROJECT_CHOICES_MAX else None,
        "severities": Severity.choices,
        "decisions": list(reversed(DECISIONS)),
        "selected_severity": request.GET.getlist("severity"),
        "selected_decision": request.GET.getlist("decision"),
        "error": "",
    }
    status = 200
    if by not in GROUP_BY_CHOICES:
        context["error"] = f"`by` must be one of: {', '.join(GROUP_BY_CHOICES)}."
        status = 400
    else:
        filterset = groups_filterset(request=request, by=by)
        context["filter"] = filterset
        try:
            paging = page_request(request.GET)
        except PageParamError as exc:
            paging = None
            context["error"] = str(exc)
            status = 400
        if paging is not None and not filterset.is_valid():
            context["error"] = "; ".join(
                f"{name}: {' '.join(str(e) for e in errs)}"
                for name, errs in filterset.errors.items()
            )
            status = 400
        elif paging is not None:
            page = finding_groups(qs=filterset.qs, by=by, limit=PAGE_SIZE, offset=paging.offset,
                                  rank_sql=rank_sql, team_ids=principal.team_ids,
                                  filter_params=filterset.data)
            paginator = Paginator(_GroupPages(page.count), PAGE_SIZE)
            context["page_obj"] = paginator.get_page(paging.number)
            context["groups"] = page.groups
            context["count"] = page.count
            context["as_of"], context["refreshing"] = page.as_of, page.refreshing
            context["pending"] = page.pending
            params = request.GET.copy()
            params.pop("page", None)
            encoded = params.urlencode()
            context["querystring_without_page"] = f"{encoded}&" if encoded else ""
            context["hx_target"] = "#groups"
            # Links to the findings list keep the page's filters and add the group's own.
            keep = request.GET.copy()
            for name in ("by", "page", "page_size", "q", "open"):
                keep.pop(name, None)
            encoded_keep = keep.urlencode()
            context["list_query"] = f"{encoded_keep}&" if encoded_keep else ""
    template = "findings/_groups_table.html" if request.htmx else "findings/groups.html"
    return render(request, template, context, status=status)
