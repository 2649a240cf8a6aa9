"""A team's own cluster as replay input: the stored pods (live and gone, with their phase
history) and live nodes, converted by `risk.scheduling.snapshot`, and the cluster issue's
recommended priorities and diagnoses per workload for the semantic-aware policy.

Recommendations are read as the last diagnosis stored them (`ClusterWorkload`, and the open
cluster findings for the diagnosis kinds). When that diagnosis is older than the last
objects upload (the debounced diagnosis has not run yet), they are computed from the same
stored evidence by the diagnosis code itself, without storing anything, so a replay started
right after an upload still follows the cluster's recommendations.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Max
from django.utils import timezone

from trustrank.cluster import selectors
from trustrank.cluster.models import Cluster, ClusterNode, ClusterPod, ClusterPodChange
from trustrank.cluster.services.objects import node_from_state, pod_from_state
from trustrank.risk.scheduling.snapshot import (
    ClusterTrace,
    PhaseStep,
    SemanticInput,
    StoredPod,
    cluster_hints,
    cluster_trace,
)

SEMANTIC_SOURCE = "cluster recommendations"
FROM_STORED = "stored diagnosis"
FROM_COMPUTED = "computed from stored evidence"


def cluster_trace_load(*, cluster: Cluster) -> ClusterTrace:
    """The stored cluster as replay arrays; `SnapshotError` names what is missing."""
    history: dict[str, list[PhaseStep]] = {}
    for key, change, before, after, at in (
        ClusterPodChange.objects.filter(cluster=cluster)
        .order_by("at", "pk")
        .values_list("pod_key", "change", "before", "after", "at")
    ):
        history.setdefault(key, []).append(PhaseStep(at=at, change=change, before=before,
                                                     after=after))
    pods = [
        StoredPod(
            pod=pod_from_state(state), workload=workload,
            history=tuple(history.get(key, ())), gone_at=deleted_at,
        )
        for key, state, workload, deleted_at in ClusterPod.objects.filter(cluster=cluster)
        .order_by("first_seen", "namespace", "name")
        .values_list("key", "state", "workload", "deleted_at")
    ]
    nodes = [
        node_from_state(state)
        for state in ClusterNode.objects.filter(cluster=cluster, deleted_at__isnull=True)
        .order_by("name")
        .values_list("state", flat=True)
    ]
    return cluster_trace(pods=pods, nodes=nodes, snapshot_at=cluster.objects_at or timezone.now())


@dataclass(frozen=True)
class Recommendations:
    priorities: dict[str, int]  # workload key -> recommended priority value
    diagnoses: dict[str, set[str]]  # workload key -> diagnosis kinds
    origin: str  # FROM_STORED | FROM_COMPUTED
    at: datetime


def cluster_recommendations(*, cluster: Cluster, now: datetime | None = None) -> Recommendations:
    """The cluster issue's recommendations per workload, stored if current, else computed."""
    stored = selectors.workload_list(cluster=cluster)
    latest = stored.aggregate(latest=Max("updated_at"))["latest"]
    if latest is not None and (cluster.objects_at is None or latest >= cluster.objects_at):
        return Recommendations(
            priorities=dict(stored.values_list("key", "recommended_priority")),
            diagnoses=selectors.workload_diagnosis_kinds(cluster=cluster),
            origin=FROM_STORED,
            at=latest,
        )
    # Imported here: the diagnoses pull in ranking and runtime, which a CSV replay never needs.
    from trustrank.cluster.services.diagnoses import cluster_diagnoses_compute

    now = now or timezone.now()
    diagnoses, recommendations = cluster_diagnoses_compute(cluster=cluster, now=now)
    kinds: dict[str, set[str]] = {}
    for diagnosis in diagnoses:
        if diagnosis.workload:
            kinds.setdefault(diagnosis.workload, set()).add(diagnosis.kind)
    return Recommendations(
        priorities={r.workload: r.recommended_priority for r in recommendations},
        diagnoses=kinds,
        origin=FROM_COMPUTED,
        at=now,
    )


@dataclass(frozen=True)
class ClusterReplayInput:
    trace: ClusterTrace
    semantic: SemanticInput
    recommendations: Recommendations

    def describe(self, *, cluster: Cluster) -> dict[str, Any]:
        """What the result records about its input."""
        return {
            "source": "cluster",
            "cluster": cluster.name,
            "snapshot_at": self.trace.snapshot_at.isoformat(),
            "origin": self.trace.origin.isoformat(),
            **self.trace.describe(),
            "recommendations": {
                "from": self.recommendations.origin,
                "at": self.recommendations.at.isoformat(),
                "pods_with_recommendation": self.semantic.recommended,
                "pods_with_declared_priority": self.semantic.declared,
                "levels": {str(v): lvl for v, lvl in sorted(self.semantic.levels.items())},
            },
        }


def cluster_replay_input(*, cluster: Cluster) -> ClusterReplayInput:
    trace = cluster_trace_load(cluster=cluster)
    recommendations = cluster_recommendations(cluster=cluster)
    semantic = cluster_hints(
        trace=trace, recommended=recommendations.priorities, diagnoses=recommendations.diagnoses
    )
    return ClusterReplayInput(trace=trace, semantic=semantic, recommendations=recommendations)
