"""Inflation replay (the FGD paper's method): pods drawn with replacement from the trace
arrive one by one and never leave, until their GPU requests reach 130 % of the cluster's
GPUs. At every 1 % of arrived demand we record the share of cluster GPU capacity left
unallocated and the cluster's fragmentation (same measure FGD minimises)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from trustrank.risk.scheduling.fragmentation import (
    ShapeDistribution,
    fragmentation,
    shape_distribution,
)
from trustrank.risk.scheduling.state import ClusterSpec, ClusterState, IntArray, Workload
from trustrank.risk.scheduling.strategies import STRATEGIES, make_strategy

MAX_ARRIVED = 1.30


@dataclass(frozen=True)
class InflationCurve:
    """One strategy, one seed. Index i of each list is the state at i % arrived demand."""

    strategy: str
    seed: int
    unallocated: tuple[float, ...]  # share of cluster GPU capacity not allocated
    fragmentation: tuple[float, ...]  # expected fragmentation over cluster GPU capacity
    placed: int
    failed: int


@dataclass(frozen=True)
class StrategySummary:
    strategy: str
    unallocated_at_100: float  # mean over seeds
    unallocated_spread: float  # standard deviation over seeds
    curve_mean: tuple[float, ...]
    fragmentation_mean: tuple[float, ...]


@dataclass(frozen=True)
class InflationResult:
    seeds: int
    summaries: dict[str, StrategySummary]
    curves: tuple[InflationCurve, ...]
    placements: int

    def fgd_reduction(self) -> float | None:
        """FGD's relative reduction of unallocated GPUs at 100 % against the best other."""
        if "fgd" not in self.summaries:
            return None
        others = [s.unallocated_at_100 for n, s in self.summaries.items() if n != "fgd"]
        if not others or min(others) <= 0:
            return None
        return 1.0 - self.summaries["fgd"].unallocated_at_100 / min(others)


def draw_arrivals(*, workload: Workload, capacity_milli: int, seed: int) -> IntArray:
    """Pod indices drawn with replacement until demand reaches 130 % of capacity."""
    rng = np.random.default_rng(seed)
    demand = workload.gpu_demand
    target = MAX_ARRIVED * capacity_milli
    mean = max(float(demand.mean()), 1.0)
    out: list[IntArray] = []
    total = 0.0
    while total < target:
        batch = rng.integers(0, len(workload), size=int((target - total) / mean) + 64)
        cum = total + np.cumsum(demand[batch])
        stop = np.searchsorted(cum, target, side="left")
        if stop < len(batch):
            out.append(batch[: stop + 1])
            break
        out.append(batch)
        total = float(cum[-1])
    return np.concatenate(out).astype(np.int64)


def replay_inflation_once(
    *,
    spec: ClusterSpec,
    workload: Workload,
    arrivals: IntArray,
    strategy: str,
    seed: int,
    dist: ShapeDistribution,
) -> InflationCurve:
    state = ClusterState.empty(spec)
    placer = make_strategy(
        name=strategy,
        seed=seed * 7919 + STRATEGIES.index(strategy),
        workload=workload,
        n_nodes=len(spec),
        dist=dist,
    )
    capacity = spec.gpu_capacity_milli
    demand = workload.gpu_demand
    # Per-node fragmentation, refreshed at each mark only for nodes changed since the last.
    node_frag = fragmentation(
        dist=dist, cpu_free=state.cpu_free, mem_free=state.mem_free, gpu_left=state.gpu_left
    )
    frag_version = state.version.copy()
    unallocated = [1.0]
    frag = [float(node_frag.sum()) / capacity]
    arrived = 0
    next_mark = 1
    placed = failed = 0
    for pod in arrivals:
        choice = placer.choose(state=state, workload=workload, pod=int(pod))
        if choice is None:
            failed += 1
        else:
            state.allocate(
                node=choice.node,
                cpu=int(workload.cpu[pod]),
                mem=int(workload.mem[pod]),
                gpu_milli=int(workload.gpu_milli[pod]),
                gpus=choice.gpus,
            )
            placed += 1
        arrived += int(demand[pod])
        while next_mark <= 130 and arrived * 100 >= next_mark * capacity:
            unallocated.append(state.gpu_free_milli / capacity)
            stale = np.flatnonzero(frag_version != state.version)
            if len(stale):
                node_frag[stale] = fragmentation(
                    dist=dist,
                    cpu_free=state.cpu_free[stale],
                    mem_free=state.mem_free[stale],
                    gpu_left=state.gpu_left[stale],
                )
                frag_version[stale] = state.version[stale]
            frag.append(float(node_frag.sum()) / capacity)
            next_mark += 1
    return InflationCurve(
        strategy=strategy,
        seed=seed,
        unallocated=tuple(unallocated),
        fragmentation=tuple(frag),
        placed=placed,
        failed=failed,
    )


