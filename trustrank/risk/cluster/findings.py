"""The record every cluster diagnosis returns, and the input shapes they share."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trustrank.parsers.kubernetes_objects import Pod

# (unix seconds, value), in time order. Counters are raw cumulative values.
Samples = Sequence[tuple[float, float]]


class Severity(StrEnum):
    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class SubjectKind(StrEnum):
    POD = "pod"
    NODE = "node"
    GPU = "gpu"
    WORKLOAD = "workload"
    DEVICE = "device"  # a block device seen from a cgroup (MAJ:MIN)
    PORT = "port"  # an RDMA port / traffic class


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One diagnosed problem. `evidence` holds the formula's inputs and result by name
    (numbers, strings, lists of numbers), enough to show how it was reached; `workload` is
    the owning workload's key when known, for `workload_priorities`."""

    kind: str
    subject_kind: SubjectKind
    subject: str
    severity: Severity
    title: str
    evidence: tuple[tuple[str, Any], ...]
    workload: str = ""
    # What makes two diagnoses the same finding beyond kind and subject (a model name, a
    # traffic class); the start time of an episode is evidence, not identity.
    discriminator: str = ""

    @property
    def fingerprint(self) -> str:
        """Stable across runs while the problem persists, so reconciling updates one
        finding instead of opening a new one per evaluation."""
        text = "\x1f".join(
            ("cluster", self.kind, self.subject_kind.value, self.subject, self.discriminator)
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def evidence_dict(self) -> dict[str, Any]:
        return dict(self.evidence)


def evidence(**values: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(values.items())


def pod_subject(pod: Pod) -> str:
    return f"{pod.namespace}/{pod.name}"


def workload_key(pod: Pod) -> str:
    """namespace/Kind/name of the pod's owner; a ReplicaSet made by a Deployment (its name
    is the Deployment's plus the pod-template-hash label) counts as that Deployment, since
    ReplicaSets come and go with every rollout. A pod without an owner is its own
    workload."""
    owner = pod.owner
    if owner is None:
        return f"{pod.namespace}/Pod/{pod.name}"
    kind, name = owner.kind, owner.name
    template_hash = pod.labels.get("pod-template-hash", "")
    if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
        kind, name = "Deployment", name[: -len(template_hash) - 1]
    return f"{pod.namespace}/{kind}/{name}"


def in_window(samples: Samples, *, start: float, end: float) -> list[tuple[float, float]]:
    return [(t, v) for t, v in samples if start <= t <= end]


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..1) of unsorted values; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def counter_increase(samples: Samples) -> float:
    """Increase of a cumulative counter over the samples, treating a drop as a reset (the
    process restarted and counts from zero), as Prometheus' increase() does."""
    total = 0.0
    for (_, before), (_, after) in itertools.pairwise(samples):
        total += after - before if after >= before else after
    return total


def severity_at_least(value: Severity, floor: Severity) -> Severity:
    order = list(Severity)
    return value if order.index(value) >= order.index(floor) else floor


Labels = Mapping[str, str]
