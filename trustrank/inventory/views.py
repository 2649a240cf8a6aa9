from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render

from trustrank.accounts.principal import principal_for_request
from trustrank.inventory.filters import ComponentFilterSet, ProjectFilterSet
from trustrank.inventory.selectors import (
    project_components,
    project_get,
    project_list,
    project_sbom_history,
)
from trustrank.lib.pages import HtmxHttpRequest, paginate


@login_required
def project_list_page(request: HtmxHttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    filterset = ProjectFilterSet(request.GET, queryset=project_list(principal=principal))
    context = {"filter": filterset, **paginate(request, filterset.qs)}
    return render(request, "inventory/project_list.html", context)


@login_required
def project_page(request: HtmxHttpRequest, project_id: int) -> HttpResponse:
    project = project_get(principal=principal_for_request(request), project_id=project_id)
    filterset = ComponentFilterSet(request.GET, queryset=project_components(project=project))
    context = {
        "project": project,
        "filter": filterset,
        "hx_target": "#components",
        **paginate(request, filterset.qs),
    }
    if request.htmx:
        return render(request, "inventory/_components.html", context)
    context["sboms"] = project_sbom_history(project=project)[:50]
    return render(request, "inventory/project.html", context)
