"""Pages: the service map per environment, a service's page, a sampled trace."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.http import require_GET, require_POST

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.findings.paging import CountedRows
from trustrank.inventory.models import Project
from trustrank.lib.numbers import int_or_none
from trustrank.lib.pages import HtmxHttpRequest, paginate
from trustrank.ranking import selectors as ranking_selectors
from trustrank.ranking.explain import path_svg
from trustrank.runtime import selectors, services
from trustrank.runtime.deployment import (
    DeploymentError,
    DeploymentForbidden,
    DeploymentRequest,
    deployment_set,
)
from trustrank.runtime.filters import (
    DeclaredServiceFilterSet,
    ServiceFilterSet,
)
from trustrank.runtime.models import DeploymentSource, HumanImpact, NodeKind, Service
from trustrank.runtime.service_rows import (
    ServiceListing,
    declared_untraced_for_environments,
    service_rows,
)
from trustrank.runtime.windows import window_parse

WINDOWS = ["15m", "1h", "6h", "24h", "7d", "30d", "all"]
_KIND_NAMES = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
GRAPH_LIBRARY = "vendor/cytoscape/cytoscape.min.js"
FINDINGS_PER_PAGE = 25


def _window(request: HttpRequest) -> tuple[str, object]:
    raw = request.GET.get("window") or "1h"
    try:
        return raw, window_parse(raw)
    except ValueError:
        return "1h", window_parse("1h")


def _graph_library_url() -> str | None:
    """The graph library's URL, or None when `npm ci` has not installed it (the manifest
    storage refuses to name a file it does not have)."""
    try:
        return static(GRAPH_LIBRARY)
    except ValueError:
        return None


def _with_trust(graph: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each service node gains its trust (0-1) and exposure for the map's colours."""
    for node in graph["nodes"]:
        found = results.get(node.get("name", "")) if node.get("kind") == "service" else None
        node["trust"] = found.get("trust") if found else None
        node["exposure"] = found.get("exposure") if found else None
    return graph


def _declared_nodes(environment: Any) -> list[dict[str, Any]]:
    """Services a deployment declares that send no traces: isolated nodes (no calls seen)."""
    names = sorted(set(
        declared_untraced_for_environments(environments=[environment])
        .values_list("service_name", flat=True)[:500]
    ))
    return [{"id": f"declared-{name}", "name": name, "label": f"{name} (no traces)",
             "kind": "service", "ingress": False, "untraced": True, "url": ""}
            for name in names]


