from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone

from trustrank.accounts.principal import principal_for_request
from trustrank.findings.choices import Severity, TriageState
from trustrank.findings.filters import FindingFilterSet
from trustrank.inventory.charts import mttr_chart, open_findings_chart
from trustrank.inventory.filters import ComponentFilterSet, ProjectFilterSet
from trustrank.inventory.models import Project
from trustrank.inventory.selectors import (
    DECISION_KEYS,
    project_components,
    project_findings,
    project_get,
    project_list,
    project_open_over_time,
    project_risk_for_projects,
    project_risk_summary,
    project_sbom_history,
)
from trustrank.lib.pages import HtmxHttpRequest, paginate
from trustrank.ranking.selectors import ranks_attach

FINDINGS_PAGE_SIZE = 25
FINDINGS_TARGET = "project-findings"


@login_required
def project_list_page(request: HtmxHttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    filterset = ProjectFilterSet(request.GET, queryset=project_list(principal=principal))
    context = {"filter": filterset, **paginate(request, filterset.qs)}
    page: list[Project] = list(context["page_obj"].object_list)
    risks = project_risk_for_projects(projects=page)
    context["rows"] = [(p, risks[p.pk]) for p in page]
    return render(request, "inventory/project_list.html", context)


def _findings_context(request: HtmxHttpRequest, project: Project) -> dict[str, Any]:
    """The project's findings through the findings list's FilterSet: open ones by default,
    the best rank first; numbered pages in `fpage` (the components table has `page`)."""
    principal = principal_for_request(request)
    params = request.GET.copy()
    params.pop("project", None)
    if "open" not in params and not params.get("state"):
        params["open"] = "true"  # open by default; `open=` (empty) shows every state
    filterset = FindingFilterSet(params, queryset=project_findings(principal=principal,
                                                                   project=project))
    paginator = Paginator(filterset.qs, FINDINGS_PAGE_SIZE)
    findings_page = paginator.get_page(request.GET.get("fpage"))
    # The page's ranks counted in one statement (Finding.rank would count row by row).
    findings_page.object_list = list(findings_page.object_list)
    ranks_attach(findings_page.object_list)
    keep = request.GET.copy()
    keep.pop("fpage", None)
    encoded = keep.urlencode()
    return {
        "findings_filter": filterset,
        "findings_page": findings_page,
        "findings_query": f"{encoded}&" if encoded else "",
        "findings_open": params.get("open"),
        "states": TriageState.choices,
        "severities": Severity.choices,
        "today": timezone.now().date(),
    }


@login_required
def project_page(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project = project_get(principal=principal_for_request(request), project_id=project_id)
    if request.htmx and request.htmx.target == FINDINGS_TARGET:
        context = {"project": project, **_findings_context(request, project)}
        return render(request, "inventory/_project_findings.html", context)
    filterset = ComponentFilterSet(request.GET, queryset=project_components(project=project))
    context = {
        "project": project,
        "filter": filterset,
        "hx_target": "#components",
        **paginate(request, filterset.qs),
    }
    if request.htmx:
        return render(request, "inventory/_components.html", context)
    now = timezone.now()
    summary = project_risk_summary(project=project, now=now)
    series = project_open_over_time(project=project, days=90, today=now.date())
    context.update(
        {
            "sboms": project_sbom_history(project=project)[:50],
            "summary": summary,
            "decisions": [(d, summary.risk.by_decision.get(d, 0)) for d in DECISION_KEYS],
            "open_chart": open_findings_chart(series),
            "open_now": series[-1].open if series else 0,
            "mttr_chart": mttr_chart(summary.mttr),
            **_findings_context(request, project),
        }
    )
    return render(request, "inventory/project.html", context)
