"""Reads of replay runs and cluster evidence; every one is scoped to the principal's
teams."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import numpy as np
from django.db.models import Case, Count, Q, QuerySet, Value, When
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.cluster.models import (
    Cluster,
    ClusterEntryPoint,
    ClusterPod,
    ClusterWorkload,
    MetricLabels,
    MetricName,
    MetricSeries,
    ReplayRun,
)
from trustrank.cluster.services.metrics_read import minutes_read, series_window
from trustrank.findings.choices import OPEN_STATES, FindingKind, FindingSource
from trustrank.findings.models import Finding
from trustrank.parsers.series import Series
from trustrank.risk.cluster.gpu import UTILISATION_METRICS, utilisation_percent


def replay_run_list(*, principal: Principal) -> QuerySet[ReplayRun]:
    # The uploaded CSVs can be megabytes; lists never need them.
    return (
        ReplayRun.objects.filter(team_id__in=principal.team_ids)
        .select_related("team", "cluster")
        .defer("pods_csv", "nodes_csv", "result")
        .order_by("-created_at", "-pk")
    )


def replay_run_get_for_principal(*, principal: Principal, run_id: int) -> ReplayRun:
    """The one access helper for a run: 404 for anything outside the principal's teams."""
    run = (
        ReplayRun.objects.filter(team_id__in=principal.team_ids, pk=run_id)
        .select_related("team", "cluster")
        .defer("pods_csv", "nodes_csv")
        .first()
    )
    if run is None:
        raise Http404("No such replay run.")
    return run


# --- Cluster evidence ---------------------------------------------------------------------

WORKLOAD_ORDERINGS = {
    "declared": ["declared_priority", "key"],
    "-declared": ["-declared_priority", "key"],
    "recommended": ["recommended_priority", "key"],
    "-recommended": ["-recommended_priority", "key"],
}


def cluster_list(*, principal: Principal) -> QuerySet[Cluster]:
    return Cluster.objects.filter(team_id__in=principal.team_ids).select_related("team")


def cluster_get_for_principal(*, principal: Principal, name: str, team: str = "") -> Cluster:
    """The one access helper for a cluster by name: clusters are named per team, so a
    person in several teams with the same cluster name picks one with `team`."""
    clusters = cluster_list(principal=principal).filter(name=name)
    if team:
        clusters = clusters.filter(team__name=team)
    cluster = clusters.order_by("team_id").first()
    if cluster is None:
        raise Http404("No such cluster.")
    return cluster


def workload_list(*, cluster: Cluster, ordering: str = "") -> QuerySet[ClusterWorkload]:
    """Disagreements between declared and recommended priorities first, unless an ordering
    by either is asked for."""
    rows = ClusterWorkload.objects.filter(cluster=cluster)
    if ordering in WORKLOAD_ORDERINGS:
        return rows.order_by(*WORKLOAD_ORDERINGS[ordering])
    return rows.order_by("-disagrees", "-recommended_priority", "key")


def workload_chart_rows(*, cluster: Cluster, limit: int = 20) -> list[ClusterWorkload]:
    """The workloads the priorities chart draws: those holding GPUs first, then the
    disagreements, then by recommended priority."""
    return list(
        ClusterWorkload.objects.filter(cluster=cluster)
        .only("key", "declared_priority", "recommended_priority", "direction", "gpus")
        .order_by(Case(When(gpus__gt=0, then=Value(0)), default=Value(1)), "-disagrees",
                  "-recommended_priority", "key")[:limit]
    )


def cluster_pod_counts(*, cluster: Cluster) -> dict[str, int]:
    """Live pods stored, and how many of them hold GPUs (requests or limits)."""
    return ClusterPod.objects.filter(cluster=cluster, deleted_at__isnull=True).aggregate(
        pods=Count("pk"), gpu_pods=Count("pk", filter=Q(gpus__gt=0)),
    )


def workload_get(*, cluster: Cluster, key: str) -> ClusterWorkload:
    workload = ClusterWorkload.objects.filter(cluster=cluster, key=key).first()
    if workload is None:
        raise Http404("No such workload.")
    return workload


def pending_pods(*, cluster: Cluster) -> QuerySet[ClusterPod]:
    return ClusterPod.objects.filter(
        cluster=cluster, deleted_at__isnull=True, phase="Pending"
    ).order_by("-priority", "first_seen")


