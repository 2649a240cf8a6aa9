from __future__ import annotations

from datetime import datetime

import pytest

from tests.cluster.k8s_build import event, listing, node, pod
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.risk.cluster.io import IoDevice, io_max_line, io_throttling_diagnose
from trustrank.risk.cluster.rdma import TrafficClassCounters, drop_probability, rdma_diagnose
from trustrank.risk.cluster.scheduling import (
    commitment_preempted,
    preemption_diagnose,
    priority_inversion_diagnose,
)
from trustrank.risk.cluster.settings import ClusterThresholds

NOW = datetime.fromisoformat("2026-11-30T12:00:00Z").timestamp()


@pytest.mark.parametrize(
    ("local", "global_view", "now", "deadline", "expected"),
    [
        ("n1", "", 100.0, 100.0, True),
        ("n1", "n1", 100.0, 50.0, False),  # commitment honoured
        ("n1", "", 99.9, 100.0, False),  # exactly deadline − 100 ms: not past it
        ("n1", "", 99.91, 100.0, True),
        ("n1", "n2", 10.0, 100.0, False),  # differs but well before the deadline
    ],
)
def test_formula_8(local, global_view, now, deadline, expected):
    assert commitment_preempted(local_node=local, global_node=global_view, now=now, deadline=deadline) is expected


def test_preemption_events_and_conditions():
    snapshot = kubernetes_parse(body=listing(
        pod("victim", node="n1", gpus=2, priority=100, owner=("PyTorchJob", "ft")),
        pod("evicted", node="n1", gpus=1),
        pod("marked", node="n1", gpus=1, conditions=[{
            "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
            "message": "Kubernetes Scheduler: preempting", "lastTransitionTime": "2026-11-30T11:00:00Z"}]),
        pod("nominated", phase="Pending", gpus=2, nominated="n1", created="2026-11-30T11:58:00Z"),
        pod("fresh", phase="Pending", gpus=2, nominated="n1", created="2026-11-30T11:59:50Z"),
        event("Preempted", name="victim", message="Preempted by ml/server-0 on node n1", count=2),
        event("Evicted", name="evicted", message="The node was low on resource: memory."),
        event("OOMKilling", name="n1", kind="Node", namespace="",
              message="Memory cgroup out of memory: Killed process 4242 (python) total-vm:1kB"),
        event("FailedScheduling", name="nominated", message="0/1 nodes are available"),
        node("n1"),
    ))
    found = {(d.kind, d.subject): d for d in preemption_diagnose(snapshot=snapshot, now=NOW)}
    assert set(found) == {
        ("pod_preempted", "ml/victim"), ("pod_evicted", "ml/evicted"), ("pod_oom_killed", "n1"),
        ("pod_preempted", "ml/marked"), ("pod_nomination_lost", "ml/nominated"),
    }
    victim = found[("pod_preempted", "ml/victim")].evidence_dict()
    assert (victim["preemptor"], victim["preemptor_node"], victim["count"], victim["priority"]) == (
        "ml/server-0", "n1", 2, 100)
    assert found[("pod_preempted", "ml/victim")].workload == "ml/PyTorchJob/ft"
    assert found[("pod_oom_killed", "n1")].evidence_dict()["process"] == "python"


def _inversion(low_kwargs, high_kwargs, *, node_gpus=8):
    snapshot = kubernetes_parse(body=listing(
        node("n1", gpus=node_gpus),
        pod("low", **{"node": "n1", "gpus": 4, "priority": 10, "scheduled": "2026-11-30T10:10:00Z", **low_kwargs}),
        pod("high", **{"phase": "Pending", "gpus": 4, "priority": 1000, "created": "2026-11-30T10:05:00Z", **high_kwargs}),
    ))
    return priority_inversion_diagnose(pods=snapshot.pods, nodes=snapshot.nodes)


