from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from trustrank.accounts.principal import principal_for_request
from trustrank.cluster import services
from trustrank.cluster.charts import priorities_chart, time_chart, unallocated_chart
from trustrank.cluster.forms import ReplayRunForm
from trustrank.cluster.models import Cluster, ReplayMode, ReplayRun
from trustrank.cluster.selectors import (
    cluster_findings,
    cluster_get_for_principal,
    cluster_list,
    cluster_pod_counts,
    gpu_lines,
    pending_pods,
    replay_run_get_for_principal,
    replay_run_list,
    workload_chart_rows,
    workload_get,
    workload_list,
    workload_pods,
    workload_series_lines,
)
from trustrank.jobs.errors import JobsBusy
from trustrank.lib.pages import HtmxHttpRequest, paginate

# Pods listed per policy, in the order they started, on a cluster run's page.
FIRST_STARTED = 8
POLICY_LABELS = {
    "static_weight_rr": "Static weight round-robin (by QoS class)",
    "gpu_mem_reservation": "GPU memory reservation priority",
    "semantic_aware": "Semantic-aware dynamic scheduling",
}


@login_required
def replay_list(request: HtmxHttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    clusters = cluster_list(principal=principal).values_list("name", flat=True)
    if request.method == "POST":
        form = ReplayRunForm(request.POST, request.FILES, clusters=clusters)
        if form.is_valid():
            data = form.cleaned_data
            try:
                params = services.replay_params_validate(
                    mode=data["mode"],
                    strategies=data["strategies"],
                    seeds=data["seeds"],
                    policies=data["policies"],
                    placement=data["placement"],
                    compress=data["compress"],
                    node_fraction=data["node_fraction"],
                )
                pods = data["pods_file"].read() if data["pods_file"] else None
                nodes = data["nodes_file"].read() if data["nodes_file"] else None
                label = (
                    f"{data['pods_file'].name} + {data['nodes_file'].name}"
                    if data["pods_file"] and data["nodes_file"]
                    else ""
                )
                run = services.replay_run_create(
                    principal=principal,
                    params=params,
                    team_hint=data["team"],
                    pods_csv=pods,
                    nodes_csv=nodes,
                    trace_label=label,
                    cluster_name=data["cluster"],
                )
            except services.ReplayError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, str(exc))
            except (PermissionDenied, JobsBusy) as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Replay run {run.pk} queued.")
                return redirect("cluster:replay-detail", run_id=run.pk)
    else:
        form = ReplayRunForm(clusters=clusters)
    context = {"form": form, **paginate(request, replay_run_list(principal=principal))}
    return render(request, "cluster/replay_list.html", context)


