"""What a cluster snapshot holds (`ClusterSnapshot` and its pods, nodes, events and
priority classes), as `kubernetes.kubernetes_parse` reads them, and Kubernetes resource
quantities.

GPU requests a pod can make, and how they are read (`GpuRequest`):

| where | key | meaning |
| --- | --- | --- |
| resources | `nvidia.com/gpu` | whole GPUs (device plugin) |
| resources | `nvidia.com/gpu.shared` | time-sliced replicas (device plugin `renameByDefault`) |
| resources | `nvidia.com/mig-<g>g.<mem>gb` | a MIG slice: g of 7 compute slices of one GPU |
| resources | `nvidia.com/gpumem` (MiB), `nvidia.com/gpucores` (% of one GPU) | HAMi-style sharing |
| resources | `aliyun.com/gpu-mem` (GiB) | Alibaba GPU sharing by memory |
| annotations | `gpu-fraction` (0–1), `gpu-memory` (MiB) | fractional GPUs (Run:ai style) |

`GpuRequest.gpus` is the GPU count a pod holds for the diagnoses: whole GPUs, plus MIG
slices as g/7, plus cores/100, plus an annotated fraction; memory-only requests count
as a share of one GPU (`shared`) since their fraction depends on the node's GPU.
Extended resources have request = limit by Kubernetes rule, so limits are used when
requests are absent. Pod totals follow the scheduler: max(largest init container, sum of
app containers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from trustrank.parsers import kubernetes_network as network

_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_SUFFIX = {
    None: 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
    "Pi": 2.0**50, "Ei": 2.0**60,
}


def quantity_parse(value: object) -> float:
    """A Kubernetes resource quantity ("500m", "16Gi", "1e3", 2) as a float in base units
    (cores, bytes, devices). Raises ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = match.groups()
    result = float(number + (exponent or ""))
    return result * _SUFFIX[suffix]


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    last_transition: datetime | None
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class Owner:
    kind: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class GpuRequest:
    whole: float = 0.0  # nvidia.com/gpu
    shared: float = 0.0  # nvidia.com/gpu.shared replicas, or memory-only shares
    mig_slices: float = 0.0  # in sevenths of a GPU
    cores_percent: float = 0.0  # nvidia.com/gpucores
    memory_mib: float = 0.0  # nvidia.com/gpumem, aliyun.com/gpu-mem, gpu-memory annotation
    fraction: float = 0.0  # gpu-fraction annotation

    @property
    def gpus(self) -> float:
        return self.whole + self.mig_slices / 7 + self.cores_percent / 100 + self.fraction

    @property
    def any(self) -> bool:
        return bool(self.gpus or self.shared or self.memory_mib)


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    namespace: str
    uid: str
    node: str
    phase: str
    qos_class: str  # Guaranteed | Burstable | BestEffort
    priority_class: str
    priority: int | None
    created: datetime | None
    started: datetime | None
    owner: Owner | None
    containers: tuple[str, ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    conditions: tuple[Condition, ...]
    gpu_request: GpuRequest
    gpu_limit: GpuRequest
    cpu_request: float  # cores
    memory_request: float  # bytes
    deleted: datetime | None = None
    nominated_node: str = ""
    # The app containers' images (`spec.containers[].image`), in order: what the pod runs
    # (a vLLM or Triton server tells an inference workload).
    images: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.uid or f"{self.namespace}/{self.name}"

    def condition(self, kind: str) -> Condition | None:
        for item in self.conditions:
            if item.type == kind:
                return item
        return None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    uid: str
    labels: Mapping[str, str]
    capacity_gpus: float
    allocatable_gpus: float
    allocatable_cpu: float
    allocatable_memory: float
    gpu_product: str  # nvidia.com/gpu.product label (GPU feature discovery)
    gpu_memory_mib: float  # nvidia.com/gpu.memory label, 0 when absent
    unschedulable: bool
    conditions: tuple[Condition, ...]
    created: datetime | None


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    namespace: str
    reason: str
    type: str  # Normal | Warning
    message: str
    object_kind: str
    object_name: str
    object_namespace: str
    object_uid: str
    first_seen: datetime | None
    last_seen: datetime | None
    count: int
    source: str

    @property
    def is_oom(self) -> bool:
        return self.reason in ("OOMKilling", "OOMKilled") or "OOM" in self.reason


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: str  # PreemptLowerPriority | Never
    global_default: bool
    description: str = ""


@dataclass(frozen=True, slots=True)
class RejectedObject:
    kind: str
    name: str  # namespace/name, or name; NULs and other controls shown escaped
    problem: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "problem": self.problem}


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    pods: tuple[Pod, ...] = ()
    nodes: tuple[Node, ...] = ()
    events: tuple[Event, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    # How traffic reaches pods (kubernetes_network): the entry points from the internet.
    services: tuple[network.KubeService, ...] = ()
    ingresses: tuple[network.KubeIngress, ...] = ()
    gateways: tuple[network.Gateway, ...] = ()
    http_routes: tuple[network.HttpRoute, ...] = ()
    ignored: Mapping[str, int] = field(default_factory=dict)
    rejected: tuple[RejectedObject, ...] = ()
