"""Cluster diagnoses from storage to findings.

Reads the cluster as last uploaded (objects) and its recent per-minute series, runs the
pure diagnoses of `trustrank.risk.cluster`, reconciles them as reliability findings (one
scope per cluster: a diagnosis that no longer holds resolves its finding) and stores the
workload priority recommendations. Safe to run twice: findings reconcile by fingerprint
and workloads upsert by key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from trustrank.cluster.models import Cluster, ClusterWorkload
from trustrank.cluster.services.metrics_read import series_window
from trustrank.cluster.services.objects import snapshot_current
from trustrank.findings.choices import FindingKind, FindingSource
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor
from trustrank.findings.services.evidence import evidence_change_record
from trustrank.findings.services.reconcile import (
    FindingSpec,
    finding_fingerprint,
    findings_reconcile,
)
from trustrank.lib.locks import advisory_xact_lock
from trustrank.parsers.kubernetes_objects import Pod
from trustrank.parsers.series import Series
from trustrank.risk.cluster import gpu, inputs, io, priorities, rdma, scheduling, vllm, vllm_queues
from trustrank.risk.cluster.findings import Diagnosis, workload_key
from trustrank.risk.cluster.gpu import UTILISATION_METRICS
from trustrank.runtime.models import NodeKind, Service

# Series the diagnoses read; anything else stored is only charted.
DIAGNOSIS_METRICS = (
    *UTILISATION_METRICS,
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "vllm:generation_tokens_total", "vllm:generation_tokens",
    "vllm:num_requests_waiting", "vllm:num_requests_running",
    "vllm:request_success_total", "vllm:request_success",
    *vllm_queues.KV_CACHE_METRICS, "vllm:num_preemptions_total", "vllm:num_preemptions",
    *inputs.IO_METRICS,
)
LATENCY_METRICS = ("vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds")
# Read by prefix: histograms' _bucket/_sum/_count and the RDMA counters' many names.
DIAGNOSIS_PREFIXES = (*LATENCY_METRICS, *inputs.RDMA_PREFIXES)

# Findings severities for the engine's (its "info" has no finding counterpart).
_SEVERITY = {"info": "none", "low": "low", "medium": "medium", "high": "high",
             "critical": "critical"}


@dataclass(frozen=True)
class DiagnoseResult:
    diagnoses: int
    created: int
    updated: int
    resolved: int
    reopened: int
    workloads: int

    def as_dict(self) -> dict[str, int]:
        return self.__dict__.copy()


def cluster_diagnoses_compute(
    *, cluster: Cluster, now: datetime
) -> tuple[list[Diagnosis], list[priorities.PriorityRecommendation]]:
    """Every diagnosis the stored evidence supports, and the workload recommendations."""
    snapshot = snapshot_current(cluster=cluster)
    since = now - timedelta(minutes=settings.TRUSTRANK_CLUSTER_DIAGNOSE_WINDOW_MINUTES)
    series: list[Series] = series_window(
        cluster=cluster, since=since, names=DIAGNOSIS_METRICS, prefixes=DIAGNOSIS_PREFIXES,
    )
    serving, internet = trace_flags(cluster=cluster, pods=snapshot.pods)
    at = now.timestamp()
    found: list[Diagnosis] = []
    found += gpu.over_reserved_diagnose(
        pods=snapshot.pods, utilisation=inputs.utilisation_by_pod(series=series), now=at,
    )
    found += gpu.evictable_training_diagnose(pods=snapshot.pods)
    found += gpu.fragmentation_diagnose(
        nodes=snapshot.nodes, pods=snapshot.pods, gpus=inputs.gpu_memory_latest(series=series),
    )
    for metric in LATENCY_METRICS:
        found += vllm.latency_diagnose(
            series=vllm.latency_series_from(series=series, metric=metric)
        )
    found += vllm.throughput_diagnose(
        series=inputs.counter_series(series=series, metric="vllm:generation_tokens_total")
    )
    found += vllm_queues.queue_diagnose(series=inputs.queue_series(series=series))
    found += vllm_queues.kv_cache_diagnose(series=inputs.kv_cache_series(series=series))
    found += scheduling.preemption_diagnose(snapshot=snapshot, now=at)
    inversions, _quality = scheduling.priority_inversion_diagnose(
        pods=snapshot.pods, nodes=snapshot.nodes
    )
    found += inversions
    found += io.io_throttling_diagnose(
        devices=inputs.io_devices(series=series, pods=snapshot.pods, latency_sensitive=serving)
    )
    found += rdma.rdma_diagnose(counters=inputs.rdma_counters(series=series))
    # One finding per fingerprint, whichever function saw it first.
    unique = list({d.fingerprint: d for d in found}.values())
    workloads = priorities.workloads_from_pods(
        pods=snapshot.pods, latency_sensitive=serving, internet_path=internet,
        vllm_pods=inputs.vllm_pods(series=series), gpus_seen=inputs.gpus_by_pod(series=series),
    )
    return unique, priorities.workload_priorities(workloads=workloads, diagnoses=unique)


# Pod labels that usually carry the name a workload's traces report as service.name.
_SERVICE_NAME_LABELS = ("app.kubernetes.io/name", "app", "service.name")


def trace_flags(
    *, cluster: Cluster, pods: Iterable[Pod]
) -> tuple[dict[str, bool], dict[str, bool]]:
    """What the trace graph says about each workload (keyed by workload key): whether it
    serves traced requests (a traced service of the team carries its name: the owner's
    name or the pod's app label) and whether that service takes internet traffic (an
    ingress, by the evidence or a person's override). A first approximation of "on an
    internet path": ingress services only, not what they call."""
    names: dict[str, set[tuple[str, str]]] = {}
    for pod in pods:
        key = workload_key(pod)
        wanted = names.setdefault(key, set())
        wanted.add((pod.namespace, key.split("/", 2)[2]))
        for label in _SERVICE_NAME_LABELS:
            if pod.labels.get(label):
                wanted.add((pod.namespace, pod.labels[label]))
    all_names = {name for wanted in names.values() for _, name in wanted}
    if not all_names:
        return {}, {}
    services = Service.objects.filter(
        environment__team_id=cluster.team_id, kind=NodeKind.SERVICE, name__in=all_names,
    ).values_list("namespace", "name", "ingress_candidate", "ingress_override")
    by_name: dict[str, list[tuple[str, bool]]] = {}
    for namespace, name, candidate, override in services:
        ingress = override if override is not None else candidate
        by_name.setdefault(name, []).append((namespace, bool(ingress)))
    serving: dict[str, bool] = {}
    internet: dict[str, bool] = {}
    for key, wanted in names.items():
        # A service recorded without a namespace matches a workload of any namespace.
        matches = [
            ingress
            for namespace, name in wanted
            for service_namespace, ingress in by_name.get(name, [])
            if service_namespace in ("", namespace)
        ]
        if matches:
            serving[key] = True
            internet[key] = any(matches)
    return serving, internet


def _spec(*, cluster: Cluster, diagnosis: Diagnosis, now: datetime) -> FindingSpec:
    evidence: dict[str, Any] = {
        "cluster": cluster.name,
        "diagnosis": diagnosis.kind,
        "subject_kind": diagnosis.subject_kind.value,
        "subject": diagnosis.subject,
        "workload": diagnosis.workload,
        "discriminator": diagnosis.discriminator,
        "fingerprint": diagnosis.fingerprint,
        "inputs": diagnosis.evidence_dict(),
    }
    return FindingSpec(
        # The engine's fingerprint names the subject within a cluster; one team's clusters
        # may well share namespaces and pod names.
        fingerprint=finding_fingerprint("cluster", cluster.name, diagnosis.fingerprint),
        title=f"{diagnosis.title} ({cluster.name})"[:2000],
        severity=_SEVERITY.get(diagnosis.severity.value, "medium"),
        category=diagnosis.kind[:40],
        source=FindingSource.CLUSTER,
        values={"evidence": evidence},
        created_reason=f"cluster diagnosis {diagnosis.kind} on {diagnosis.subject}",
        last_seen=now,
    )


def _workloads_store(
    *, cluster: Cluster, recommendations: Iterable[priorities.PriorityRecommendation],
    now: datetime,
) -> int:
    rows = []
    for rec in recommendations:
        namespace, kind, name = [*rec.workload.split("/", 2), "", ""][:3]
        rows.append(ClusterWorkload(
            cluster=cluster, key=rec.workload[:600], namespace=namespace[:253],
            kind=kind[:64], name=name[:253], declared_priority=rec.declared_priority,
            declared_priority_class=rec.declared_priority_class[:253],
            declared_qos=rec.declared_qos[:20], gpus=rec.gpus, score=rec.score,
            tier=rec.tier[:40],
            recommended_priority=rec.recommended_priority,
            recommended_qos=rec.recommended_qos[:20], direction=rec.direction[:8],
            disagrees=rec.disagrees,
            reasons=[{"factor": r.factor, "points": r.points, "detail": r.detail}
                     for r in rec.reasons],
            diagnoses=list(rec.diagnoses), updated_at=now,
        ))
    ClusterWorkload.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["cluster", "key"],
        update_fields=["declared_priority", "declared_priority_class", "declared_qos", "gpus",
                       "score", "tier", "recommended_priority", "recommended_qos",
                       "direction", "disagrees", "reasons", "diagnoses", "updated_at"],
    )
    ClusterWorkload.objects.filter(cluster=cluster).exclude(
        key__in=[row.key for row in rows]
    ).delete()
    return len(rows)


