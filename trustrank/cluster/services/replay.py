"""Scheduling replay: validate parameters, load a trace (or a stored cluster), run the pure
engine. The run rows are `replay_runs`.

The engine (`trustrank.risk.scheduling`) knows nothing of Django; this module turns its
results into the JSON stored on `ReplayRun.result` and printed by `replay_schedule`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from trustrank.cluster.models import Cluster, ReplayMode
from trustrank.cluster.services.replay_cluster import (
    SEMANTIC_SOURCE,
    cluster_replay_input,
)
from trustrank.parsers.openb import OpenbError, parse_openb_nodes, parse_openb_pods
from trustrank.risk.scheduling.inflation import replay_inflation
from trustrank.risk.scheduling.snapshot import SnapshotError
from trustrank.risk.scheduling.state import (
    ClusterSpec,
    Workload,
    cluster_from_nodes,
    workload_from_pods,
)
from trustrank.risk.scheduling.strategies import STRATEGIES
from trustrank.risk.scheduling.timeline import POLICIES, SemanticHint, replay_timeline

DEFAULT_TRACE_DIR = Path(settings.BASE_DIR) / "tests" / "data" / "telemetry" / "alibaba"
DEFAULT_PODS = DEFAULT_TRACE_DIR / "gpu-v2023_openb_pod_list_default.csv"
DEFAULT_NODES = DEFAULT_TRACE_DIR / "gpu-v2023_openb_node_list_gpu_node.csv"
DEFAULT_TRACE_LABEL = "openb (Alibaba cluster-trace-gpu-v2023, default pods, GPU nodes)"
MAX_SEEDS = 20
MAX_CSV_BYTES = 16 * 1024 * 1024
# Where the semantic-aware policy's priorities came from (`result["semantic_source"]`).
STAND_IN_SOURCE = "trace stand-in"
SUPPLIED_SOURCE = "supplied hints"
# Pod names listed per policy in the order they started (the page shows the first ones).
START_ORDER_LIMIT = 100


class ReplayError(ValueError):
    """Bad parameters or a bad trace; the message is safe to show to the user. `field`
    names the input at fault when one is (the API and the page attach the message to it)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ReplayParams:
    mode: str
    strategies: tuple[str, ...]
    seeds: int
    policies: tuple[str, ...]
    placement: str
    compress: float
    node_fraction: float
    # Timeline, semantic-aware policy: pod name -> recommended priority and diagnoses (the
    # cluster issue's output). Empty: a stand-in derived from the trace.
    hints: dict[str, SemanticHint] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["strategies"] = list(self.strategies)
        data["policies"] = list(self.policies)
        data["hints"] = {
            name: {"priority": h.priority, "diagnoses": list(h.diagnoses)}
            for name, h in self.hints.items()
        }
        return data


