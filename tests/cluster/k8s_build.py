"""Kubernetes objects as kubectl prints them, for the parser and diagnosis tests."""

from __future__ import annotations

from typing import Any

import orjson


def pod(
    name: str, *, namespace: str = "ml", uid: str | None = None, node: str = "",
    phase: str = "Running", qos: str | None = "Guaranteed", priority: int | None = None,
    priority_class: str = "", gpus: str | int | None = None, cpu: str = "1", memory: str = "1Gi",
    owner: tuple[str, str] | None = None, labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None, created: str = "2026-11-30T10:00:00Z",
    scheduled: str | None = None, extra_resources: dict[str, Any] | None = None,
    conditions: list[dict[str, Any]] | None = None, nominated: str = "",
) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    limits.update(extra_resources or {})
    metadata: dict[str, Any] = {
        "name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}",
        "creationTimestamp": created, "labels": labels or {}, "annotations": annotations or {},
    }
    if owner:
        metadata["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "uid": "o", "controller": True}]
    status: dict[str, Any] = {"phase": phase, "conditions": list(conditions or [])}
    if qos:
        status["qosClass"] = qos
    if scheduled:
        status["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled})
    elif phase == "Pending" and not node:
        status["conditions"].append({"type": "PodScheduled", "status": "False", "lastTransitionTime": created,
                                     "reason": "Unschedulable"})
    if nominated:
        status["nominatedNodeName"] = nominated
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"limits": limits, "requests": dict(limits)}}]}
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec, "status": status}


def node(name: str, *, gpus: int = 8, cpu: str = "96", memory: str = "1Ti", product: str = "NVIDIA-H100-80GB-HBM3",
         unschedulable: bool = False) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus), "pods": "110"}
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"nvidia.com/gpu.product": product,
                                                                    "nvidia.com/gpu.memory": "81559"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {"capacity": resources, "allocatable": resources, "conditions": []},
    }


def event(reason: str, *, name: str, namespace: str = "ml", kind: str = "Pod", message: str = "",
          count: int = 1, first: str = "2026-11-30T10:05:00Z", last: str = "2026-11-30T10:06:00Z") -> dict[str, Any]:
    return {
        "kind": "Event", "apiVersion": "v1",
        "metadata": {"name": f"{name}.{reason.lower()}", "namespace": namespace},
        "involvedObject": {"kind": kind, "name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "reason": reason, "message": message, "type": "Warning", "count": count,
        "firstTimestamp": first, "lastTimestamp": last, "source": {"component": "default-scheduler"},
    }


def listing(*items: dict[str, Any]) -> bytes:
    return orjson.dumps({"kind": "List", "apiVersion": "v1", "items": list(items)})
