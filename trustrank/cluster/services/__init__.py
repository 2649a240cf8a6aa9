"""Cluster services: the scheduling replay (`replay` computes, `replay_runs` keeps the run
rows, `replay_cluster` reads a team's stored cluster as input), and cluster evidence —
objects and metric storage (`objects`, `metrics`), diagnoses (`diagnoses`) and retention."""

from trustrank.cluster.services.replay import (
    DEFAULT_NODES,
    DEFAULT_PODS,
    ReplayError,
    ReplayParams,
    replay_cluster_compute,
    replay_compute,
    replay_params_validate,
    replay_summary,
    trace_load,
)
from trustrank.cluster.services.replay_runs import (
    CREATE_SCOPE,
    replay_run_create,
    replay_run_execute,
)

__all__ = [
    "CREATE_SCOPE",
    "DEFAULT_NODES",
    "DEFAULT_PODS",
    "ReplayError",
    "ReplayParams",
    "replay_cluster_compute",
    "replay_compute",
    "replay_params_validate",
    "replay_run_create",
    "replay_run_execute",
    "replay_summary",
    "trace_load",
]