def hints_parse(raw: object) -> dict[str, SemanticHint]:
    """`{pod name: {"priority": int, "diagnoses": [str, …]}}` (or just `{pod: int}`)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ReplayError("hints must be an object mapping pod names to priorities")
    hints = {}
    for name, value in raw.items():
        entry = value if isinstance(value, dict) else {"priority": value}
        priority = entry.get("priority")
        diagnoses = entry.get("diagnoses", [])
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ReplayError(f"hints[{name!r}].priority must be an integer")
        if not isinstance(diagnoses, list) or not all(isinstance(d, str) for d in diagnoses):
            raise ReplayError(f"hints[{name!r}].diagnoses must be a list of strings")
        hints[str(name)] = SemanticHint(priority=priority, diagnoses=tuple(diagnoses))
    return hints


def replay_params_validate(
    *,
    mode: str = ReplayMode.INFLATION,
    strategies: Sequence[str] = (),
    seeds: int = 3,
    policies: Sequence[str] = (),
    placement: str = "fgd",
    compress: float = 1.0,
    node_fraction: float = 1.0,
    hints: object = None,
) -> ReplayParams:
    if mode not in ReplayMode.values:
        raise ReplayError(f"unknown mode {mode!r}; choose inflation or timeline")
    chosen = tuple(dict.fromkeys(strategies)) or STRATEGIES
    unknown = [s for s in chosen if s not in STRATEGIES]
    if unknown:
        raise ReplayError(
            f"unknown strategy {', '.join(unknown)}; choose from {', '.join(STRATEGIES)}"
        )
    if placement not in STRATEGIES:
        raise ReplayError(f"unknown placement {placement!r}; choose from {', '.join(STRATEGIES)}")
    chosen_policies = tuple(dict.fromkeys(policies)) or POLICIES
    bad = [p for p in chosen_policies if p not in POLICIES]
    if bad:
        raise ReplayError(f"unknown policy {', '.join(bad)}; choose from {', '.join(POLICIES)}")
    if not 1 <= seeds <= MAX_SEEDS:
        raise ReplayError(f"seeds must be between 1 and {MAX_SEEDS}")
    if not 0.0 < compress <= 1_000_000:
        raise ReplayError("compress must be a positive factor (1 = the trace's own times)")
    if not 0.0 < node_fraction <= 1.0:
        raise ReplayError("node_fraction must be in (0, 1]")
    return ReplayParams(
        mode=str(mode),
        strategies=chosen,
        seeds=seeds,
        policies=chosen_policies,
        placement=placement,
        compress=float(compress),
        node_fraction=float(node_fraction),
        hints=hints_parse(hints),
    )


def trace_load(*, pods_csv: bytes, nodes_csv: bytes) -> tuple[Workload, ClusterSpec]:
    """Parse both CSVs; a bad file raises ReplayError naming the file, line and column."""
    for what, data in (("pods", pods_csv), ("nodes", nodes_csv)):
        if len(data) > MAX_CSV_BYTES:
            raise ReplayError(f"{what}: file larger than {MAX_CSV_BYTES // (1024 * 1024)} MB")
    try:
        pods = parse_openb_pods(pods_csv, what="pods CSV")
        nodes = parse_openb_nodes(nodes_csv, what="nodes CSV")
    except OpenbError as exc:
        raise ReplayError(str(exc)) from exc
    spec = cluster_from_nodes(nodes)
    if spec.gpu_capacity_milli == 0:
        raise ReplayError("nodes CSV: no node has a GPU; the replay measures GPU placement")
    return workload_from_pods(pods), spec


def default_trace() -> tuple[bytes, bytes]:
    return DEFAULT_PODS.read_bytes(), DEFAULT_NODES.read_bytes()


def _node_subset(spec: ClusterSpec, fraction: float) -> ClusterSpec:
    """Evenly spaced nodes, so every node type keeps its share of the smaller cluster."""
    if fraction >= 1.0:
        return spec
    count = max(1, round(len(spec) * fraction))
    idx = np.unique(np.linspace(0, len(spec) - 1, count).round().astype(np.int64))
    return ClusterSpec(
        names=tuple(spec.names[i] for i in idx),
        cpu=spec.cpu[idx],
        mem=spec.mem[idx],
        gpus=spec.gpus[idx],
        models=tuple(spec.models[i] for i in idx),
    )


ProgressFn = Callable[[str, int, int], None]


def _phase_progress(progress: ProgressFn | None, phase: str) -> Callable[[int, int], None] | None:
    if progress is None:
        return None

    def report(done: int, total: int) -> None:
        progress(phase, done, total)

    return report


def replay_compute(
    *,
    params: ReplayParams,
    workload: Workload,
    spec: ClusterSpec,
    progress: ProgressFn | None = None,
    hints: Mapping[str, SemanticHint] | None = None,
    semantic_source: str = "",
    source: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the replay; returns the JSON stored on the row (curves included). `hints`,
    `semantic_source` and `source` come with a team's cluster (its recommendations, and a
    description of what was read); without them the semantic-aware policy takes the
    supplied hints or the trace stand-in."""
    spec = _node_subset(spec, params.node_fraction)
    if spec.gpu_capacity_milli == 0:
        raise ReplayError("the sampled nodes have no GPU; raise node_fraction")
    started = time.monotonic()
    trace = {"pods": len(workload), "nodes": len(spec), "gpus": int(spec.gpus.sum())}
    source_info = dict(source) if source is not None else {"source": "trace"}
    if hints is None and params.hints:
        hints, semantic_source = params.hints, SUPPLIED_SOURCE
    elif hints is None:
        semantic_source = STAND_IN_SOURCE
    if params.mode == ReplayMode.INFLATION:
        result = replay_inflation(
            spec=spec,
            workload=workload,
            strategies=params.strategies,
            seeds=params.seeds,
            progress=_phase_progress(progress, "inflation"),
        )
        strategies = {
            name: {
                "unallocated_at_100": s.unallocated_at_100,
                "unallocated_spread": s.unallocated_spread,
                "curve": [round(v, 5) for v in s.curve_mean],
                "fragmentation": [round(v, 5) for v in s.fragmentation_mean],
            }
            for name, s in result.summaries.items()
        }
        return {
            "mode": params.mode,
            "trace": trace,
            "seeds": params.seeds,
            "strategies": strategies,
            "fgd_reduction": result.fgd_reduction(),
            "placements": result.placements,
            # No priority policy runs in this mode; kept so every result says what its
            # semantic priorities are (the same input replayed in timeline mode uses them).
            "semantic_source": semantic_source,
            "input": source_info,
            "seconds": round(time.monotonic() - started, 3),
        }
    rows: dict[str, Any] = {}
    for i, policy in enumerate(params.policies):
        phase = f"timeline {policy} ({i + 1}/{len(params.policies)})"
        outcome = replay_timeline(
            spec=spec,
            workload=workload,
            policy=policy,
            strategy=params.placement,
            compress=params.compress,
            hints=hints,
            progress=_phase_progress(progress, phase),
        )
        rows[policy] = {
            "p95_delay_s": outcome.p95_delay_s,
            "violation_rate": outcome.violation_rate,
            "util_fluctuation_pct": outcome.util_fluctuation_pct,
            "allocation_rate": outcome.allocation_rate,
            "mean_delay_s": outcome.mean_delay_s,
            "util_mean_pct": outcome.util_mean_pct,
            "violations": outcome.violations,
            "pairs": outcome.pairs,
            "placed": outcome.placed,
            "pods": outcome.pods,
            "start_order": [workload.names[i] for i in outcome.start_order[:START_ORDER_LIMIT]],
        }
    return {
        "mode": params.mode,
        "trace": trace,
        "placement": params.placement,
        "compress": params.compress,
        "node_fraction": params.node_fraction,
        "priorities": {SUPPLIED_SOURCE: "supplied", STAND_IN_SOURCE: "stand-in from the trace"}.get(
            semantic_source, semantic_source
        ),
        "semantic_source": semantic_source,
        "input": source_info,
        "strategies": rows,
        "seconds": round(time.monotonic() - started, 3),
    }