def workload_pods(*, cluster: Cluster, key: str) -> QuerySet[ClusterPod]:
    return ClusterPod.objects.filter(cluster=cluster, workload=key).order_by(
        "deleted_at", "namespace", "name"
    )


def cluster_findings(*, cluster: Cluster) -> QuerySet[Finding]:
    return Finding.objects.filter(
        team_id=cluster.team_id, kind=FindingKind.RELIABILITY, source=FindingSource.CLUSTER,
        evidence__cluster=cluster.name, state__in=OPEN_STATES,
    ).order_by("-severity_score", "category")


def workload_diagnosis_kinds(*, cluster: Cluster) -> dict[str, set[str]]:
    """workload key -> kinds of the open diagnoses on it (the scheduling replay's
    semantic-aware policy reads them beside the recommended priorities)."""
    kinds: dict[str, set[str]] = {}
    for workload, kind in cluster_findings(cluster=cluster).values_list(
        "evidence__workload", "evidence__diagnosis"
    ):
        if workload and kind:
            kinds.setdefault(str(workload), set()).add(str(kind))
    return kinds


_FB_METRICS = ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED")


def gpu_label(item: Series) -> str:
    """A GPU's line label: node/gpuN, from the labels that fill the node and gpu columns
    (`metrics_ids._LINKS`); the GPU's UUID when either is missing; "" when the series names
    no GPU at all (it has no place on a per-GPU chart)."""
    node = item.label("Hostname") or item.label("k8s.node.name") or item.label("node")
    index = item.label("gpu")
    uuid = item.label("UUID") or item.label("uuid")
    if node and index:
        return f"{node}/gpu{index}"
    if uuid:
        return f"{node}/{uuid}" if node else uuid
    return f"{node}/gpu{index}" if node or index else ""


