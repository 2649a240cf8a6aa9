"""Small hand-made clusters and workloads for the replay tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trustrank.risk.scheduling.state import (
    ClusterSpec,
    Workload,
    workload_from_arrays,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "telemetry" / "alibaba"
PODS = DATA / "gpu-v2023_openb_pod_list_default.csv"
NODES = DATA / "gpu-v2023_openb_node_list_gpu_node.csv"


def cluster(nodes: Sequence[tuple[int, int, int]]) -> ClusterSpec:
    """nodes: (cpu_milli, memory_mib, gpus) each."""
    return ClusterSpec(
        names=tuple(f"n{i}" for i in range(len(nodes))),
        cpu=np.array([n[0] for n in nodes], dtype=np.int64),
        mem=np.array([n[1] for n in nodes], dtype=np.int64),
        gpus=np.array([n[2] for n in nodes], dtype=np.int64),
        models=tuple("" for _ in nodes),
    )


def workload(
    pods: Sequence[tuple[int, int, int, int]],
    *,
    qos: Sequence[str] | None = None,
    creation: Sequence[int] | None = None,
    duration: Sequence[int] | None = None,
) -> Workload:
    """pods: (cpu_milli, memory_mib, gpu_milli, num_gpu) each."""
    n = len(pods)
    return workload_from_arrays(
        names=tuple(f"p{i}" for i in range(n)),
        cpu=np.array([p[0] for p in pods], dtype=np.int64),
        mem=np.array([p[1] for p in pods], dtype=np.int64),
        gpu_milli=np.array([p[2] for p in pods], dtype=np.int64),
        num_gpu=np.array([p[3] for p in pods], dtype=np.int64),
        qos=tuple(qos) if qos is not None else tuple("LS" for _ in pods),
        gpu_spec=tuple("" for _ in pods),
        creation=np.array(creation if creation is not None else [0] * n, dtype=np.int64),
        duration=np.array(duration if duration is not None else [100] * n, dtype=np.int64),
    )


def csv_subset(*, pods: int, nodes: int, tmp: Path) -> tuple[Path, Path]:
    """The first rows of the bundled openb files, for fast command and task tests."""
    pod_lines = PODS.read_text().splitlines()[: pods + 1]
    node_lines = NODES.read_text().splitlines()
    # Every 8th node keeps a mix of node types.
    node_lines = [node_lines[0], *node_lines[1::8][:nodes]]
    pods_path, nodes_path = tmp / "pods.csv", tmp / "nodes.csv"
    pods_path.write_text("\n".join(pod_lines) + "\n")
    nodes_path.write_text("\n".join(node_lines) + "\n")
    return pods_path, nodes_path
