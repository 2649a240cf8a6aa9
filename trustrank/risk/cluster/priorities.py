"""Declared vs recommended priority per workload (pod owner).

The recommendation is a 0–100 score: a base from what the workload serves, shifted by
its diagnoses, then mapped to a tier and the tier's priority value
(`ClusterThresholds.tier_priorities`, which operators align with their PriorityClasses).

| what it serves | base |
| --- | --- |
| latency-sensitive inference on an internet path | 80 (latency-critical) |
| latency-sensitive, internal only | 65 (latency-sensitive) |
| an inference server (vLLM metrics, its image or labels; `inference.py`) | 65 (latency-sensitive) |
| anything else that is not training | 45 (service) |
| training / batch | 25 (batch-training) |

Diagnoses on the workload's pods add urgency (it is being starved) or take it away (it
holds more than it uses); when its token throughput is unstable (formula 4) the urgency
it gains is multiplied by the re-estimation weight (1.8). Tiers by score: ≥75
latency-critical, ≥55 latency-sensitive, ≥35 service, ≥15 batch-training, else
best-effort. `direction` compares the tier's value with the declared priority value.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from trustrank.parsers.kubernetes_objects import Pod
from trustrank.risk.cluster.findings import Diagnosis, workload_key
from trustrank.risk.cluster.gpu import training_signals
from trustrank.risk.cluster.inference import inference_signals
from trustrank.risk.cluster.settings import DEFAULT_THRESHOLDS, ClusterThresholds

BASES = {"latency-critical": 80.0, "latency-sensitive": 65.0, "service": 45.0,
         "batch-training": 25.0}
TIER_FLOORS = (("latency-critical", 75.0), ("latency-sensitive", 55.0), ("service", 35.0),
               ("batch-training", 15.0))
# Points per diagnosis kind on the workload (positive: starved, needs priority).
DIAGNOSIS_POINTS = {
    "inference_latency": 10.0,
    "inference_queue_imbalance": 8.0,
    "inference_kv_cache_pressure": 5.0,
    "priority_inversion": 5.0,
    "io_throttling": 5.0,
    "pod_preempted": 4.0,
    "pod_evicted": 4.0,
    "pod_oom_killed": 2.0,
    "gpu_fragmentation_blocks_pod": 3.0,
    "gpu_over_reserved": -10.0,
}
_QOS_ORDER = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}


@dataclass(frozen=True, slots=True)
class Workload:
    key: str  # namespace/Kind/name, as findings.workload_key makes it
    priority_class: str
    priority: int  # declared value, 0 when none
    qos_class: str  # the weakest QoS among its pods
    gpus: float
    training: bool
    serves_latency_sensitive: bool = False
    on_internet_path: bool = False
    # Why it looks like an inference server (inference.inference_signals), "" when not.
    inference: str = ""


def pod_gpus(pod: Pod, *, seen: Mapping[str, int] | None = None) -> float:
    """GPUs a pod holds: its requests (or, alone, its limits: an extended resource's
    limit implies the request), else the GPUs its DCGM series name (`seen`, keyed by
    "namespace/pod": a GPU given without a resource request, e.g. by the runtime)."""
    declared = pod.gpu_request.gpus or pod.gpu_limit.gpus
    return declared or float((seen or {}).get(f"{pod.namespace}/{pod.name}", 0))


def workloads_from_pods(
    *, pods: Iterable[Pod], latency_sensitive: Mapping[str, bool] | None = None,
    internet_path: Mapping[str, bool] | None = None, vllm_pods: Collection[str] = (),
    gpus_seen: Mapping[str, int] | None = None,
) -> list[Workload]:
    """Group pods by owner. The two flags come from the trace graph (keyed by workload
    key): whether the workload serves latency-sensitive requests and whether a path from
    the internet reaches it. `vllm_pods` ("namespace/pod") export vLLM metrics;
    `gpus_seen` counts the GPUs DCGM series name per pod (see `pod_gpus`)."""
    latency_sensitive = latency_sensitive or {}
    internet_path = internet_path or {}
    grouped: dict[str, list[Pod]] = {}
    for pod in pods:
        grouped.setdefault(workload_key(pod), []).append(pod)
    result = []
    for key, members in sorted(grouped.items()):
        weakest = min(members, key=lambda p: _QOS_ORDER.get(p.qos_class, 0))
        declared = max(members, key=lambda p: p.priority or 0)
        signals = [s for p in members for s in inference_signals(p, vllm_pods=vllm_pods)]
        result.append(Workload(
            key=key, priority_class=declared.priority_class, priority=declared.priority or 0,
            qos_class=weakest.qos_class,
            gpus=sum(pod_gpus(p, seen=gpus_seen) for p in members),
            training=any(training_signals(p) for p in members),
            serves_latency_sensitive=latency_sensitive.get(key, False),
            on_internet_path=internet_path.get(key, False),
            inference=signals[0] if signals else "",
        ))
    return result


@dataclass(frozen=True, slots=True)
class Reason:
    factor: str
    points: float
    detail: str


@dataclass(frozen=True, slots=True)
class PriorityRecommendation:
    workload: str
    declared_priority: int
    declared_priority_class: str
    declared_qos: str
    score: float
    tier: str
    recommended_priority: int
    recommended_qos: str
    direction: str  # raise | lower | keep
    reasons: tuple[Reason, ...]
    diagnoses: tuple[str, ...]  # fingerprints of the diagnoses that counted
    gpus: float = 0.0

    @property
    def disagrees(self) -> bool:
        return self.direction != "keep" or self.recommended_qos != self.declared_qos


def _base(workload: Workload) -> tuple[str, str]:
    if workload.serves_latency_sensitive and workload.on_internet_path:
        return "latency-critical", "serves latency-sensitive traffic on an internet path"
    if workload.serves_latency_sensitive:
        return "latency-sensitive", "serves latency-sensitive traffic (internal)"
    if workload.inference:
        return "latency-sensitive", f"an inference server ({workload.inference})"
    if workload.training:
        return "batch-training", "training or batch work"
    return "service", "a service that is neither latency-sensitive nor training"


def _tier(score: float) -> str:
    for name, floor in TIER_FLOORS:
        if score >= floor:
            return name
    return "best-effort"


def workload_priorities(
    *, workloads: Iterable[Workload], diagnoses: Iterable[Diagnosis],
    thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[PriorityRecommendation]:
    """One recommendation per workload; disagreements first, then by score."""
    by_workload: dict[str, list[Diagnosis]] = {}
    for diagnosis in diagnoses:
        if diagnosis.workload:
            by_workload.setdefault(diagnosis.workload, []).append(diagnosis)
    values = dict(thresholds.tier_priorities)
    result = []
    for workload in workloads:
        base_tier, why = _base(workload)
        reasons = [Reason("serves", BASES[base_tier], why)]
        found = by_workload.get(workload.key, [])
        unstable = any(d.kind == "inference_throughput_unstable" for d in found)
        weight = thresholds.throughput_weight if unstable else 1.0
        urgency = 0.0
        counted = []
        for diagnosis in found:
            points = DIAGNOSIS_POINTS.get(diagnosis.kind)
            if points is None:
                continue
            if points > 0:
                urgency += points
            reasons.append(Reason(diagnosis.kind, points * (weight if points > 0 else 1.0),
                                  diagnosis.title))
            counted.append(diagnosis.fingerprint)
        relief = sum(r.points for r in reasons[1:] if r.points < 0)
        if unstable:
            reasons.append(Reason(
                "inference_throughput_unstable", urgency * (weight - 1),
                f"unstable token throughput: urgency weighted ×{weight:g} (formula 4)",
            ))
        score = max(0.0, min(100.0, BASES[base_tier] + urgency * weight + relief))
        tier = _tier(score)
        recommended = values.get(tier, 0)
        recommended_qos = workload.qos_class
        if workload.gpus > 0 and (workload.training or tier.startswith("latency")) and (
            workload.qos_class != "Guaranteed"
        ):
            recommended_qos = "Guaranteed"
            reasons.append(Reason(
                "qos", 0.0,
                f"{workload.qos_class} pods holding GPUs are evicted first under node "
                f"pressure: give them requests equal to limits",
            ))
        if recommended > workload.priority:
            direction = "raise"
        elif recommended < workload.priority:
            direction = "lower"
        else:
            direction = "keep"
        result.append(PriorityRecommendation(
            workload=workload.key, declared_priority=workload.priority,
            declared_priority_class=workload.priority_class, declared_qos=workload.qos_class,
            score=round(score, 3), tier=tier, recommended_priority=recommended,
            recommended_qos=recommended_qos, direction=direction, reasons=tuple(reasons),
            diagnoses=tuple(counted), gpus=workload.gpus,
        ))
    result.sort(key=lambda r: (not r.disagrees, -r.score, r.workload))
    return result
