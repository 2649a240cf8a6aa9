"""Stored Kubernetes pods and nodes -> the replay's arrays (pure, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.cluster import k8s_build as k8s
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.kubernetes_objects import GpuRequest
from trustrank.risk.scheduling.snapshot import (
    PhaseStep,
    SnapshotError,
    StoredPod,
    cluster_hints,
    cluster_trace,
    gpu_shape,
    node_gpus,
    pod_lifetime,
)
from trustrank.risk.scheduling.timeline import replay_timeline

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
SNAPSHOT = T0 + timedelta(hours=1)


def parsed(*items):
    return kubernetes_parse(body=k8s.listing(*items))


@pytest.mark.parametrize(
    ("gpu", "memory", "replicas", "shape"),
    [
        (GpuRequest(whole=1), 0, 0, (1, 1000)),
        (GpuRequest(whole=4), 0, 0, (4, 1000)),
        (GpuRequest(fraction=0.5), 0, 0, (1, 500)),
        (GpuRequest(whole=1, cores_percent=30, memory_mib=8000), 80_000, 0, (1, 300)),
        (GpuRequest(mig_slices=3), 0, 0, (1, 429)),
        (GpuRequest(shared=1, memory_mib=20_000), 80_000, 0, (1, 250)),
        (GpuRequest(shared=1, memory_mib=20_000), 0, 0, (1, 1000)),  # size unknown: whole
        (GpuRequest(shared=1), 0, 4, (1, 250)),
        (GpuRequest(shared=2), 0, 4, (1, 500)),
        (GpuRequest(whole=2, cores_percent=30), 0, 0, (2, 1000)),  # shares on several GPUs
        (GpuRequest(fraction=0.0), 0, 0, (0, 0)),
    ],
)
def test_gpu_requests_become_replay_shapes(gpu, memory, replicas, shape):
    assert gpu_shape(gpu, gpu_memory_mib=memory, replicas=replicas) == shape


def test_node_gpus_fold_time_slicing_replicas_back():
    plain = parsed(k8s.node("a", gpus=8)).nodes[0]
    assert node_gpus(plain) == 8
    sliced = k8s.node("b", gpus=0)
    sliced["status"]["allocatable"]["nvidia.com/gpu.shared"] = "16"
    sliced["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "4"
    assert node_gpus(parsed(sliced).nodes[0]) == 4
    sliced["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"
    assert node_gpus(parsed(sliced).nodes[0]) == 2


def _stored(pod, *steps, gone=None):
    return StoredPod(pod=pod, workload="ml/Job/x", history=tuple(steps), gone_at=gone)


def test_lifetime_follows_the_recorded_phase_history():
    pending_then_running = parsed(k8s.pod("a", gpus=1, created="2026-11-30T10:00:00Z")).pods[0]
    steps = (
        PhaseStep(T0, "created", "", "Pending"),
        PhaseStep(T0 + timedelta(minutes=5), "phase", "Pending", "Running"),
        PhaseStep(T0 + timedelta(minutes=20), "phase", "Running", "Succeeded"),
    )
    # The row's state is the latest: Succeeded. Start = first seen running, end = finished.
    done = parsed(k8s.pod("a", gpus=1, phase="Succeeded")).pods[0]
    created, started, end = pod_lifetime(_stored(done, *steps), snapshot_at=SNAPSHOT)
    assert (created, started, end) == (T0, T0 + timedelta(minutes=5), T0 + timedelta(minutes=20))
    # Still running: until the snapshot.
    _, started, end = pod_lifetime(_stored(pending_then_running, *steps[:2]), snapshot_at=SNAPSHOT)
    assert started == T0 + timedelta(minutes=5) and end == SNAPSHOT
    # Deleted while running: until it was seen gone.
    gone = T0 + timedelta(minutes=30)
    _, _, end = pod_lifetime(
        _stored(pending_then_running, *steps[:2], PhaseStep(gone, "deleted", "Running", ""),
                gone=gone),
        snapshot_at=SNAPSHOT,
    )
    assert end == gone
    # Never ran: it is wanted from creation until the snapshot.
    waiting = parsed(k8s.pod("w", gpus=1, phase="Pending")).pods[0]
    created, started, end = pod_lifetime(_stored(waiting), snapshot_at=SNAPSHOT)
    assert started is None and (created, end) == (T0, SNAPSHOT)


def test_a_cluster_with_nothing_to_replay_says_what_is_missing():
    gpu_pod = _stored(parsed(k8s.pod("a", gpus=1)).pods[0])
    cpu_pod = _stored(parsed(k8s.pod("b")).pods[0])
    gpu_node = parsed(k8s.node("n1")).nodes
    with pytest.raises(SnapshotError, match="no nodes are stored"):
        cluster_trace(pods=[gpu_pod], nodes=[], snapshot_at=SNAPSHOT)
    with pytest.raises(SnapshotError, match="no GPU nodes: no stored node has an allocatable GPU"):
        cluster_trace(pods=[gpu_pod], nodes=parsed(k8s.node("c", gpus=0)).nodes,
                      snapshot_at=SNAPSHOT)
    with pytest.raises(SnapshotError, match="no GPU pods: no pods are stored"):
        cluster_trace(pods=[], nodes=gpu_node, snapshot_at=SNAPSHOT)
    with pytest.raises(SnapshotError, match="none of the 1 stored pods requests a GPU"):
        cluster_trace(pods=[cpu_pod], nodes=gpu_node, snapshot_at=SNAPSHOT)
    with pytest.raises(SnapshotError, match="cordoned"):
        cluster_trace(pods=[gpu_pod], nodes=parsed(k8s.node("d", unschedulable=True)).nodes,
                      snapshot_at=SNAPSHOT)


def _two_waiting():
    """One GPU held for 100 s; a batch pod (t=10) and a service pod (t=20) wait for it.
    Both Guaranteed, neither declares a priority."""
    pods = [
        k8s.pod("hold", gpus=1, phase="Succeeded", created="2026-11-30T10:00:00Z"),
        k8s.pod("batch", gpus=1, created="2026-11-30T10:00:10Z"),
        k8s.pod("svc", gpus=1, created="2026-11-30T10:00:20Z"),
    ]
    pods[0]["status"]["startTime"] = "2026-11-30T10:00:00Z"
    pods[0]["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T10:01:40Z"}]
    snap = parsed(k8s.node("n1", gpus=1), *pods)
    stored = [
        StoredPod(pod=p, workload=f"ml/Job/{p.name}") for p in snap.pods
    ]
    return cluster_trace(pods=stored, nodes=snap.nodes, snapshot_at=SNAPSHOT)


def _order(trace, policy, hints):
    result = replay_timeline(spec=trace.spec, workload=trace.workload, policy=policy,
                             strategy="best_fit", hints=hints)
    return [trace.workload.names[i] for i in result.start_order], result


def test_higher_recommended_pod_goes_first_under_semantic_not_static_weights():
    trace = _two_waiting()
    assert list(trace.declared) == [0, 0, 0]
    semantic = cluster_hints(
        trace=trace,
        recommended={"ml/Job/hold": 1000, "ml/Job/batch": 1000, "ml/Job/svc": 10_000},
        diagnoses={},
    )
    assert semantic.hints["ml/svc"].priority == 2 and semantic.hints["ml/batch"].priority == 1
    order, result = _order(trace, "semantic_aware", semantic.hints)
    assert order == ["ml/hold", "ml/svc", "ml/batch"] and result.violations == 0
    order, result = _order(trace, "static_weight_rr", semantic.hints)
    assert order == ["ml/hold", "ml/batch", "ml/svc"] and result.violations == 1


def test_a_diagnosis_lifts_an_equally_recommended_pod():
    trace = _two_waiting()
    semantic = cluster_hints(
        trace=trace,
        recommended={"ml/Job/hold": 1000, "ml/Job/batch": 1000, "ml/Job/svc": 1000},
        diagnoses={"ml/Job/svc": {"inference_latency"}},
    )
    order, _ = _order(trace, "semantic_aware", semantic.hints)
    assert order.index("ml/svc") < order.index("ml/batch")


def test_pods_without_a_recommendation_keep_their_declared_priority():
    trace = _two_waiting()
    semantic = cluster_hints(trace=trace, recommended={"ml/Job/svc": 10_000}, diagnoses={})
    assert (semantic.recommended, semantic.declared) == (1, 2)
    assert semantic.levels == {0: 1, 10_000: 2}
