"""GPU reservations: over-reserved and evictable pods (formula 11), fragmentation
(formula 2)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trustrank.parsers.kubernetes_objects import Node, Pod
from trustrank.risk.cluster.findings import (
    Diagnosis,
    Samples,
    Severity,
    SubjectKind,
    evidence,
    in_window,
    percentile,
    pod_subject,
    workload_key,
)
from trustrank.risk.cluster.settings import DEFAULT_THRESHOLDS, ClusterThresholds

# DCGM_FI_DEV_GPU_UTIL is a percentage; DCGM_FI_PROF_GR_ENGINE_ACTIVE a ratio 0..1.
UTILISATION_METRICS = {"DCGM_FI_DEV_GPU_UTIL": 1.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 100.0}


def utilisation_percent(*, metric: str, value: float) -> float:
    """A DCGM utilisation sample in percent, whichever of the two metrics it came from."""
    return value * UTILISATION_METRICS.get(metric, 1.0)


def over_reserved_diagnose(
    *, pods: Iterable[Pod], utilisation: Mapping[str, Samples], now: float,
    thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    """Guaranteed pods holding GPUs whose utilisation (percent, keyed by "namespace/pod";
    average the pod's GPUs before calling when it has several) stays under the threshold
    over the window ending at `now`."""
    limit = thresholds.over_reserved_util_percent
    window = thresholds.over_reserved_window_s
    found = []
    for pod in pods:
        if pod.qos_class != "Guaranteed" or not pod.gpu_request.any or pod.phase != "Running":
            continue
        samples = in_window(utilisation.get(pod_subject(pod), ()), start=now - window, end=now)
        if len(samples) < thresholds.over_reserved_min_samples:
            continue
        covered = samples[-1][0] - samples[0][0]
        if covered < window * thresholds.over_reserved_min_coverage:
            continue
        values = [v for _, v in samples]
        p95 = percentile(values, 0.95)
        if p95 >= limit:
            continue
        mean = sum(values) / len(values)
        gpus = pod.gpu_request.gpus or pod.gpu_request.shared
        found.append(Diagnosis(
            kind="gpu_over_reserved", subject_kind=SubjectKind.POD, subject=pod_subject(pod),
            severity=Severity.HIGH if p95 < limit / 4 and gpus >= 1 else Severity.MEDIUM,
            title=(
                f"Guaranteed pod {pod_subject(pod)} reserves {gpus:g} GPU(s) but uses "
                f"under {limit:g}% (p95 {p95:.1f}%)"
            ),
            evidence=evidence(
                qos_class=pod.qos_class, gpus=gpus, window_s=window, samples=len(samples),
                p95_percent=round(p95, 3), mean_percent=round(mean, 3),
                threshold_percent=limit,
            ),
            workload=workload_key(pod),
        ))
    return found


# How a training pod is recognised (any one suffices; the reasons are kept as evidence).
TRAINING_OWNER_KINDS = frozenset({
    "Job", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob",
    "MXJob", "TrainJob", "RayJob", "VolcanoJob",
})
TRAINING_LABELS = (
    "training.kubeflow.org/job-name", "training.kubeflow.org/replica-type",
    "trainer.kubeflow.org/trainjob-name", "volcano.sh/job-name",
)
# app.kubernetes.io/component and the common ad-hoc keys, when their value names training.
TRAINING_LABEL_VALUES = ("app.kubernetes.io/component", "workload-type", "workload.type", "role")
_TRAINING_WORD = re.compile(r"(?:^|[-_.])(train|training|trainer|finetune|fine-tune|pretrain)")


def training_signals(pod: Pod) -> list[str]:
    """Why a pod looks like training; empty when it does not. Owner kinds and labels are
    strong signals; a name containing train/trainer/finetune is the weak fallback."""
    reasons = []
    if pod.owner is not None and pod.owner.kind in TRAINING_OWNER_KINDS:
        reasons.append(f"owner kind {pod.owner.kind}")
    reasons.extend(f"label {key}" for key in TRAINING_LABELS if key in pod.labels)
    for key in TRAINING_LABEL_VALUES:
        value = pod.labels.get(key, "").lower()
        if value and _TRAINING_WORD.search(value):
            reasons.append(f"label {key}={value}")
    if not reasons:
        names = [pod.name, *(pod.containers)]
        if pod.owner is not None:
            names.append(pod.owner.name)
        for name in names:
            if _TRAINING_WORD.search(name.lower()):
                reasons.append(f"name {name}")
                break
    return reasons


def evictable_training_diagnose(*, pods: Iterable[Pod]) -> list[Diagnosis]:
    """BestEffort or Burstable pods that hold GPUs for training: the kubelet evicts them
    first under node pressure, losing the work since the last checkpoint."""
    found = []
    for pod in pods:
        if pod.qos_class not in ("BestEffort", "Burstable") or not pod.gpu_request.any:
            continue
        if pod.phase not in ("Running", "Pending"):
            continue
        reasons = training_signals(pod)
        if not reasons:
            continue
        gpus = pod.gpu_request.gpus or pod.gpu_request.shared
        found.append(Diagnosis(
            kind="gpu_training_evictable", subject_kind=SubjectKind.POD,
            subject=pod_subject(pod),
            severity=Severity.HIGH if pod.qos_class == "BestEffort" else Severity.MEDIUM,
            title=f"{pod.qos_class} training pod {pod_subject(pod)} holds {gpus:g} GPU(s)",
            evidence=evidence(
                qos_class=pod.qos_class, gpus=gpus, training_signals=reasons,
                priority_class=pod.priority_class, priority=pod.priority,
            ),
            workload=workload_key(pod),
        ))
    return found


# --- fragmentation -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GpuMemory:
    """Framebuffer of one GPU (DCGM_FI_DEV_FB_FREE / _USED / _RESERVED, MiB)."""

    node: str
    gpu: str  # the `gpu` index label, or the UUID
    free_mib: float
    used_mib: float
    reserved_mib: float = 0.0

    @property
    def total_mib(self) -> float:
        return self.free_mib + self.used_mib + self.reserved_mib


@dataclass(frozen=True, slots=True)
class Fragmentation:
    subject_kind: SubjectKind  # GPU or NODE
    subject: str
    total: float  # MiB for a GPU, GPUs for a node
    max_contiguous_free: float
    free: float

    @property
    def index(self) -> float:
        """Formula 2: FI = 1 − max_contiguous_free / total."""
        if self.total <= 0:
            return 0.0
        return 1.0 - self.max_contiguous_free / self.total


def gpu_fragmentation(*, gpus: Iterable[GpuMemory]) -> list[Fragmentation]:
    """FI per GPU. DCGM reports free framebuffer, not its largest contiguous block; the
    largest allocation that can succeed is at most the free amount, so this FI is a lower
    bound of the real one."""
    return [
        Fragmentation(
            subject_kind=SubjectKind.GPU, subject=f"{gpu.node}/{gpu.gpu}",
            total=gpu.total_mib, max_contiguous_free=gpu.free_mib, free=gpu.free_mib,
        )
        for gpu in gpus
    ]


def _holds_node(pod: Pod) -> bool:
    return bool(pod.node) and pod.phase in ("Running", "Pending") and pod.deleted is None


def node_fragmentation(*, nodes: Iterable[Node], pods: Iterable[Pod]) -> list[Fragmentation]:
    """FI per node from allocations. A whole-GPU request needs untouched GPUs, so the
    node's contiguous free capacity is its GPUs that no pod holds any part of. Fractional
    holders (MIG slices, shares, fractions) are assumed packed onto as few GPUs as
    possible (ceil of their sum), the best case; the FI is again a lower bound."""
    whole: dict[str, float] = {}
    partial: dict[str, float] = {}
    for pod in pods:
        if not _holds_node(pod) or not pod.gpu_request.any:
            continue
        gpu = pod.gpu_request
        whole[pod.node] = whole.get(pod.node, 0.0) + gpu.whole
        fraction = gpu.gpus - gpu.whole
        if not fraction and gpu.shared:
            # A time-sliced or memory share of unknown size: it pins at least one GPU.
            fraction = 1e-9
        partial[pod.node] = partial.get(pod.node, 0.0) + fraction
    result = []
    for node in nodes:
        if node.allocatable_gpus <= 0:
            continue
        total = node.allocatable_gpus
        used_whole = whole.get(node.name, 0.0)
        used_partial = partial.get(node.name, 0.0)
        untouched = max(0.0, total - used_whole - math.ceil(used_partial - 1e-12))
        free = max(0.0, total - used_whole - used_partial)
        result.append(Fragmentation(
            subject_kind=SubjectKind.NODE, subject=node.name, total=total,
            max_contiguous_free=untouched, free=free,
        ))
    return result


def fragmentation_diagnose(
    *, nodes: Sequence[Node], pods: Sequence[Pod], gpus: Sequence[GpuMemory] = (),
    thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    """A finding per pending pod whose GPU request fits the cluster's free total but no
    single node (whole GPUs) or no single GPU (memory requests); and one per node whose
    FI reaches the threshold while it has free capacity stranded in partial GPUs."""
    per_node = node_fragmentation(nodes=nodes, pods=pods)
    per_gpu = gpu_fragmentation(gpus=gpus)
    schedulable = {node.name for node in nodes if not node.unschedulable}
    free_total = sum(item.free for item in per_node if item.subject in schedulable)
    best_node = max(
        (item.max_contiguous_free for item in per_node if item.subject in schedulable),
        default=0.0,
    )
    free_mib_total = sum(item.free for item in per_gpu)
    best_gpu_mib = max((item.free for item in per_gpu), default=0.0)
    found = []
    for pod in pods:
        if pod.phase != "Pending" or pod.node or not pod.gpu_request.any:
            continue
        need = pod.gpu_request.gpus
        need_mib = pod.gpu_request.memory_mib
        blocked_whole = need > 0 and need <= free_total and need > best_node
        blocked_memory = (
            need_mib > 0 and per_gpu and need_mib <= free_mib_total and need_mib > best_gpu_mib
        )
        if not (blocked_whole or blocked_memory):
            continue
        found.append(Diagnosis(
            kind="gpu_fragmentation_blocks_pod", subject_kind=SubjectKind.POD,
            subject=pod_subject(pod), severity=Severity.HIGH,
            title=(
                f"Pending pod {pod_subject(pod)} fits the cluster's free GPUs but no single "
                f"{'node' if blocked_whole else 'GPU'}"
            ),
            evidence=evidence(
                requested_gpus=need, requested_memory_mib=need_mib,
                cluster_free_gpus=round(free_total, 6), largest_node_free_gpus=best_node,
                cluster_free_memory_mib=free_mib_total, largest_gpu_free_memory_mib=best_gpu_mib,
            ),
            workload=workload_key(pod),
        ))
    for item in per_node:
        stranded = item.free - item.max_contiguous_free
        if item.index >= thresholds.fragmentation_index and stranded > 1e-6:
            found.append(Diagnosis(
                kind="gpu_fragmentation", subject_kind=SubjectKind.NODE, subject=item.subject,
                severity=Severity.LOW,
                title=(
                    f"Node {item.subject}: FI {item.index:.2f}, {stranded:g} GPU(s) of free "
                    f"capacity stranded in partly used GPUs"
                ),
                evidence=evidence(
                    fi=round(item.index, 6), total_gpus=item.total,
                    max_contiguous_free_gpus=item.max_contiguous_free, free_gpus=item.free,
                    threshold=thresholds.fragmentation_index,
                ),
            ))
    return found
