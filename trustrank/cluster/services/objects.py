"""Kubernetes objects of a cluster: snapshots in, latest state and pod history stored.

Takes the parser's `ClusterSnapshot` (never raw bytes). Each object's parsed dataclass is
kept as JSON (`state`) and rebuilt by `pod_from_state` & co., so the diagnoses read the very
values that were uploaded without parsing kubectl JSON again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db import transaction
from django.utils import timezone

from trustrank.cluster.models import (
    Cluster,
    ClusterEvent,
    ClusterNode,
    ClusterPod,
    ClusterPodChange,
    ClusterPriorityClass,
)
from trustrank.cluster.services.entry_points import network_objects_load
from trustrank.parsers.kubernetes_history import pod_history_diff
from trustrank.parsers.kubernetes_objects import (
    ClusterSnapshot,
    Condition,
    Event,
    GpuRequest,
    Node,
    Owner,
    Pod,
    PriorityClass,
)
from trustrank.risk.cluster.findings import workload_key

CLUSTER_NAME_MAX = 120


class ClusterNameInvalid(ValueError):
    """The cluster name is empty or unusable; the receiver answers 400."""


def cluster_name_clean(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ClusterNameInvalid(
            "No cluster named: set the k8s.cluster.name resource attribute, a `cluster` "
            "external label, or the `cluster` query parameter."
        )
    if len(name) > CLUSTER_NAME_MAX or "\x00" in name or "/" in name:
        raise ClusterNameInvalid(
            f"Cluster name {name[:40]!r} is unusable: at most {CLUSTER_NAME_MAX} characters, "
            "no '/' or NUL."
        )
    return name


def cluster_get_or_create(*, team_id: int, name: str) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(team_id=team_id, name=cluster_name_clean(name))
    return cluster


def _state(value: Any) -> dict[str, Any]:
    # orjson writes (slotted) dataclasses and aware datetimes as ISO 8601 natively.
    result: dict[str, Any] = orjson.loads(orjson.dumps(value))
    return result


def _dt(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _conditions(items: Iterable[dict[str, Any]]) -> tuple[Condition, ...]:
    return tuple(
        Condition(**{**c, "last_transition": _dt(c.get("last_transition"))}) for c in items
    )


def pod_from_state(state: dict[str, Any]) -> Pod:
    return Pod(**{
        **state,
        "created": _dt(state.get("created")),
        "started": _dt(state.get("started")),
        "deleted": _dt(state.get("deleted")),
        "owner": Owner(**state["owner"]) if state.get("owner") else None,
        "containers": tuple(state.get("containers") or ()),
        "images": tuple(state.get("images") or ()),
        "conditions": _conditions(state.get("conditions") or ()),
        "gpu_request": GpuRequest(**state["gpu_request"]),
        "gpu_limit": GpuRequest(**state["gpu_limit"]),
    })


def node_from_state(state: dict[str, Any]) -> Node:
    return Node(**{
        **state,
        "created": _dt(state.get("created")),
        "conditions": _conditions(state.get("conditions") or ()),
    })


def event_from_state(state: dict[str, Any]) -> Event:
    return Event(**{
        **state,
        "first_seen": _dt(state.get("first_seen")),
        "last_seen": _dt(state.get("last_seen")),
    })


def priority_class_from_state(state: dict[str, Any]) -> PriorityClass:
    return PriorityClass(**state)


@dataclass(frozen=True)
class ObjectsLoaded:
    pods: int
    nodes: int
    events: int
    priority_classes: int
    changes: int
    network_objects: int = 0
    entry_points: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "pods": self.pods, "nodes": self.nodes, "events": self.events,
            "priority_classes": self.priority_classes, "pod_changes": self.changes,
            "network_objects": self.network_objects, "entry_points": self.entry_points,
        }


def objects_load(
    *, cluster: Cluster, snapshot: ClusterSnapshot, at: datetime | None = None
) -> ObjectsLoaded:
    """Upsert the snapshot's objects and append the pods' history. A snapshot holding pods
    is the whole pod list (what `kubectl get pods -A` returns): live pods missing from it
    are marked deleted. The same for nodes. Idempotent: the same snapshot twice records
    no second history step."""
    at = at or timezone.now()
    changes = 0
    with transaction.atomic():
        # One objects load per cluster at a time, so two diffs never see the same "before".
        Cluster.objects.select_for_update().filter(pk=cluster.pk).first()
        if snapshot.pods:
            changes = _pods_load(cluster=cluster, pods=snapshot.pods, at=at)
        if snapshot.nodes:
            _nodes_load(cluster=cluster, nodes=snapshot.nodes, at=at)
        if snapshot.priority_classes:
            ClusterPriorityClass.objects.bulk_create(
                [
                    ClusterPriorityClass(cluster=cluster, name=pc.name, value=pc.value,
                                         state=_state(pc), last_seen=at)
                    for pc in snapshot.priority_classes
                ],
                update_conflicts=True, unique_fields=["cluster", "name"],
                update_fields=["value", "state", "last_seen"],
            )
        if snapshot.events:
            _events_load(cluster=cluster, events=snapshot.events)
        # Services, Ingresses, Gateways, HTTPRoutes: which pods the internet reaches.
        entry_points = network_objects_load(
            cluster=cluster, snapshot=snapshot, at=at,
            pods=lambda: [
                pod_from_state(state)
                for state in ClusterPod.objects.filter(cluster=cluster, deleted_at__isnull=True)
                .values_list("state", flat=True)
            ],
        )
        Cluster.objects.filter(pk=cluster.pk).update(objects_at=at)
    return ObjectsLoaded(
        pods=len(snapshot.pods), nodes=len(snapshot.nodes), events=len(snapshot.events),
        priority_classes=len(snapshot.priority_classes), changes=changes,
        network_objects=len(snapshot.services) + len(snapshot.ingresses)
        + len(snapshot.gateways) + len(snapshot.http_routes),
        entry_points=entry_points,
    )


def _pods_load(*, cluster: Cluster, pods: Iterable[Pod], at: datetime) -> int:
    pods = list({pod.key: pod for pod in pods}.values())
    live = ClusterPod.objects.filter(cluster=cluster, deleted_at__isnull=True).only("state")
    before = [pod_from_state(row.state) for row in live]
    history = pod_history_diff(before=before, after=pods, at=at)
    ClusterPod.objects.bulk_create(
        [
            ClusterPod(
                cluster=cluster, key=pod.key[:300], namespace=pod.namespace, name=pod.name,
                node=pod.node, phase=pod.phase, qos_class=pod.qos_class,
                priority_class=pod.priority_class, priority=pod.priority,
                gpus=pod.gpu_request.gpus or pod.gpu_limit.gpus,
                workload=workload_key(pod)[:600], state=_state(pod),
                first_seen=pod.created or at, last_seen=at, deleted_at=pod.deleted,
            )
            for pod in pods
        ],
        update_conflicts=True, unique_fields=["cluster", "key"],
        update_fields=["node", "phase", "qos_class", "priority_class", "priority", "gpus",
                       "workload", "state", "last_seen", "deleted_at"],
    )
    gone = [c.pod_key for c in history if c.change == "deleted"]
    if gone:
        ClusterPod.objects.filter(cluster=cluster, key__in=gone).update(deleted_at=at)
    ClusterPodChange.objects.bulk_create(
        [
            ClusterPodChange(cluster=cluster, pod_key=c.pod_key[:300], namespace=c.namespace,
                             name=c.name, change=c.change, before=c.before[:253],
                             after=c.after[:253], at=c.at)
            for c in history
        ]
    )
    return len(history)


def _nodes_load(*, cluster: Cluster, nodes: Iterable[Node], at: datetime) -> None:
    nodes = list({node.name: node for node in nodes}.values())
    ClusterNode.objects.bulk_create(
        [
            ClusterNode(cluster=cluster, name=node.name, gpu_product=node.gpu_product[:200],
                        allocatable_gpus=node.allocatable_gpus, state=_state(node),
                        first_seen=node.created or at, last_seen=at, deleted_at=None)
            for node in nodes
        ],
        update_conflicts=True, unique_fields=["cluster", "name"],
        update_fields=["gpu_product", "allocatable_gpus", "state", "last_seen", "deleted_at"],
    )
    ClusterNode.objects.filter(cluster=cluster, deleted_at__isnull=True).exclude(
        name__in=[n.name for n in nodes]
    ).update(deleted_at=at)


def _events_load(*, cluster: Cluster, events: Iterable[Event]) -> None:
    by_key = {f"{e.namespace}/{e.name}"[:510]: e for e in events}
    ClusterEvent.objects.bulk_create(
        [
            ClusterEvent(
                cluster=cluster, key=key, reason=e.reason[:128], type=e.type[:16],
                message=e.message, object_kind=e.object_kind[:64],
                object_namespace=e.object_namespace[:253], object_name=e.object_name[:253],
                count=e.count, state=_state(e), first_seen=e.first_seen, last_seen=e.last_seen,
            )
            for key, e in by_key.items()
        ],
        update_conflicts=True, unique_fields=["cluster", "key"],
        update_fields=["reason", "type", "message", "count", "state", "last_seen"],
    )


def snapshot_current(*, cluster: Cluster) -> ClusterSnapshot:
    """The cluster as last uploaded (live pods and nodes, every event and class)."""
    return ClusterSnapshot(
        pods=tuple(
            pod_from_state(s)
            for s in ClusterPod.objects.filter(cluster=cluster, deleted_at__isnull=True)
            .values_list("state", flat=True)
        ),
        nodes=tuple(
            node_from_state(s)
            for s in ClusterNode.objects.filter(cluster=cluster, deleted_at__isnull=True)
            .values_list("state", flat=True)
        ),
        events=tuple(
            event_from_state(s)
            for s in ClusterEvent.objects.filter(cluster=cluster).values_list("state", flat=True)
        ),
        priority_classes=tuple(
            priority_class_from_state(s)
            for s in ClusterPriorityClass.objects.filter(cluster=cluster)
            .values_list("state", flat=True)
        ),
    )