SUMMARY_FIELDS = {
    ReplayMode.INFLATION: ("unallocated_at_100", "unallocated_spread"),
    ReplayMode.TIMELINE: (
        "p95_delay_s",
        "violation_rate",
        "util_fluctuation_pct",
        "allocation_rate",
    ),
}


def replay_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The compact form (`replay_schedule --json`): the fields each mode produces."""
    fields = SUMMARY_FIELDS[ReplayMode(result["mode"])]
    summary: dict[str, Any] = {
        "mode": result["mode"],
        "strategies": {
            name: {f: row[f] for f in fields} for name, row in result["strategies"].items()
        },
    }
    if "placement" in result:
        summary["placement"] = result["placement"]
    if "semantic_source" in result:
        summary["semantic_source"] = result["semantic_source"]
    if result.get("fgd_reduction") is not None:
        summary["fgd_reduction"] = result["fgd_reduction"]
    return summary


def replay_cluster_compute(
    *, cluster: Cluster, params: ReplayParams, progress: ProgressFn | None = None
) -> dict[str, Any]:
    """In-process replay of a stored cluster (the `replay_schedule --cluster` command)."""
    if params.hints:
        raise ReplayError(
            "hints: a cluster's semantic priorities are its recommendations; leave hints out"
        )
    try:
        loaded = cluster_replay_input(cluster=cluster)
    except SnapshotError as exc:
        raise ReplayError(f"cluster {cluster.name!r}: {exc}") from exc
    return replay_compute(
        params=params,
        workload=loaded.trace.workload,
        spec=loaded.trace.spec,
        progress=progress,
        hints=loaded.semantic.hints,
        semantic_source=SEMANTIC_SOURCE,
        source=loaded.describe(cluster=cluster),
    )
