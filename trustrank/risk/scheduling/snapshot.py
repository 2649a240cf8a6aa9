"""A team's own cluster, as stored from `kubectl get pods,nodes -o json` snapshots, turned
into the arrays the replay takes (`Workload`, `ClusterSpec`) and, for the semantic-aware
policy, per-pod hints from the cluster issue's recommended priorities and diagnoses.

Input is plain records (the parser's `Pod` and `Node` plus each pod's recorded phase
history), never the ORM: the cluster app reads storage and hands them over.

GPU requests become the replay's shape `(num_gpu, gpu_milli)` — `gpu_milli` thousandths of
*one* GPU per GPU asked for:

| request | shape |
| --- | --- |
| `nvidia.com/gpu: n` (alone) | n whole GPUs |
| `gpu-fraction` annotation f | one GPU at f |
| `nvidia.com/gpucores` c (HAMi) | one GPU at c % (with `nvidia.com/gpu: 1`, the same) |
| `nvidia.com/mig-<g>g.*` | one GPU at g/7 |
| GPU memory only (1) | one GPU at memory / the cluster's GPU memory (2) |
| `nvidia.com/gpu.shared` | one GPU at 1/replicas per replica (3) |

(1) `nvidia.com/gpumem`, `aliyun.com/gpu-mem`, the `gpu-memory` annotation; (2) the median
`nvidia.com/gpu.memory` node label; (3) time-slicing, `nvidia.com/gpu.replicas` node label.

A share whose size no node label gives counts as a whole GPU (over-reserving, never
over-packing).

Sources of one share (cores and memory of one HAMi vGPU, say) describe the same slice, so
the largest counts, not their sum. A share above one GPU, or a share asked on several GPUs,
becomes whole GPUs: the replay (like the openb trace) shares only single-GPU requests.

Lifetimes come from the recorded history (`ClusterPodChange`): a pod starts when it was
first seen running (its `status.startTime` when it has one) and ends when it was first seen
finished or gone (for a pod first seen already finished, its latest condition change);
one still running ends at the snapshot time. A pod that never ran keeps creation → gone
(or the snapshot time): the time it was wanted, as openb's never-scheduled pods do.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from trustrank.parsers.kubernetes_objects import GpuRequest, Node, Pod
from trustrank.risk.scheduling.state import (
    MILLI,
    ClusterSpec,
    IntArray,
    Workload,
    workload_from_arrays,
)
from trustrank.risk.scheduling.timeline import SemanticHint

RAN = frozenset({"Running", "Succeeded", "Failed"})
FINISHED = frozenset({"Succeeded", "Failed"})
MIB = 2.0**20


class SnapshotError(ValueError):
    """The stored cluster cannot be replayed; the message names what is missing."""


@dataclass(frozen=True, slots=True)
class PhaseStep:
    """One recorded step of a pod's history (`ClusterPodChange`)."""

    at: datetime
    change: str  # created | phase | node | deleted
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class StoredPod:
    pod: Pod
    workload: str  # namespace/Kind/name of the owner
    history: tuple[PhaseStep, ...] = ()
    gone_at: datetime | None = None  # when storage saw it leave the pod list


@dataclass(frozen=True)
class ClusterTrace:
    """The replay's arrays plus, per pod, its owner and declared priority."""

    workload: Workload
    spec: ClusterSpec
    owners: tuple[str, ...]
    declared: IntArray  # declared priority value, 0 when none
    priority_classes: tuple[str, ...]
    origin: datetime  # replay time 0
    snapshot_at: datetime
    gpu_pods: int
    shared_gpu_pods: int
    running_at_snapshot: int

    def describe(self) -> dict[str, int]:
        return {
            "pods": len(self.workload),
            "gpu_pods": self.gpu_pods,
            "shared_gpu_pods": self.shared_gpu_pods,
            "running_at_snapshot": self.running_at_snapshot,
            "nodes": len(self.spec),
            "gpus": int(self.spec.gpus.sum()),
        }


def _label_number(labels: Mapping[str, str], key: str) -> float:
    try:
        return float(labels.get(key, "") or 0)
    except ValueError:
        return 0.0


