"""Thresholds of the cluster diagnoses. Defaults are the source document's figures where
it gives one (formulas 2–5, 8, 11, 13, 14 in DESIGN.md) and documented choices where it
does not; the cluster app may build one from Django settings and pass it in."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ClusterThresholds:
    # Formula 11: Guaranteed GPU pods whose utilisation stays under 40 % over the window.
    # "Stays under" = the window's 95th percentile is below the threshold, so one spike
    # does not hide an idle reservation; exactly 40 % is not flagged.
    over_reserved_util_percent: float = 40.0
    over_reserved_window_s: float = 3600.0
    # A window must be this well covered by samples before judging (scrape gaps).
    over_reserved_min_samples: int = 10
    over_reserved_min_coverage: float = 0.8

    # Formula 2: a GPU or node whose FI is at least this is reported as fragmented.
    fragmentation_index: float = 0.5

    # Formula 3.
    latency_window_s: float = 60.0
    latency_ewma_decay: float = 0.95
    latency_cv_factor: float = 0.3
    latency_quantile: float = 0.99
    # Windows of history before a threshold is trusted, and requests for a window's p99.
    latency_warmup_windows: int = 3
    latency_min_requests: int = 20

    # Formula 4.
    throughput_window_s: float = 10.0
    throughput_variance: float = 1200.0  # (tokens/s)^2
    throughput_weight: float = 1.8

    # Formula 5: dQ/dt > 0 for at least this long is "sustained".
    queue_sustained_s: float = 60.0
    queue_min_intervals: int = 3

    # KV-cache pressure: mean usage above 0.90 (vLLM reports 0..1) over the window while
    # the preemption counter rises.
    kv_cache_usage: float = 0.90
    kv_cache_window_s: float = 60.0

    # Formula 8: a pod nominated to a node (the scheduler's local commitment after
    # preempting victims) that is still not bound there this long after it became
    # unschedulable is reported; the formula's 100 ms margin applies before that deadline.
    preemption_deadline_s: float = 30.0
    preemption_margin_s: float = 0.1

    # Formula 13.
    io_wait_ms: float = 50.0
    io_wait_periods: int = 3
    io_queue_percent: float = 90.0
    io_queue_duration_s: float = 2.0
    # The neighbour's io.max is this share of its observed peak rates, with floors so a
    # limit never stalls it outright.
    io_limit_share: float = 0.5
    io_min_bps: int = 1024 * 1024
    io_min_iops: int = 10

    # Formula 14: drop probability (drops / packets) above which a traffic class is
    # congested; any drop on a metadata class is reported as retries.
    rdma_drop_probability: float = 0.01
    rdma_metadata_traffic_classes: tuple[int, ...] = field(default=(5,))

    # Workload priorities: recommended values per tier (higher is more important), in the
    # range of user-defined PriorityClasses (system classes sit at 2,000,000,000).
    tier_priorities: tuple[tuple[str, int], ...] = (
        ("latency-critical", 1_000_000),
        ("latency-sensitive", 100_000),
        ("service", 10_000),
        ("batch-training", 1_000),
        ("best-effort", 0),
    )


DEFAULT_THRESHOLDS = ClusterThresholds()
