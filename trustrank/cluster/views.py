from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render

from trustrank.accounts.principal import principal_for_request
from trustrank.cluster import services
from trustrank.cluster.charts import unallocated_chart
from trustrank.cluster.forms import ReplayRunForm
from trustrank.cluster.models import ReplayMode, ReplayRun
from trustrank.cluster.selectors import replay_run_get_for_principal, replay_run_list
from trustrank.lib.pages import HtmxHttpRequest, paginate

POLICY_LABELS = {
    "static_weight_rr": "Static weight round-robin (by QoS class)",
    "gpu_mem_reservation": "GPU memory reservation priority",
    "semantic_aware": "Semantic-aware dynamic scheduling",
}


@login_required
def replay_list(request: HtmxHttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    if request.method == "POST":
        form = ReplayRunForm(request.POST, request.FILES)
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
                )
            except services.ReplayError as exc:
                form.add_error(None, str(exc))
            except PermissionDenied as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Replay run {run.pk} queued.")
                return redirect("cluster:replay-detail", run_id=run.pk)
    else:
        form = ReplayRunForm()
    context = {"form": form, **paginate(request, replay_run_list(principal=principal))}
    return render(request, "cluster/replay_list.html", context)


@login_required
def replay_detail(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run = replay_run_get_for_principal(principal=principal_for_request(request), run_id=run_id)
    context = {"run": run, **_result_context(run)}
    if request.htmx:
        return render(request, "cluster/_replay_status.html", context)
    return render(request, "cluster/replay_detail.html", context)


def _result_context(run: ReplayRun) -> dict[str, Any]:
    result = run.result or {}
    rows = result.get("strategies") or {}
    if not rows:
        return {}
    if result.get("mode") == ReplayMode.INFLATION:
        curves = {name: row.get("curve") or [] for name, row in rows.items()}
        ranking = sorted(rows.items(), key=lambda kv: kv[1]["unallocated_at_100"])
        return {
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
            {"name": POLICY_LABELS.get(name, name), **row} for name, row in rows.items()
        ]
    }