def cluster_diagnose(*, cluster_id: int, now: datetime | None = None) -> DiagnoseResult:
    """Diagnose one cluster and bring its findings and workloads in line."""
    now = now or timezone.now()
    cluster = Cluster.objects.get(pk=cluster_id)
    diagnoses, recommendations = cluster_diagnoses_compute(cluster=cluster, now=now)
    with transaction.atomic():
        existing = Finding.objects.filter(
            team_id=cluster.team_id, kind=FindingKind.RELIABILITY,
            source=FindingSource.CLUSTER, evidence__cluster=cluster.name,
        )
        counts = findings_reconcile(
            team_id=cluster.team_id,
            kind=FindingKind.RELIABILITY,
            specs=[_spec(cluster=cluster, diagnosis=d, now=now) for d in diagnoses],
            existing=existing,
            actor=Actor.system(f"cluster diagnoses of {cluster.name}"),
            now=now,
            resolve_reason=lambda f: "the cluster diagnosis no longer holds",
            value_fields=["evidence"],
        )
        workloads = _workloads_store(cluster=cluster, recommendations=recommendations, now=now)
        Cluster.objects.filter(pk=cluster.pk).update(diagnosed_at=now)
        if counts.created or counts.resolved or counts.reopened or counts.updated:
            evidence_change_record(
                team_id=cluster.team_id, what=f"cluster {cluster.name} diagnoses"
            )
    return DiagnoseResult(
        diagnoses=len(diagnoses), created=counts.created, updated=counts.updated,
        resolved=counts.resolved, reopened=counts.reopened, workloads=workloads,
    )