@login_required
def replay_detail(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run = replay_run_get_for_principal(principal=principal_for_request(request), run_id=run_id)
    context = {"run": run, "parameters": replay_parameter_fields(run), **_result_context(run)}
    if request.htmx:
        return render(request, "cluster/_replay_status.html", context)
    return render(request, "cluster/replay_detail.html", context)


def _words(values: object, labels: dict[str, str] | None = None) -> str:
    items = values if isinstance(values, list | tuple) else [values]
    return ", ".join((labels or {}).get(str(v), str(v).replace("_", " ")) for v in items) or "—"


def replay_parameter_fields(run: ReplayRun) -> list[tuple[str, str]]:
    """A run's parameters as (label, value) for people: only those its mode uses, lists as
    words, the semantic hints counted (the JSON stays in the API)."""
    params = dict(run.parameters or {})
    timeline = run.mode == ReplayMode.TIMELINE
    fields: list[tuple[str, str]] = []
    if timeline:
        fields.append(("Priority policies", _words(params.pop("policies", []), POLICY_LABELS)))
        fields.append(("Placement strategy", _words(params.pop("placement", ""))))
        compress = params.pop("compress", 1.0)
        fields.append(("Arrival times", "as in the trace" if compress == 1 else
                       f"compressed ×{compress:g}"))
        hints = params.pop("hints", None) or {}
        fields.append(("Semantic priorities", f"given for {len(hints)} pods" if hints else
                       "derived from the trace or the cluster"))
    else:
        fields.append(("Placement strategies", _words(params.pop("strategies", []))))
        fields.append(("Seeds", str(params.pop("seeds", "—"))))
    fraction = params.pop("node_fraction", 1.0)
    fields.append(("Nodes replayed", "all" if fraction == 1 else f"{fraction:.0%} of them"))
    for name in ("mode", "strategies", "seeds", "policies", "placement", "compress", "hints"):
        params.pop(name, None)  # the other mode's, or shown above
    fields += [(k.replace("_", " ").capitalize(), _words(v)) for k, v in sorted(params.items())]
    return fields


def _result_context(run: ReplayRun) -> dict[str, Any]:
    result = run.result or {}
    rows = result.get("strategies") or {}
    if not rows:
        return {}
    source = result.get("input") or {}
    cluster_input = None
    if source.get("source") == "cluster":
        cluster_input = {**source, "snapshot_time": _parse_time(source.get("snapshot_at"))}
    if result.get("mode") == ReplayMode.INFLATION:
        curves = {name: row.get("curve") or [] for name, row in rows.items()}
        ranking = sorted(rows.items(), key=lambda kv: kv[1]["unallocated_at_100"])
        return {
            "cluster_input": cluster_input,
            "chart": unallocated_chart(curves),
            "inflation_rows": [
                {
                    "name": name,
                    "unallocated_pct": 100 * row["unallocated_at_100"],
                    "spread_pct": 100 * row["unallocated_spread"],
                    "unallocated_gpus": row["unallocated_at_100"] * result["trace"]["gpus"],
                }
                for name, row in ranking
            ],
            "fgd_reduction_pct": (
                100 * result["fgd_reduction"] if result.get("fgd_reduction") is not None else None
            ),
        }
    return {
        "timeline_rows": [
            {
                "name": POLICY_LABELS.get(name, name),
                **row,
                "first_started": (row.get("start_order") or [])[:FIRST_STARTED],
            }
            for name, row in rows.items()
        ],
        "cluster_input": cluster_input,
    }


def _parse_time(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


# --- Cluster evidence pages -------------------------------------------------------------------

CHART_HOURS = 6


# Clusters drawn as cards on the list page: each costs a handful of queries (GPU lines,
# chart rows, pod counts), so the page draws only the most recently updated few.
LIST_CARDS = 3


def cluster_charts(
    *, cluster: Cluster, gpus: int = 8, workloads: int = 20, width: int = 720
) -> dict[str, Any]:
    """GPU use over the last CHART_HOURS and declared vs recommended priorities, the charts
    both the cluster page and the list's cards draw (templates/cluster/_gpu_use.html and
    _priorities_summary.html); None for a chart with nothing to draw."""
    util, fi, gpus_seen = gpu_lines(
        cluster=cluster, since=timezone.now() - timedelta(hours=CHART_HOURS), limit=gpus
    )
    rows = workload_chart_rows(cluster=cluster, limit=workloads)
    return {
        "cluster": cluster,
        "pod_counts": cluster_pod_counts(cluster=cluster),
        "priorities_chart": priorities_chart(
            [(w.key, w.declared_priority, w.recommended_priority, w.direction) for w in rows],
            width=width,
        ),
        "util_chart": time_chart(util, y_label="GPU utilisation %", y_max=100.0, width=width),
        "fi_chart": time_chart(fi, y_label="FI (1 − free/total)", y_max=1.0, width=width),
        "gpus_seen": gpus_seen,
        "gpus_charted": len(set(util) | set(fi)),
        "chart_hours": CHART_HOURS,
        "chart_workloads": workloads,
    }


def _updated_at(cluster: Cluster) -> datetime:
    return max(t for t in (cluster.created_at, cluster.objects_at, cluster.metrics_at,
                           cluster.diagnosed_at) if t is not None)


@login_required
def cluster_list_page(request: HtmxHttpRequest) -> HttpResponse:
    clusters = cluster_list(principal=principal_for_request(request)).order_by("name")
    context = paginate(request, clusters)
    recent = sorted(context["page_obj"], key=_updated_at, reverse=True)[:LIST_CARDS]
    context["cards"] = [cluster_charts(cluster=c, gpus=4, workloads=8, width=600)
                        for c in recent]
    return render(request, "cluster/cluster_list.html", context)


@login_required
def cluster_detail(request: HtmxHttpRequest, cluster: str) -> HttpResponse:
    found = cluster_get_for_principal(
        principal=principal_for_request(request), name=cluster, team=request.GET.get("team", "")
    )
    context = {
        **cluster_charts(cluster=found),
        "pending": pending_pods(cluster=found)[:50],
        "findings": cluster_findings(cluster=found)[:50],
        **paginate(request, workload_list(cluster=found, ordering=request.GET.get("ordering", ""))),
    }
    return render(request, "cluster/cluster_detail.html", context)


@login_required
def workload_detail(request: HtmxHttpRequest, cluster: str, key: str) -> HttpResponse:
    found = cluster_get_for_principal(
        principal=principal_for_request(request), name=cluster, team=request.GET.get("team", "")
    )
    workload = workload_get(cluster=found, key=key)
    pods = list(workload_pods(cluster=found, key=key)[:100])
    since = timezone.now() - timedelta(hours=CHART_HOURS)
    charts = [
        (name, time_chart(lines, y_label=name[:40]))
        for name, lines in workload_series_lines(cluster=found, pods=pods, since=since).items()
    ]
    context = {
        "cluster": found, "workload": workload, "pods": pods,
        "charts": [(name, chart) for name, chart in charts if chart is not None],
        "chart_hours": CHART_HOURS,
    }
    return render(request, "cluster/workload_detail.html", context)
