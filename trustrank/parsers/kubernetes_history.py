"""A pod's history between two cluster snapshots."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from trustrank.parsers.kubernetes_objects import Pod


@dataclass(frozen=True, slots=True)
class PodChange:
    """One change in a pod's history between two snapshots. `change` is created, deleted,
    phase or node; `before`/`after` are the phase or node values (empty when n/a)."""

    pod_key: str
    namespace: str
    name: str
    change: str
    before: str
    after: str
    at: datetime


def pod_history_diff(
    *, before: Iterable[Pod], after: Iterable[Pod], at: datetime
) -> tuple[PodChange, ...]:
    """Changes from one snapshot's pods to the next, `at` the later snapshot's time.
    Pods are matched by uid (namespace/name when a body has no uids), so a pod deleted
    and re-created under the same name shows as deleted + created."""
    old = {pod.key: pod for pod in before}
    new = {pod.key: pod for pod in after}
    changes: list[PodChange] = []
    for key, pod in new.items():
        previous = old.get(key)
        if previous is None:
            changes.append(PodChange(key, pod.namespace, pod.name, "created", "", pod.phase,
                                     pod.created or at))
            continue
        if previous.phase != pod.phase:
            changes.append(PodChange(key, pod.namespace, pod.name, "phase", previous.phase,
                                     pod.phase, at))
        if previous.node != pod.node:
            changes.append(PodChange(key, pod.namespace, pod.name, "node", previous.node,
                                     pod.node, at))
    for key, pod in old.items():
        if key not in new:
            changes.append(PodChange(key, pod.namespace, pod.name, "deleted", pod.phase, "",
                                     at))
    return tuple(sorted(changes, key=lambda c: (c.namespace, c.name, c.change)))