def node_gpus(node: Node) -> int:
    """Physical GPUs a node offers: GPU feature discovery's `nvidia.com/gpu.count` label
    when present; otherwise its allocatable GPUs, with time-sliced replicas folded back
    into the GPUs they share."""
    count = _label_number(node.labels, "nvidia.com/gpu.count")
    if count > 0:
        return int(count)
    replicas = max(1.0, _label_number(node.labels, "nvidia.com/gpu.replicas"))
    return int(node.allocatable_gpus // replicas) if replicas > 1 else int(node.allocatable_gpus)


def gpu_shape(
    gpu: GpuRequest, *, gpu_memory_mib: float = 0.0, replicas: int = 0
) -> tuple[int, int]:
    """`(num_gpu, gpu_milli)` of a pod's GPU request (see the module docstring)."""
    share = max(
        gpu.fraction,
        gpu.cores_percent / 100.0,
        gpu.mig_slices / 7.0,
        gpu.memory_mib / gpu_memory_mib if gpu.memory_mib and gpu_memory_mib > 0 else 0.0,
        gpu.shared / replicas if gpu.shared and replicas > 0 else 0.0,
    )
    unknown = (gpu.memory_mib and gpu_memory_mib <= 0) or (gpu.shared and replicas <= 0)
    whole = math.ceil(gpu.whole - 1e-9) if gpu.whole > 0 else 0
    if whole > 1 or share > 1.0 + 1e-9:
        return max(whole, math.ceil(share - 1e-9)), MILLI
    if 0 < share < 1.0 - 1e-9 and whole <= 1:
        return 1, max(1, min(MILLI, round(share * MILLI)))
    if whole == 1 or share > 0 or unknown:
        return 1, MILLI
    return 0, 0


def _seconds(value: datetime) -> float:
    return value.timestamp()


def pod_lifetime(
    item: StoredPod, *, snapshot_at: datetime
) -> tuple[datetime, datetime | None, datetime]:
    """(created, started or None if it never ran, end)."""
    pod = item.pod
    created = pod.created or (item.history[0].at if item.history else snapshot_at)
    seen_running = [
        s.at for s in item.history if s.change in ("created", "phase") and s.after in RAN
    ]
    seen_finished = [
        s.at for s in item.history if s.change in ("created", "phase") and s.after in FINISHED
    ]
    gone = [s.at for s in item.history if s.change == "deleted"]
    if item.gone_at is not None:
        gone.append(item.gone_at)
    if pod.deleted is not None:
        gone.append(pod.deleted)
    ran = pod.phase in RAN or bool(seen_running)
    started: datetime | None = None
    if ran:
        started = pod.started or (min(seen_running) if seen_running else created)
        started = max(started, created)
    finished_steps = [s for s in item.history if s.change == "phase" and s.after in FINISHED]
    if finished_steps:
        end = min(s.at for s in finished_steps)
    elif pod.phase in FINISHED or seen_finished:
        # First seen already finished: its conditions' last change is when it stopped.
        changed = [c.last_transition for c in pod.conditions if c.last_transition is not None]
        end = max(changed) if changed else (min(gone) if gone else snapshot_at)
    elif gone:
        end = min(gone)
    else:
        end = snapshot_at
    return created, started, end


def cluster_trace(
    *, pods: Sequence[StoredPod], nodes: Sequence[Node], snapshot_at: datetime
) -> ClusterTrace:
    """Arrays for the replay from stored pods (live and gone) and the live nodes. Cordoned
    nodes are left out: the scheduler places nothing there. Raises `SnapshotError` naming
    what is missing when there is nothing to replay."""
    if not nodes:
        raise SnapshotError(
            "no nodes are stored for this cluster; upload `kubectl get nodes -o json`"
        )
    usable = [n for n in nodes if not n.unschedulable]
    if not usable:
        raise SnapshotError("every stored node is cordoned (unschedulable); nothing can be placed")
    gpus = np.array([node_gpus(n) for n in usable], dtype=np.int64)
    if int(gpus.sum()) == 0:
        raise SnapshotError(
            "no GPU nodes: no stored node has an allocatable GPU (nvidia.com/gpu); the replay "
            "measures GPU placement"
        )
    memories = [n.gpu_memory_mib for n in usable if n.gpu_memory_mib > 0]
    gpu_memory = float(np.median(memories)) if memories else 0.0
    replicas = int(max((_label_number(n.labels, "nvidia.com/gpu.replicas") for n in usable),
                       default=0))
    shapes = [
        gpu_shape(p.pod.gpu_request if p.pod.gpu_request.any else p.pod.gpu_limit,
                  gpu_memory_mib=gpu_memory, replicas=replicas)
        for p in pods
    ]
    gpu_pods = sum(1 for k, _ in shapes if k > 0)
    if not pods:
        raise SnapshotError(
            "no GPU pods: no pods are stored for this cluster; upload "
            "`kubectl get pods -A -o json`"
        )
    if gpu_pods == 0:
        raise SnapshotError(
            f"no GPU pods: none of the {len(pods)} stored pods requests a GPU; the replay "
            "measures GPU placement"
        )
    lifetimes = [pod_lifetime(p, snapshot_at=snapshot_at) for p in pods]
    origin = min(created for created, _, _ in lifetimes)
    creation, duration = [], []
    for created, started, end in lifetimes:
        creation.append(int(_seconds(created) - _seconds(origin)))
        begin = started if started is not None else created
        duration.append(max(1, round(_seconds(end) - _seconds(begin))))
    names = _unique_names([f"{p.pod.namespace}/{p.pod.name}" for p in pods])
    spec = ClusterSpec(
        names=tuple(n.name for n in usable),
        cpu=np.array([round(n.allocatable_cpu * 1000) for n in usable], dtype=np.int64),
        mem=np.array([int(n.allocatable_memory // MIB) for n in usable], dtype=np.int64),
        gpus=gpus,
        models=tuple(n.gpu_product for n in usable),
    )
    workload = workload_from_arrays(
        names=names,
        cpu=np.array([math.ceil(p.pod.cpu_request * 1000 - 1e-9) for p in pods], dtype=np.int64),
        mem=np.array([math.ceil(p.pod.memory_request / MIB - 1e-9) for p in pods],
                     dtype=np.int64),
        num_gpu=np.array([k for k, _ in shapes], dtype=np.int64),
        gpu_milli=np.array([g for _, g in shapes], dtype=np.int64),
        qos=tuple(p.pod.qos_class or "BestEffort" for p in pods),
        gpu_spec=tuple("" for _ in pods),
        creation=np.array(creation, dtype=np.int64),
        duration=np.array(duration, dtype=np.int64),
    )
    return ClusterTrace(
        workload=workload,
        spec=spec,
        owners=tuple(p.workload for p in pods),
        declared=np.array([p.pod.priority or 0 for p in pods], dtype=np.int64),
        priority_classes=tuple(p.pod.priority_class for p in pods),
        origin=origin,
        snapshot_at=snapshot_at,
        gpu_pods=gpu_pods,
        shared_gpu_pods=sum(1 for k, g in shapes if k == 1 and g < MILLI),
        running_at_snapshot=sum(
            1 for p, (_, started, end) in zip(pods, lifetimes, strict=True)
            if started is not None and end >= snapshot_at and p.pod.phase == "Running"
        ),
    )


def _unique_names(names: Sequence[str]) -> tuple[str, ...]:
    """A pod deleted and re-created under its name is two pods: the later ones get #2, #3."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return tuple(out)


@dataclass(frozen=True)
class SemanticInput:
    hints: dict[str, SemanticHint]
    recommended: int  # pods whose workload has a recommendation
    declared: int  # pods that fell back to their declared priority
    levels: dict[int, int]  # priority value -> level (1 = least urgent)


def cluster_hints(
    *,
    trace: ClusterTrace,
    recommended: Mapping[str, int],
    diagnoses: Mapping[str, Collection[str]],
) -> SemanticInput:
    """Per pod: its workload's recommended priority as a level (dense rank over the values
    in play, 1 the lowest) and the diagnosis kinds on that workload. Recommended values are
    on the PriorityClass scale (the tiers' values), so a pod whose workload has no
    recommendation yet keeps its declared value on the same scale."""
    values = []
    from_recommendation = 0
    for owner, declared in zip(trace.owners, trace.declared, strict=True):
        if owner in recommended:
            values.append(int(recommended[owner]))
            from_recommendation += 1
        else:
            values.append(int(declared))
    levels = {v: i + 1 for i, v in enumerate(sorted(set(values)))}
    hints = {
        name: SemanticHint(
            priority=levels[value], diagnoses=tuple(sorted(diagnoses.get(owner, ())))
        )
        for name, owner, value in zip(trace.workload.names, trace.owners, values, strict=True)
    }
    return SemanticInput(
        hints=hints,
        recommended=from_recommendation,
        declared=len(values) - from_recommendation,
        levels=levels,
    )