@login_required
@require_GET
def service_map(request: HtmxHttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    environments = list(selectors.environments_for_principal(principal=principal))
    window_label, window = _window(request)
    since = selectors.window_since(window)  # type: ignore[arg-type]
    environment = None
    wanted = request.GET.get("environment")
    if wanted:
        pk = int_or_none(wanted, minimum=1)
        environment = selectors.environment_get_for_user(principal=principal, pk=pk) \
            if pk is not None else None
        if environment is None:
            return HttpResponseBadRequest("environment must be an environment id")
    elif environments:
        environment = environments[0]
    context: dict[str, object] = {
        "environments": environments,
        "environment": environment,
        "windows": WINDOWS,
        "window": window_label,
        "graph_library": _graph_library_url(),
    }
    if environment is not None:
        # Trust and exposure as the latest ranking run computed them (none before a run):
        # a filter by exposure reads them in PostgreSQL; the page (below) reads those of the
        # services on the page and on the map.
        conditions = {environment.pk: ranking_selectors.service_exposure_condition(
            team_id=environment.team_id, environment=environment.name)}
        filterset = ServiceFilterSet(
            request.GET, exposure_conditions=conditions,
            queryset=selectors.services_for_environments(environments=[environment]),
        )
        declared = DeclaredServiceFilterSet(
            request.GET, exposure_conditions=conditions,
            queryset=declared_untraced_for_environments(environments=[environment]),
        )
        listing = ServiceListing(filterset.qs, declared.qs)
        context.update(paginate(request, listing))  # type: ignore[arg-type]
        page = context["page_obj"].object_list  # type: ignore[attr-defined]
        graph = selectors.graph_for_environment(environment=environment, since=since)
        # Unfiltered and none listed: none to draw, and no query to find them.
        if listing.declared_count() or (declared.is_bound and any(
            request.GET.get(name) for name in declared.filters
        )):
            graph["nodes"] += _declared_nodes(environment)
        named = ranking_selectors.service_results_named(
            team_id=environment.team_id, environment=environment.name,
            names=[*(s.name if isinstance(s, Service) else s.service_name for s in page),
                   *(n["name"] for n in graph["nodes"] if n["kind"] == NodeKind.SERVICE)],
        )
        context["ranked"] = named is not None
        results = named or {}
        context["rows"] = service_rows(page=page, since=since, with_libraries=False,
                                       results={environment.pk: results})
        context["filter"] = filterset
        context["graph"] = _with_trust(graph, results)
        context["broken"] = list(
            selectors.broken_context_for_environment(environment=environment)[:50]
        )
    if request.htmx:
        return render(request, "runtime/_services_table.html", context)
    return render(request, "runtime/service_map.html", context)


@login_required
@require_GET
def service_detail(request: HttpRequest, pk: int) -> HttpResponse:
    principal = principal_for_request(request)
    service = selectors.service_get_for_user(principal=principal, pk=pk)
    window_label, window = _window(request)
    since = selectors.window_since(window)  # type: ignore[arg-type]
    callers, callees = selectors.service_edges(service=service, since=since)
    minutes = None if window is None else max(window.total_seconds() / 60, 1)  # type: ignore[attr-defined]
    context = {
        "service": service,
        "window": window_label,
        "windows": WINDOWS,
        "callers": [(e, None if minutes is None else e.calls / minutes) for e in callers],
        "callees": [(e, None if minutes is None else e.calls / minutes) for e in callees],
        "libraries": selectors.service_libraries(service_ids=[service.pk], since=since).get(
            service.pk, []
        ),
        "broken": list(selectors.broken_context_for_service(service=service)[:50]),
        **_service_findings(request, service),
        "samples": selectors.trace_samples_for_service(service=service),
        "can_triage": principal.can("triage", service.environment.team_id),
        **_service_rank(service),
    }
    return render(request, "runtime/service_detail.html", context)


def _service_findings(request: HttpRequest, service: Any) -> dict[str, Any]:
    """The service's open findings in the findings list's order (the latest ranking run's
    rank, the unranked after it by baseline priority), a page at a time (`page`)."""
    qs = selectors.findings_for_service(service=service)
    # Matched first, then sorted by rank, with the total in the same query (search=True).
    rows = CountedRows(qs, team_ids=[service.environment.team_id], search=True)
    pager = paginate(request, rows, per_page=FINDINGS_PER_PAGE)  # type: ignore[arg-type]
    # The page's ranks counted in one statement (Finding.rank would count row by row).
    page = pager["page_obj"]
    page.object_list = list(page.object_list)
    ranking_selectors.ranks_attach(page.object_list)
    return {"findings": page, **pager}


def _service_rank(service: Any) -> dict[str, Any]:
    """Trust, exposure and path from the latest ranking run, and the recorded deployment
    with what its form offers."""
    env = service.environment
    result = ranking_selectors.service_result(
        team_id=env.team_id, environment=env.name, service=service.name
    )
    deployment = selectors.deployment_for_service(service=service)
    return {
        # An operator's mark set on the deployment before the service's first trace: it
        # counts until the service's own mark is set (runtime.services.ingress).
        "early_ingress_mark": deployment if service.ingress_override is None and deployment
        is not None and deployment.ingress_override is not None else None,
        "rank_result": result,
        "rank_path_svg": (
            path_svg(path=list(result.get("path") or []), hops=list(result.get("hops") or []))
            if result else ""
        ),
        "deployment": deployment,
        "human_impacts": HumanImpact.choices,
        "project_names": list(
            Project.objects.filter(team_id=env.team_id).order_by("name").values_list(
                "name", flat=True
            )[:500]
        ),
    }


@login_required
@require_POST
def service_deployment(request: HttpRequest, pk: int) -> HttpResponse:
    """A person (scope triage) says which project version the service runs."""
    principal = principal_for_request(request)
    service = selectors.service_get_for_user(principal=principal, pk=pk)
    team = service.environment.team
    if not principal.can(Scope.TRIAGE, team.pk):
        return HttpResponse("changing a deployment needs the triage role", status=403)
    try:
        deployment_set(
            team=team,
            environment=service.environment.name,
            service=service.name,
            namespace=service.namespace,
            request=DeploymentRequest(
                project=request.POST.get("project", ""),
                version=request.POST.get("version", ""),
                human_impact=request.POST.get("human_impact", HumanImpact.MEDIUM),
            ),
            source=DeploymentSource.MANUAL,
            principal=principal,
        )
    except DeploymentForbidden as exc:
        return HttpResponse(str(exc), status=403)
    except DeploymentError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Deployment saved; the next ranking run uses it.")
    return redirect("runtime:service-detail", pk=service.pk)


@login_required
@require_POST
def service_ingress(request: HttpRequest, pk: int) -> HttpResponse:
    principal = principal_for_request(request)
    service = selectors.service_get_for_user(principal=principal, pk=pk)
    choice = request.POST.get("ingress", "")
    values = {"confirm": True, "deny": False, "auto": None}
    if choice not in values:
        return HttpResponseBadRequest("ingress must be confirm, deny or auto")
    try:
        services.service_ingress_set(service=service, principal=principal, value=values[choice])
    except services.IngressChangeDenied as exc:
        return HttpResponse(str(exc), status=403)
    messages.success(request, f"Ingress for {service} set to {choice}.")
    return redirect("runtime:service-detail", pk=service.pk)


@login_required
@require_GET
def trace_detail(request: HttpRequest, environment_pk: int, trace_id: str) -> HttpResponse:
    principal = principal_for_request(request)
    environment = selectors.environment_get_for_user(principal=principal, pk=environment_pk)
    spans = selectors.trace_spans(environment=environment, trace_id=trace_id)
    start = spans[0]["start_ns"] if spans else 0
    for span in spans:
        span["offset_ms"] = round((span["start_ns"] - start) / 1e6, 3)
        span["duration_ms"] = round(span["duration_us"] / 1000, 3)
        span["kind_name"] = _KIND_NAMES.get(span.get("kind", 0), "unspecified")
    return render(
        request,
        "runtime/trace_detail.html",
        {"environment": environment, "trace_id": trace_id, "spans": spans},
    )