def _gpus_by_utilisation(*, cluster: Cluster, since: datetime) -> list[tuple[str, str]]:
    """(node, gpu) of every GPU with utilisation minutes since `since`, least utilised
    first (percent: DCGM_FI_PROF_GR_ENGINE_ACTIVE is a ratio)."""
    names = dict(MetricName.objects.filter(cluster=cluster, name__in=UTILISATION_METRICS)
                 .values_list("id", "name"))
    if not names:
        return []
    read = minutes_read(cluster_id=cluster.pk, since=since, name_ids=names)
    records = read.records
    scale = np.where(read.name_id == next(
        (k for k, v in names.items() if v == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"), -1), 100.0, 1.0)
    means = records["sum"].astype(np.float64) / records["count"].astype(np.float64) * scale
    links = dict(((pk), (node, gpu)) for pk, node, gpu in MetricLabels.objects.filter(
        id__in=np.unique(records["labels_id"]).tolist()).values_list("id", "node", "gpu"))
    totals: dict[tuple[str, str], list[float]] = {}
    for labels_id, mean in zip(records["labels_id"].tolist(), means.tolist(), strict=True):
        entry = totals.setdefault(links[labels_id], [0.0, 0.0])
        entry[0] += mean
        entry[1] += 1
    return sorted(totals, key=lambda pair: (totals[pair][0] / totals[pair][1], pair))


def gpu_lines(
    *, cluster: Cluster, since: datetime, limit: int = 8
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, list[tuple[float, float]]], int]:
    """Utilisation (%) and FI per GPU over time, for the cluster page: FI = 1 − FB free /
    FB total at each minute (formula 2 at GPU level). At most `limit` GPUs, the least
    utilised first (the over-reserved ones are the point of the chart); also the number
    of GPUs seen."""
    # A large cluster has thousands of GPUs: rank them by their mean utilisation over the
    # window (the utilisation chunks only), then read only the chosen GPUs' series.
    ranked = _gpus_by_utilisation(cluster=cluster, since=since)
    chosen_pairs = set(ranked[:limit])
    if not chosen_pairs:
        chosen_pairs = set(
            MetricSeries.objects.filter(cluster=cluster, name="DCGM_FI_DEV_FB_FREE")
            .values_list("node", "gpu").distinct()[:limit]
        )
    ids = [
        pk for pk, node, gpu in MetricSeries.objects.filter(
            cluster=cluster, node__in={n for n, _ in chosen_pairs},
            name__in=[*UTILISATION_METRICS, *_FB_METRICS],
        ).values_list("pk", "node", "gpu")
        if (node, gpu) in chosen_pairs
    ]
    series = series_window(cluster=cluster, since=since, series_ids=ids) if ids else []
    util: dict[str, list[tuple[float, float]]] = {}
    memory: dict[str, dict[str, dict[float, float]]] = {}
    for item in series:
        label = gpu_label(item)
        if not label:
            continue
        points = list(zip((t / 1000 for t in item.timestamps_ms), item.values, strict=True))
        if item.name in UTILISATION_METRICS:
            util.setdefault(label, []).extend(
                (t, utilisation_percent(metric=item.name, value=v)) for t, v in points
            )
        else:
            by_minute = memory.setdefault(label, {}).setdefault(item.name, {})
            for t, v in points:
                by_minute[t // 60 * 60] = v
    fi: dict[str, list[tuple[float, float]]] = {}
    for label, fields in memory.items():
        free = fields.get("DCGM_FI_DEV_FB_FREE", {})
        used = fields.get("DCGM_FI_DEV_FB_USED", {})
        reserved = fields.get("DCGM_FI_DEV_FB_RESERVED", {})
        fi[label] = [
            (t, 1 - free[t] / total)
            for t in sorted(free) if t in used
            for total in [free[t] + used[t] + reserved.get(t, 0.0)] if total > 0
        ]
    seen = max(len(ranked), len(set(util) | set(fi)))

    def mean(points: list[tuple[float, float]]) -> float:
        return sum(v for _, v in points) / len(points) if points else 0.0

    chosen = sorted(set(util) | set(fi), key=lambda g: (mean(util.get(g, [])), g))[:limit]
    return (
        {g: sorted(util[g]) for g in chosen if g in util},
        {g: fi[g] for g in chosen if g in fi},
        seen,
    )


def workload_series_lines(
    *, cluster: Cluster, pods: Iterable[ClusterPod], since: datetime, max_metrics: int = 12,
    max_lines: int = 6,
) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """metric name -> line label -> points, for the workload page's charts."""
    wanted = {(p.namespace, p.name) for p in pods}
    if not wanted:
        return {}
    # Both columns filter in SQL; the pairs are checked here (pod a of namespace x and pod
    # b of y must not bring in pod b of x).
    ids = [
        pk for pk, namespace, pod in MetricSeries.objects.filter(
            cluster=cluster, pod__in={name for _, name in wanted},
            namespace__in={ns for ns, _ in wanted},
        ).values_list("pk", "namespace", "pod")[:4000]
        if (namespace, pod) in wanted
    ][:2000]
    if not ids:
        return {}
    charts: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for item in series_window(cluster=cluster, since=since, series_ids=ids):
        if item.name not in charts and len(charts) >= max_metrics:
            continue
        lines = charts.setdefault(item.name, {})
        if len(lines) >= max_lines:
            continue
        extra = ",".join(f"{k}={v}" for k, v in item.labels
                         if k in ("pod", "gpu", "model_name", "le", "finished_reason"))
        lines[extra or item.name] = [
            (t / 1000, v) for t, v in zip(item.timestamps_ms, item.values, strict=True)
        ]
    return charts


# A Kubernetes entry point as reads match it: (cluster, namespace, service names, route).
Entry = tuple[str, str, tuple[str, ...], str]


def entry_points_by_team(team_ids: Iterable[int]) -> dict[int, tuple[Entry, ...]]:
    """The Kubernetes entry points of several teams, in one query (a team with none: ())."""
    found: dict[int, list[Entry]] = {team_id: [] for team_id in team_ids}
    for team_id, cluster, namespace, names, route in (
        ClusterEntryPoint.objects.filter(cluster__team_id__in=list(found))
        .order_by("cluster__name", "namespace", "kind", "source", "id")
        .values_list("cluster__team_id", "cluster__name", "namespace", "names", "route")
    ):
        found[team_id].append((cluster, namespace, tuple(names), route))
    return {team_id: tuple(entries) for team_id, entries in found.items()}


def entry_points_read(team_id: int) -> tuple[Entry, ...]:
    """The team's Kubernetes entry points."""
    return entry_points_by_team([team_id])[team_id]


def routes_for(
    entries: Iterable[Entry], *, name: str, cluster: str | None, namespace: str | None,
) -> list[str]:
    """Routes to a service: an entry point that names it, in the cluster and namespace its
    resource attributes give (either unknown: any)."""
    return [
        route
        for entry_cluster, entry_namespace, names, route in entries
        if name in names and cluster in (None, "", entry_cluster)
        and namespace in (None, "", entry_namespace)
    ]