def cluster_diagnose_request(*, cluster_id: int, delay: int | None = None) -> str:
    """Ask for a diagnosis of the cluster after the debounce delay (or `delay` seconds),
    once the caller's transaction commits. Requests within the delay share one run: each
    task skips when a run started after its request. Returns the request's time."""
    from trustrank.cluster.tasks import cluster_diagnose_task

    requested = timezone.now().isoformat()
    if delay is None:
        delay = settings.TRUSTRANK_CLUSTER_DIAGNOSE_DEBOUNCE_SECONDS
    # No countdown for "now": a task with an ETA waits for the worker's timer, which a solo
    # worker holding later ETAs (the debounced requests of a load) only wakes for those.
    transaction.on_commit(
        lambda: cluster_diagnose_task.apply_async(
            args=[cluster_id, requested], countdown=delay or None, queue=settings.INGEST_QUEUE
        )
    )
    return requested


def cluster_diagnose_if_due(*, cluster_id: int, requested: datetime) -> DiagnoseResult | None:
    """Run the requested diagnosis unless one started after the request has finished. The
    mark of a finished run is the `diagnosed_at` its own transaction sets, and runs of one
    cluster take turns on an advisory lock: a worker killed during a diagnosis leaves the
    mark as it was, so the message delivered again (acked late) runs it. (A claim committed
    before the work would make that delivery skip; a row lock held through the compute
    would hold up the cluster's object loads.)"""
    with transaction.atomic():
        advisory_xact_lock(f"cluster-diagnose:{cluster_id}")
        due = Cluster.objects.filter(pk=cluster_id).filter(
            models.Q(diagnosed_at__isnull=True) | models.Q(diagnosed_at__lt=requested)
        ).exists()
        if not due:
            return None
        return cluster_diagnose(cluster_id=cluster_id, now=timezone.now())


def clusters_diagnose_all() -> int:
    """The periodic pass: every cluster with evidence, since diagnoses age without loads."""
    ids = list(Cluster.objects.values_list("pk", flat=True))
    for cluster_id in ids:
        cluster_diagnose(cluster_id=cluster_id)
    return len(ids)
