"""A small stored cluster for the replay: one node with one GPU and three GPU pods of equal
declared priority, where the order they get the GPU is known.

t=0   warm-0 (Job warm) starts; it finishes at t=100
t=10  train-0 (Job train, batch training) arrives and waits for the GPU
t=20  web-… (Deployment web, a service) arrives and waits for the GPU

The cluster issue recommends the service above batch training. Static weights (all three are
Guaranteed) give the GPU to train-0, which came first; the semantic-aware policy to web.
"""

from __future__ import annotations

from typing import Any

from tests.cluster import k8s_build as k8s


def _started(pod: dict[str, Any], at: str) -> dict[str, Any]:
    pod["status"]["startTime"] = at
    return pod


def contended_objects() -> bytes:
    warm = _started(
        k8s.pod("warm-0", node="n1", phase="Succeeded", gpus=1, owner=("Job", "warm"),
                created="2026-11-30T10:00:00Z", scheduled="2026-11-30T10:00:00Z"),
        "2026-11-30T10:00:00Z",
    )
    warm["status"]["conditions"].append({
        "type": "Ready", "status": "False", "reason": "PodCompleted",
        "lastTransitionTime": "2026-11-30T10:01:40Z",
    })
    train = _started(
        k8s.pod("train-0", node="n1", gpus=1, owner=("Job", "train"),
                created="2026-11-30T10:00:10Z", scheduled="2026-11-30T10:01:40Z"),
        "2026-11-30T10:01:40Z",
    )
    web = k8s.pod("web-5d9f-abcde", phase="Pending", gpus=1, owner=("ReplicaSet", "web-5d9f"),
                  labels={"pod-template-hash": "5d9f"}, created="2026-11-30T10:00:20Z")
    # A CPU-only pod: it takes CPU and memory, not the GPU.
    sidecar = k8s.pod("metrics-0", namespace="ops", node="n1", qos="Burstable", cpu="500m",
                      memory="256Mi", owner=("DaemonSet", "metrics"),
                      created="2026-11-30T09:00:00Z")
    return k8s.listing(k8s.node("n1", gpus=1), warm, train, web, sidecar)


def gpu_less_objects() -> bytes:
    """Nodes and pods, but no pod asks for a GPU."""
    return k8s.listing(k8s.node("n1", gpus=1), k8s.pod("api-0", node="n1"))


def pods_only_objects() -> bytes:
    return k8s.listing(k8s.pod("train-0", gpus=1, phase="Pending"))