def summarise_curves(
    *, curves: Sequence[InflationCurve], strategies: Sequence[str]
) -> dict[str, StrategySummary]:
    """Per strategy: unallocated share at 100 % arrived (mean, std over seeds) and the mean
    curves."""
    summaries = {}
    for name in strategies:
        mine = [c for c in curves if c.strategy == name]
        width = min(len(c.unallocated) for c in mine)
        at_100 = np.array([c.unallocated[min(100, width - 1)] for c in mine])
        summaries[name] = StrategySummary(
            strategy=name,
            unallocated_at_100=float(at_100.mean()),
            unallocated_spread=float(at_100.std()),
            curve_mean=tuple(
                float(v) for v in np.mean([c.unallocated[:width] for c in mine], axis=0)
            ),
            fragmentation_mean=tuple(
                float(v) for v in np.mean([c.fragmentation[:width] for c in mine], axis=0)
            ),
        )
    return summaries


_SHARED: dict[str, object] = {}


def _init_worker(spec: ClusterSpec, workload: Workload, dist: ShapeDistribution) -> None:
    # Sent once per worker process rather than with every task.
    _SHARED.update(spec=spec, workload=workload, dist=dist)


def _run_one(job: tuple[int, str]) -> InflationCurve:
    seed, name = job
    spec, workload, dist = _SHARED["spec"], _SHARED["workload"], _SHARED["dist"]
    assert isinstance(spec, ClusterSpec) and isinstance(workload, Workload)
    assert isinstance(dist, ShapeDistribution)
    arrivals = draw_arrivals(workload=workload, capacity_milli=spec.gpu_capacity_milli, seed=seed)
    return replay_inflation_once(
        spec=spec, workload=workload, arrivals=arrivals, strategy=name, seed=seed, dist=dist
    )


def replay_inflation(
    *,
    spec: ClusterSpec,
    workload: Workload,
    strategies: Sequence[str] = STRATEGIES,
    seeds: int = 10,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> InflationResult:
    """Every strategy sees the same arrival sequence per seed (common random numbers), so
    differences come from placement, not from the draw. `jobs` > 1 spreads the (seed,
    strategy) replays over worker processes (not from inside a daemonic Celery worker)."""
    if spec.gpu_capacity_milli == 0:
        raise ValueError("the cluster has no GPUs; inflation is measured against GPU capacity")
    dist = shape_distribution(workload=workload)
    work = [(seed, name) for seed in range(seeds) for name in strategies]
    curves: list[InflationCurve] = []
    if jobs > 1:
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_init_worker,
            initargs=(spec, workload, dist),
        ) as pool:
            for curve in pool.map(_run_one, work):
                curves.append(curve)
                if progress is not None:
                    progress(len(curves), len(work))
    else:
        _init_worker(spec, workload, dist)
        try:
            for job in work:
                curves.append(_run_one(job))
                if progress is not None:
                    progress(len(curves), len(work))
        finally:
            _SHARED.clear()
    return InflationResult(
        seeds=seeds,
        summaries=summarise_curves(curves=curves, strategies=strategies),
        curves=tuple(curves),
        placements=sum(c.placed + c.failed for c in curves),
    )
