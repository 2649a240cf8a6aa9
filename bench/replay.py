"""Benchmark: all six placement strategies in inflation mode over the openb trace.

Each seed draws pods with replacement from `openb_pod_list_default` until their GPU
requests reach 130 % of the 6,212 GPUs of `openb_node_list_gpu_node`; every strategy
replays the same draw. Timed: the replays (parsing the CSVs is not).

    python bench/replay.py [--seeds 10] [--jobs 1] [--pods PATH] [--nodes PATH]

Prints the unallocated GPU share at 100 % arrived per strategy (mean ± std over seeds),
then the last line {"seconds": …, "placements_per_s": …, "fgd_reduction": …, "cpu_seconds": …,
"peak_mb": …} where fgd_reduction is FGD's relative reduction of unallocated GPUs against the
best other, and cpu_seconds (user + system, workers included) tells a busy machine from a
slow replay.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trustrank.parsers.openb import parse_openb_nodes, parse_openb_pods
from trustrank.risk.scheduling.inflation import replay_inflation
from trustrank.risk.scheduling.state import cluster_from_nodes, workload_from_pods
from trustrank.risk.scheduling.strategies import STRATEGIES

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "telemetry" / "alibaba"


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (2 on an idle 2-core machine)")
    parser.add_argument("--pods", type=Path, default=DATA / "gpu-v2023_openb_pod_list_default.csv")
    parser.add_argument("--nodes", type=Path, default=DATA / "gpu-v2023_openb_node_list_gpu_node.csv")
    args = parser.parse_args()

    workload = workload_from_pods(parse_openb_pods(args.pods.read_bytes()))
    spec = cluster_from_nodes(parse_openb_nodes(args.nodes.read_bytes()))
    print(f"trace: {len(workload)} pods, {len(spec)} nodes, {int(spec.gpus.sum())} GPUs; "
          f"{args.seeds} seeds x {len(STRATEGIES)} strategies", flush=True)

    started = time.perf_counter()
    cpu_started = _cpu_seconds()
    result = replay_inflation(
        spec=spec, workload=workload, strategies=STRATEGIES, seeds=args.seeds, jobs=args.jobs
    )
    seconds = time.perf_counter() - started
    cpu_seconds = _cpu_seconds() - cpu_started

    gpus = int(spec.gpus.sum())
    for name, s in sorted(result.summaries.items(), key=lambda kv: kv[1].unallocated_at_100):
        print(f"  {name:15s} unallocated at 100% arrived: {100 * s.unallocated_at_100:5.2f}% "
              f"± {100 * s.unallocated_spread:4.2f}  (~{s.unallocated_at_100 * gpus:4.0f} GPUs)")
    reduction = result.fgd_reduction()
    print(f"  FGD vs best other: {100 * (reduction or 0):.1f}% fewer unallocated GPUs")
    # Peak resident size of this process plus the largest worker (they run side by side).
    peak_mb = (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * max(1, args.jobs)
    ) / 1024
    print(json.dumps({
        "seconds": round(seconds, 2),
        "placements_per_s": round(result.placements / seconds, 1),
        "fgd_reduction": round(reduction, 4) if reduction is not None else None,
        "cpu_seconds": round(cpu_seconds, 2),
        "peak_mb": round(peak_mb, 1),
    }))


if __name__ == "__main__":
    main()