@pytest.mark.parametrize(
    ("low", "high", "node_gpus", "inverted"),
    [
        ({}, {}, 8, True),
        ({}, {"priority": 10}, 8, False),  # equal priority
        ({}, {"created": "2026-11-30T10:15:00Z"}, 8, False),  # the higher one came later
        ({}, {"gpus": 6}, 8, True),  # 4 free + the 4 the lower one took
        ({}, {"gpus": 9}, 8, False),  # would not have fitted anyway
        ({"gpus": 2}, {"gpus": 4}, 4, True),  # 2 free + 2 held by the lower one
        ({}, {"node": "n1", "phase": "Running", "scheduled": "2026-11-30T10:09:00Z"}, 16, False),  # served first
        ({}, {"node": "n1", "phase": "Running", "scheduled": "2026-11-30T10:20:00Z"}, 16, True),  # served after
    ],
)
def test_priority_inversion(low, high, node_gpus, inverted):
    found, quality = _inversion(low, high, node_gpus=node_gpus)
    assert bool(found) is inverted
    if inverted:
        (item,) = found
        evidence = item.evidence_dict()
        assert (evidence["higher_pod"], evidence["lower_pod"], evidence["node"]) == ("ml/high", "ml/low", "n1")
        assert evidence["higher_waited_s"] == 300.0
        assert quality.violation_rate == 1.0
        assert "ml/low" in item.title and "ml/high" in item.title


def test_scheduling_quality_p95_delay():
    _, quality = _inversion({"created": "2026-11-30T10:00:00Z"}, {"priority": 5})
    assert quality.p95_delay_s == 600.0 and quality.comparable_pairs == 0 and quality.violation_rate == 0.0


def _device(wait, queue, **kwargs):
    return IoDevice(subject="serving/vllm-0", device="259:0", wait_ms=list(enumerate(wait)),
                    queue_percent=queue, neighbour="/kubepods/burstable/pod-etl", **kwargs)


@pytest.mark.parametrize(
    ("wait", "queue", "flagged"),
    [
        ([10, 60, 70, 80, 20], [], True),  # 3 consecutive periods above 50 ms
        ([10, 60, 70, 20, 80], [], False),  # only 2 in a row
        ([50, 50, 50, 50], [], False),  # exactly 50 ms is not above
        ([], [(0.0, 95.0), (1.0, 92.0), (2.0, 90.0)], True),  # ≥ 90 % for exactly 2 s
        ([], [(0.0, 95.0), (1.0, 92.0), (1.9, 90.0)], False),  # 1.9 s
        ([], [(0.0, 95.0), (1.0, 89.9), (2.0, 95.0), (3.0, 95.0)], False),  # broken run
    ],
)
def test_io_throttling(wait, queue, flagged):
    found = io_throttling_diagnose(devices=[_device(wait, queue, neighbour_rbps=400 * 2**20, neighbour_wiops=3000)])
    assert bool(found) is flagged
    if found:
        assert found[0].evidence_dict()["io_max"] == "259:0 rbps=209715200 wbps=max riops=max wiops=1500"


def test_io_max_line_floors_and_rounding():
    device = _device([], [], neighbour_rbps=1.5 * 2**20, neighbour_wbps=100 * 2**20 + 12345, neighbour_riops=7,
                     neighbour_wiops=1001)
    assert io_max_line(device=device) == "259:0 rbps=1048576 wbps=52428800 riops=10 wiops=500"
    assert io_max_line(device=device, thresholds=ClusterThresholds(io_limit_share=0.25)).startswith(
        "259:0 rbps=1048576 wbps=26214400")


@pytest.mark.parametrize(
    ("tc", "packets", "drops", "cnp", "kind"),
    [
        (0, 1_000_000, 0, 0, None),
        (3, 850, 150, 40, "rdma_congestion"),  # 15 % under congestion
        (3, 990, 10, 40, None),  # exactly 1 %: not above
        (3, 850, 150, 0, None),  # drops without congestion signals: not this diagnosis
        (5, 150, 850, 40, "rdma_metadata_retries"),
        (5, 999_999, 1, 0, "rdma_metadata_retries"),  # a single metadata drop is never silent
    ],
)
def test_rdma(tc, packets, drops, cnp, kind):
    counters = TrafficClassCounters(node="n1", port="mlx5_0/1", traffic_class=tc, interval_s=10,
                                    packets=packets, drops=drops, cnp=cnp)
    found = rdma_diagnose(counters=[counters])
    assert (found[0].kind if found else None) == kind
    if kind == "rdma_metadata_retries":
        assert found[0].evidence_dict()["retries"] >= drops
    assert drop_probability(counters) == pytest.approx(drops / (packets + drops))
