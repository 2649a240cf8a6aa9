"""Preemption (formula 8) and priority inversion (formula 12) from a Kubernetes snapshot."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from trustrank.parsers.kubernetes_objects import ClusterSnapshot, Node, Pod
from trustrank.risk.cluster.findings import (
    Diagnosis,
    Severity,
    SubjectKind,
    evidence,
    percentile,
    pod_subject,
    workload_key,
)
from trustrank.risk.cluster.settings import DEFAULT_THRESHOLDS, ClusterThresholds

# Event reasons read as disruptions, and the finding kind each becomes.
DISRUPTION_REASONS = {
    "Preempted": "pod_preempted",
    "Evicted": "pod_evicted",
    "OOMKilling": "pod_oom_killed",
    "OOMKilled": "pod_oom_killed",
}
# DisruptionTarget condition reasons set by the scheduler on victims (1.26+, older name).
_PREEMPTION_CONDITION_REASONS = ("PreemptionByScheduler", "PreemptionByKubeScheduler")
_PREEMPTOR = re.compile(r"[Pp]reempted by (?:pod )?(\S+?)(?: on node (\S+))?$")
_OOM_PROCESS = re.compile(r"Killed process \d+ \(([^)]*)\)")


def commitment_preempted(
    *, local_node: str, global_node: str, now: float, deadline: float,
    margin_s: float = 0.1,
) -> bool:
    """Formula 8: pre-empted when the local commitment differs from the global schedule
    view and now is past deadline − margin (100 ms)."""
    return local_node != global_node and now > deadline - margin_s


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def preemption_diagnose(
    *, snapshot: ClusterSnapshot, now: float,
    thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    """Disruption events (Preempted, Evicted, OOM) by the pod they hit, pods marked as
    preemption victims by their DisruptionTarget condition, and preemptors whose
    nomination was not honoured by the deadline (formula 8)."""
    pods = {pod_subject(pod): pod for pod in snapshot.pods}
    found: list[Diagnosis] = []
    seen: set[tuple[str, str]] = set()
    for event in snapshot.events:
        kind = DISRUPTION_REASONS.get(event.reason)
        if kind is None and not event.is_oom:
            continue
        kind = kind or "pod_oom_killed"
        subject_kind = SubjectKind.POD if event.object_kind == "Pod" else SubjectKind.NODE
        subject = (
            f"{event.object_namespace}/{event.object_name}"
            if subject_kind is SubjectKind.POD else event.object_name
        )
        extra: dict[str, object] = {}
        match = _PREEMPTOR.search(event.message.strip())
        if kind == "pod_preempted" and match:
            extra["preemptor"] = match.group(1)
            extra["preemptor_node"] = match.group(2) or ""
        oom = _OOM_PROCESS.search(event.message)
        if oom:
            extra["process"] = oom.group(1)
        pod = pods.get(subject)
        seen.add((kind, subject))
        found.append(Diagnosis(
            kind=kind, subject_kind=subject_kind, subject=subject,
            severity=Severity.HIGH if event.count > 1 or kind == "pod_preempted"
            else Severity.MEDIUM,
            title=f"{event.object_kind} {subject}: {event.reason} ({event.count}×)",
            evidence=evidence(
                reason=event.reason, count=event.count, message=event.message,
                first_seen=_ts(event.first_seen), last_seen=_ts(event.last_seen),
                source=event.source, priority=pod.priority if pod else None,
                priority_class=pod.priority_class if pod else "", **extra,
            ),
            workload=workload_key(pod) if pod else "",
        ))
    for pod in snapshot.pods:
        condition = pod.condition("DisruptionTarget")
        subject = pod_subject(pod)
        if (
            condition is not None and condition.status == "True"
            and condition.reason in _PREEMPTION_CONDITION_REASONS
            and ("pod_preempted", subject) not in seen
        ):
            found.append(Diagnosis(
                kind="pod_preempted", subject_kind=SubjectKind.POD, subject=subject,
                severity=Severity.HIGH, title=f"Pod {subject} was preempted by the scheduler",
                evidence=evidence(
                    reason=condition.reason, message=condition.message,
                    at=_ts(condition.last_transition), priority=pod.priority,
                    priority_class=pod.priority_class,
                ),
                workload=workload_key(pod),
            ))
        scheduled = pod.condition("PodScheduled")
        if pod.nominated_node and scheduled is not None and scheduled.last_transition:
            deadline = scheduled.last_transition.timestamp() + thresholds.preemption_deadline_s
            if commitment_preempted(
                local_node=pod.nominated_node, global_node=pod.node, now=now,
                deadline=deadline, margin_s=thresholds.preemption_margin_s,
            ):
                found.append(Diagnosis(
                    kind="pod_nomination_lost", subject_kind=SubjectKind.POD, subject=subject,
                    severity=Severity.MEDIUM,
                    title=(
                        f"Pod {subject} was nominated to {pod.nominated_node} but is "
                        f"{'on ' + pod.node if pod.node else 'still unbound'} past its deadline"
                    ),
                    evidence=evidence(
                        local_commitment=pod.nominated_node, global_view=pod.node,
                        now=now, deadline=deadline, margin_s=thresholds.preemption_margin_s,
                    ),
                    workload=workload_key(pod),
                ))
    return found


# --- priority inversion ----------------------------------------------------------------------

def _scheduled_at(pod: Pod) -> float | None:
    condition = pod.condition("PodScheduled")
    if condition is not None and condition.status == "True" and condition.last_transition:
        return condition.last_transition.timestamp()
    if pod.node and pod.started is not None:
        return pod.started.timestamp()
    return None


def _holds(pod: Pod) -> bool:
    return bool(pod.node) and pod.phase in ("Pending", "Running") and pod.deleted is None


@dataclass(frozen=True, slots=True)
class _Free:
    gpus: float
    cpu: float
    memory: float


def _free_by_node(nodes: Sequence[Node], pods: Sequence[Pod]) -> dict[str, _Free]:
    used: dict[str, list[float]] = {}
    for pod in pods:
        if _holds(pod):
            entry = used.setdefault(pod.node, [0.0, 0.0, 0.0])
            entry[0] += pod.gpu_request.gpus
            entry[1] += pod.cpu_request
            entry[2] += pod.memory_request
    free = {}
    for node in nodes:
        if node.unschedulable:
            continue
        gpus, cpu, memory = used.get(node.name, [0.0, 0.0, 0.0])
        free[node.name] = _Free(
            node.allocatable_gpus - gpus, node.allocatable_cpu - cpu,
            node.allocatable_memory - memory,
        )
    return free


def _fits(pod: Pod, room: _Free) -> bool:
    return (
        pod.gpu_request.gpus <= room.gpus + 1e-9 and pod.cpu_request <= room.cpu + 1e-9
        and pod.memory_request <= room.memory + 1e-9
    )


@dataclass(frozen=True, slots=True)
class SchedulingQuality:
    """Formula 12 for one cluster snapshot."""

    p95_delay_s: float
    comparable_pairs: int
    violations: int

    @property
    def violation_rate(self) -> float:
        return self.violations / self.comparable_pairs if self.comparable_pairs else 0.0


def priority_inversion_diagnose(
    *, pods: Sequence[Pod], nodes: Sequence[Node],
) -> tuple[list[Diagnosis], SchedulingQuality]:
    """Pairs where a lower-priority GPU pod was scheduled at t while a higher-priority GPU
    pod, created before t, was still waiting and would have fitted on the node the lower
    one took (that node's free room now, plus what the lower pod holds). The returned
    quality counts every pair of differing priority where the higher one waited at t."""
    gpu_pods = [p for p in pods if p.gpu_request.any and p.deleted is None]
    free = _free_by_node(nodes, pods)
    delays = []
    for pod in gpu_pods:
        at = _scheduled_at(pod)
        if at is not None and pod.created is not None:
            delays.append(max(0.0, at - pod.created.timestamp()))
    found = []
    comparable = violations = 0
    for low in gpu_pods:
        low_at = _scheduled_at(low)
        if low_at is None or not low.node:
            continue
        for high in gpu_pods:
            if high is low or (high.priority or 0) <= (low.priority or 0):
                continue
            if high.created is None or high.created.timestamp() > low_at:
                continue
            high_at = _scheduled_at(high)
            if high_at is not None and high_at <= low_at:
                continue
            comparable += 1
            room = free.get(low.node)
            if room is None:
                continue
            with_low = _Free(
                room.gpus + low.gpu_request.gpus, room.cpu + low.cpu_request,
                room.memory + low.memory_request,
            )
            if not _fits(high, with_low):
                continue
            violations += 1
            waited = low_at - high.created.timestamp()
            found.append(Diagnosis(
                kind="priority_inversion", subject_kind=SubjectKind.POD,
                subject=pod_subject(high),
                severity=Severity.HIGH if high.phase == "Pending" else Severity.MEDIUM,
                title=(
                    f"{pod_subject(low)} (priority {low.priority or 0}) was scheduled on "
                    f"{low.node} while {pod_subject(high)} (priority {high.priority or 0}) "
                    f"waited and would have fitted"
                ),
                evidence=evidence(
                    higher_pod=pod_subject(high), higher_priority=high.priority or 0,
                    higher_priority_class=high.priority_class,
                    lower_pod=pod_subject(low), lower_priority=low.priority or 0,
                    lower_priority_class=low.priority_class, node=low.node,
                    lower_scheduled_at=low_at, higher_created_at=high.created.timestamp(),
                    higher_scheduled_at=high_at, higher_waited_s=round(waited, 3),
                    higher_gpus=high.gpu_request.gpus, lower_gpus=low.gpu_request.gpus,
                ),
                workload=workload_key(high), discriminator=pod_subject(low),
            ))
    quality = SchedulingQuality(
        p95_delay_s=percentile(delays, 0.95), comparable_pairs=comparable,
        violations=violations,
    )
    return found, quality
