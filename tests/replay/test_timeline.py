"""Priority policies in the timeline replay, on one-GPU clusters where the order is known."""

from __future__ import annotations

import numpy as np
import pytest

from trustrank.risk.scheduling.timeline import (
    POLICIES,
    SemanticHint,
    replay_timeline,
    stand_in_hints,
)

from .helpers import cluster, workload


def _contended():
    # One GPU. p0 holds it until t=100; a best-effort p1 (t=10) and a latency-sensitive
    # p2 (t=20) wait for it.
    spec = cluster([(32000, 100000, 1)])
    wl = workload(
        [(1000, 10, 1000, 1)] * 3,
        qos=["LS", "BE", "LS"],
        creation=[0, 10, 20],
        duration=[100, 100, 100],
    )
    return spec, wl


def test_semantic_aware_starts_the_urgent_pod_first_without_violations():
    spec, wl = _contended()
    result = replay_timeline(spec=spec, workload=wl, policy="semantic_aware", strategy="best_fit")
    assert result.placed == 3 and result.allocation_rate == 1.0
    assert result.violation_rate == 0.0 and result.pairs == 1
    # p0 waited 0 s, p2 80 s, p1 190 s.
    assert result.p95_delay_s == pytest.approx(float(np.percentile([0, 80, 190], 95)))


def test_reservation_priority_ties_fall_back_to_arrival_and_violate():
    spec, wl = _contended()
    result = replay_timeline(
        spec=spec, workload=wl, policy="gpu_mem_reservation", strategy="best_fit"
    )
    # Equal reservations: p1 (BE) goes first while p2 (LS) waits and would have fitted.
    assert result.violations == 1 and result.pairs == 1 and result.violation_rate == 1.0


def test_semantic_aware_follows_the_supplied_recommendations():
    spec, wl = _contended()
    hints = {"p0": SemanticHint(1), "p1": SemanticHint(5), "p2": SemanticHint(2)}
    result = replay_timeline(
        spec=spec, workload=wl, policy="semantic_aware", strategy="best_fit", hints=hints
    )
    assert result.violation_rate == 0.0 and result.pairs == 1


def test_a_lower_pod_that_fits_when_the_higher_cannot_is_no_violation():
    # Two GPUs on one node; p0 holds one. An LS pod wanting 2 GPUs cannot start, the BE pod
    # wanting one backfills: the higher one would not have fitted, so no violation.
    spec = cluster([(32000, 100000, 2)])
    wl = workload(
        [(1000, 10, 1000, 1), (1000, 10, 1000, 2), (1000, 10, 1000, 1)],
        qos=["LS", "LS", "BE"],
        creation=[0, 5, 6],
        duration=[100, 100, 100],
    )
    for policy in POLICIES:
        result = replay_timeline(spec=spec, workload=wl, policy=policy, strategy="best_fit")
        assert result.violations == 0, policy
        assert result.placed == 3


def test_static_weights_give_the_heavier_class_more_turns():
    spec = cluster([(32000, 100000, 1)])
    # Holder, then 3 BE and 3 LS pods queue; each needs the whole GPU for 10 s.
    qos = ["LS"] + ["BE"] * 3 + ["LS"] * 3
    wl = workload(
        [(1000, 10, 1000, 1)] * 7, qos=qos, creation=[0, 1, 2, 3, 4, 5, 6], duration=[10] * 7
    )
    result = replay_timeline(spec=spec, workload=wl, policy="static_weight_rr", strategy="best_fit")
    assert result.placed == 7
    # The LS pods (weight 3) and BE pods (weight 1) interleave, so some BE pods start ahead
    # of waiting LS pods: violations, but fewer than pairs.
    assert 0 < result.violations < result.pairs


def test_stand_in_hints_rank_latency_sensitive_gpu_pods_highest():
    wl = workload(
        [(1000, 10, 1000, 1), (1000, 10, 0, 0), (1000, 10, 1000, 1), (1000, 10, 500, 1)],
        qos=["LS", "LS", "BE", "Burstable"],
    )
    hints = stand_in_hints(wl)
    assert [hints[f"p{i}"].priority for i in range(4)] == [3, 2, 1, 2]
    assert hints["p2"].diagnoses == ("evictable_gpu_training",)
    assert hints["p3"].diagnoses == ()


def test_compression_squeezes_arrivals_into_a_queue():
    spec = cluster([(32000, 100000, 1)])
    wl = workload([(1000, 10, 1000, 1)] * 4, creation=[0, 1000, 2000, 3000], duration=[500] * 4)
    relaxed = replay_timeline(spec=spec, workload=wl, policy="semantic_aware", strategy="fgd")
    squeezed = replay_timeline(
        spec=spec, workload=wl, policy="semantic_aware", strategy="fgd", compress=10
    )
    assert relaxed.p95_delay_s == 0
    assert squeezed.p95_delay_s > 0
    assert squeezed.util_mean_pct > relaxed.util_mean_pct
