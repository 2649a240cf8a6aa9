"""Cluster services: the scheduling replay (`replay`), and cluster evidence — objects and
metric storage (`objects`, `metrics`), diagnoses (`diagnoses`) and retention."""

from trustrank.cluster.services.replay import (
    CREATE_SCOPE,
    DEFAULT_NODES,
    DEFAULT_PODS,
    Outcome,
    ReplayError,
    ReplayParams,
    replay_cluster_compute,
    replay_compute,
    replay_params_validate,
    replay_run_create,
    replay_run_execute,
    replay_summary,
    trace_load,
)

__all__ = [
    "CREATE_SCOPE",
    "DEFAULT_NODES",
    "DEFAULT_PODS",
    "Outcome",
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
