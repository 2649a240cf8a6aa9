"""Timeline replay (the source's strategy table, DESIGN formula 12): pods arrive at their
creation time, wait in a queue ordered by a priority policy, are placed by a placement
strategy, and run for their recorded duration.

Reported per policy: p95 scheduling delay, priority violation rate, GPU utilisation
fluctuation (± standard deviation of the allocated GPU share over time) and allocation rate.

Violations are judged against one reference priority for every policy — the recommended
priority of each pod (the cluster issue's; for a bare trace, `stand_in_hints`) — so the
policies are compared on the same yardstick. A pair counts once, at the first start of the
two, when both were waiting and their priorities differ; it is a violation when the lower
one started while the higher one was waiting and would have fitted at that moment.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from trustrank.risk.scheduling.fragmentation import shape_distribution
from trustrank.risk.scheduling.state import MILLI, ClusterSpec, ClusterState, IntArray, Workload
from trustrank.risk.scheduling.strategies import Placement, make_strategy

POLICIES = ("static_weight_rr", "gpu_mem_reservation", "semantic_aware")

# Static weights by QoS class. Alibaba's classes: LS latency-sensitive, BE best-effort,
# plus Kubernetes' Guaranteed/Burstable/BestEffort; HP is the source's "high priority".
QOS_WEIGHTS = {
    "Guaranteed": 3,
    "LS": 3,
    "HP": 3,
    "Burstable": 2,
    "BestEffort": 1,
    "BE": 1,
}
# How a diagnosis moves a pod's priority under the semantic-aware policy.
DIAGNOSIS_ADJUSTMENT = {
    # DESIGN item 11: a GPU training pod labelled BestEffort/Burstable is evictable without
    # notice although its work is expensive to redo; QoS understates it.
    "evictable_gpu_training": 1,
    # Item 11's other half: a Guaranteed pod that reserves far more GPU than it uses.
    "over_reserved_gpu": -1,
}
AGING_S = 600  # semantic-aware is dynamic: a pod waiting this long gains one level


@dataclass(frozen=True)
class SemanticHint:
    """Per pod: the recommended priority (higher is more urgent) and its diagnoses."""

    priority: int
    diagnoses: tuple[str, ...] = ()


def stand_in_hints(workload: Workload) -> dict[str, SemanticHint]:
    """A documented stand-in for the cluster issue's recommendations, from the trace itself:
    latency-sensitive / guaranteed GPU pods 3, other latency-sensitive pods and Burstable 2,
    best-effort 1; BE/Burstable pods holding whole GPUs are diagnosed as evictable training.
    (openb's `gpu_spec`, the GPU model, is empty for every pod, so it cannot help here.)"""
    hints = {}
    for i, name in enumerate(workload.names):
        qos = workload.qos[i]
        gpu = workload.num_gpu[i] > 0
        if qos in ("LS", "Guaranteed", "HP"):
            priority = 3 if gpu else 2
        elif qos == "Burstable":
            priority = 2
        else:
            priority = 1
        diagnoses: tuple[str, ...] = ()
        if qos in ("BE", "BestEffort", "Burstable") and gpu and workload.gpu_milli[i] >= MILLI:
            diagnoses = ("evictable_gpu_training",)
        hints[name] = SemanticHint(priority=priority, diagnoses=diagnoses)
    return hints


@dataclass(frozen=True)
class TimelineResult:
    policy: str
    strategy: str
    pods: int
    placed: int
    p95_delay_s: float
    mean_delay_s: float
    violation_rate: float
    violations: int
    pairs: int
    util_mean_pct: float
    util_fluctuation_pct: float
    allocation_rate: float


class _Queue:
    """The waiting pods and the order a policy tries them in."""

    def __init__(
        self, *, policy: str, workload: Workload, hints: Mapping[str, SemanticHint]
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
        self.policy = policy
        self.workload = workload
        self.waiting: dict[int, int] = {}  # pod -> arrival sequence number
        self.weight = np.array([QOS_WEIGHTS.get(q, 1) for q in workload.qos], dtype=np.int64)
        self.reservation = workload.gpu_demand
        base = np.array([hints[n].priority if n in hints else 1 for n in workload.names])
        bonus = np.array(
            [
                sum(DIAGNOSIS_ADJUSTMENT.get(d, 0) for d in hints[n].diagnoses) if n in hints else 0
                for n in workload.names
            ]
        )
        self.semantic = base + bonus
        self.rr_offset = 0

    def add(self, pod: int, seq: int) -> None:
        self.waiting[pod] = seq

    def remove(self, pod: int) -> None:
        del self.waiting[pod]

    def order(self, pods: list[int], now: int) -> list[int]:
        pods = sorted(pods, key=lambda p: self.waiting[p])  # FIFO within a class
        if self.policy == "gpu_mem_reservation":
            return sorted(pods, key=lambda p: -int(self.reservation[p]))
        if self.policy == "semantic_aware":
            wl = self.workload

            def key(p: int) -> int:
                aged = 1 if now - int(wl.creation[p]) >= AGING_S else 0
                return -(int(self.semantic[p]) + aged)

            return sorted(pods, key=key)
        return self._weighted_round_robin(pods)

    def _weighted_round_robin(self, pods: list[int]) -> list[int]:
        # Each round a class takes as many turns as its weight; classes of equal weight
        # alternate, and the starting class rotates between passes so none is always last.
        classes: dict[int, dict[str, deque[int]]] = {}
        for p in pods:
            classes.setdefault(int(self.weight[p]), {}).setdefault(
                self.workload.qos[p], deque()
            ).append(p)
        lanes = [
            (w, q, lane)
            for w in sorted(classes, reverse=True)
            for q, lane in sorted(classes[w].items())
        ]
        if lanes:
            shift = self.rr_offset % len(lanes)
            lanes = lanes[shift:] + lanes[:shift]
            self.rr_offset += 1
        out: list[int] = []
        while len(out) < len(pods):
            for w, _, lane in lanes:
                for _ in range(w):
                    if lane:
                        out.append(lane.popleft())
        return out


def replay_timeline(
    *,
    spec: ClusterSpec,
    workload: Workload,
    policy: str,
    strategy: str = "fgd",
    hints: Mapping[str, SemanticHint] | None = None,
    seed: int = 0,
    compress: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> TimelineResult:
    """`compress` > 1 squeezes inter-arrival times (durations unchanged): the openb trace
    spreads 8,152 pods over ~150 days and keeps well under 1 % of its GPUs busy, so a
    queue only forms, and policies only differ, once arrivals are packed closer."""
    if compress <= 0:
        raise ValueError("compress must be positive")
    if compress != 1.0:
        workload = workload.with_creation(
            creation=np.floor(workload.creation / compress).astype(np.int64)
        )
    hints = dict(stand_in_hints(workload)) if hints is None else dict(hints)
    reference = np.array([hints[n].priority if n in hints else 1 for n in workload.names])
    state = ClusterState.empty(spec)
    placer = make_strategy(
        name=strategy,
        seed=seed,
        workload=workload,
        n_nodes=len(spec),
        dist=shape_distribution(workload=workload),
    )
    queue = _Queue(policy=policy, workload=workload, hints=hints)
    capacity = max(spec.gpu_capacity_milli, 1)

    arrivals = np.argsort(workload.creation, kind="stable")
    next_arrival = 0
    running: list[tuple[int, int, int, tuple[int, ...]]] = []  # (end, pod, node, gpus)
    start = np.full(len(workload), -1, dtype=np.int64)
    # A waiting pod that failed to fit since the last release still cannot fit: nothing
    # has been freed since. This keeps passes short and the violation check honest.
    blocked = np.zeros(len(workload), dtype=bool)
    waiting = np.zeros(len(workload), dtype=bool)
    violations = pairs = 0
    pass_pairs: list[tuple[IntArray, IntArray]] = []
    samples: list[tuple[int, float]] = []
    seq = 0

    def place(pod: int, choice: Placement, now: int) -> None:
        waiting[pod] = False
        others = np.flatnonzero(waiting & (reference != reference[pod]))
        higher = others[(reference[others] > reference[pod]) & ~blocked[others]]
        wronged = [
            int(h)
            for h in higher
            if state.feasible(
                cpu=int(workload.cpu[h]),
                mem=int(workload.mem[h]),
                gpu_milli=int(workload.gpu_milli[h]),
                num_gpu=int(workload.num_gpu[h]),
            ).any()
        ]
        pass_pairs.append((others, np.array(wronged, dtype=np.int64)))
        state.allocate(
            node=choice.node,
            cpu=int(workload.cpu[pod]),
            mem=int(workload.mem[pod]),
            gpu_milli=int(workload.gpu_milli[pod]),
            gpus=choice.gpus,
        )
        queue.remove(pod)
        start[pod] = now
        end = now + int(workload.duration[pod])
        heapq.heappush(running, (end, pod, choice.node, choice.gpus))

    while next_arrival < len(arrivals) or running:
        t_arrival = (
            int(workload.creation[arrivals[next_arrival]]) if next_arrival < len(arrivals) else None
        )
        t_end = running[0][0] if running else None
        now = min(t for t in (t_arrival, t_end) if t is not None)
        freed = False
        while running and running[0][0] == now:
            _, pod, node, gpus = heapq.heappop(running)
            state.release(
                node=node,
                cpu=int(workload.cpu[pod]),
                mem=int(workload.mem[pod]),
                gpu_milli=int(workload.gpu_milli[pod]),
                gpus=gpus,
            )
            freed = True
        fresh = []
        while (
            next_arrival < len(arrivals) and int(workload.creation[arrivals[next_arrival]]) == now
        ):
            pod = int(arrivals[next_arrival])
            queue.add(pod, seq)
            waiting[pod] = True
            seq += 1
            fresh.append(pod)
            next_arrival += 1
        if freed:
            blocked[:] = False
        candidates = list(queue.waiting) if freed else fresh
        # Pairs seen this pass; one only counts if the other pod is still waiting when the
        # pass ends, since two pods started in the same instant did not wait for each other.
        pass_pairs = []
        failed_shapes: set[tuple[int, int, int, int]] = set()
        for pod in queue.order(candidates, now):
            shape = (
                int(workload.cpu[pod]),
                int(workload.mem[pod]),
                int(workload.gpu_milli[pod]),
                int(workload.num_gpu[pod]),
            )
            if shape in failed_shapes:
                blocked[pod] = True
                continue
            choice = placer.choose(state=state, workload=workload, pod=pod)
            if choice is None:
                failed_shapes.add(shape)
                blocked[pod] = True
                continue
            place(pod, choice, now)
        for others, wronged in pass_pairs:
            pairs += int(waiting[others].sum())
            violations += int(waiting[wronged].sum())
        samples.append((now, 1.0 - state.gpu_free_milli / capacity))
        if progress is not None and fresh:
            progress(next_arrival, len(arrivals))

    placed = start >= 0
    delays = (start - workload.creation)[placed]
    # Utilisation over the arrival window only: after the last arrival the cluster drains
    # for as long as the longest pod runs, which says nothing about the policy.
    window_end = int(workload.creation.max()) if len(workload) else 0
    kept = [s for s in samples if s[0] <= window_end] or samples[:1]
    times = np.array([s[0] for s in kept] + [window_end], dtype=np.float64)
    shares = np.array([s[1] for s in kept] + [kept[-1][1]])
    util_mean, util_std = _time_weighted(times, shares)
    return TimelineResult(
        policy=policy,
        strategy=strategy,
        pods=len(workload),
        placed=int(placed.sum()),
        p95_delay_s=float(np.percentile(delays, 95)) if len(delays) else 0.0,
        mean_delay_s=float(delays.mean()) if len(delays) else 0.0,
        violation_rate=violations / pairs if pairs else 0.0,
        violations=violations,
        pairs=pairs,
        util_mean_pct=100.0 * util_mean,
        util_fluctuation_pct=100.0 * util_std,
        allocation_rate=float(placed.mean()) if len(workload) else 0.0,
    )


def _time_weighted(times: IntArray | np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of a step function sampled at event times."""
    if len(times) < 2:
        return (float(values[0]) if len(values) else 0.0), 0.0
    spans = np.diff(times)
    if spans.sum() <= 0:
        return float(values.mean()), float(values.std())
    weights = spans / spans.sum()
    level = values[:-1]
    mean = float((weights * level).sum())
    return mean, float(np.sqrt((weights * (level - mean) ** 2).sum()))
