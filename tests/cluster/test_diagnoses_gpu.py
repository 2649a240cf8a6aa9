from __future__ import annotations

import pytest

from tests.cluster.k8s_build import listing, node, pod
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.risk.cluster.findings import Severity
from trustrank.risk.cluster.gpu import (
    GpuMemory,
    evictable_training_diagnose,
    fragmentation_diagnose,
    gpu_fragmentation,
    node_fragmentation,
    over_reserved_diagnose,
    training_signals,
    utilisation_percent,
)
from trustrank.risk.cluster.settings import ClusterThresholds

NOW = 1_800_000_000.0
T = ClusterThresholds(over_reserved_window_s=600, over_reserved_min_samples=5)


def _pods(*items):
    return kubernetes_parse(body=listing(*items)).pods


def _flat(value: float, *, count: int = 11, step: float = 60.0):
    return [(NOW - step * (count - 1 - i), value) for i in range(count)]


@pytest.mark.parametrize(
    ("qos", "gpus", "samples", "flagged"),
    [
        ("Guaranteed", 1, _flat(10.0), True),
        ("Guaranteed", 1, _flat(39.99), True),
        ("Guaranteed", 1, _flat(40.0), False),  # exactly 40 %: not under
        ("Guaranteed", 1, _flat(80.0), False),
        ("Burstable", 1, _flat(10.0), False),  # not Guaranteed: the evictable check's business
        ("Guaranteed", None, _flat(10.0), False),  # no GPU
        ("Guaranteed", 1, _flat(10.0, count=4), False),  # too few samples
        ("Guaranteed", 1, _flat(10.0, step=20), False),  # covers 200 s of a 600 s window
        ("Guaranteed", 1, [*_flat(10.0, count=21, step=30)[:-1], (NOW, 95.0)], True),  # one spike in 21: p95 still low
        ("Guaranteed", 1, [(t, 90.0 if i % 2 else 5.0) for i, (t, _) in enumerate(_flat(0))], False),
    ],
)
def test_over_reserved(qos, gpus, samples, flagged):
    pods = _pods(pod("p", node="n", qos=qos, gpus=gpus, owner=("ReplicaSet", "web-5d9f"),
                     labels={"pod-template-hash": "5d9f"}))
    found = over_reserved_diagnose(pods=pods, utilisation={"ml/p": samples}, now=NOW, thresholds=T)
    assert bool(found) is flagged
    if found:
        (item,) = found
        assert item.kind == "gpu_over_reserved" and item.subject == "ml/p"
        assert item.workload == "ml/Deployment/web"
        assert item.evidence_dict()["threshold_percent"] == 40.0


def test_over_reserved_fingerprint_is_stable_and_distinct():
    pods = _pods(pod("p", node="n", gpus=1), pod("q", node="n", gpus=1))
    first = over_reserved_diagnose(pods=pods, utilisation={"ml/p": _flat(5), "ml/q": _flat(5)}, now=NOW, thresholds=T)
    again = over_reserved_diagnose(pods=pods, utilisation={"ml/p": _flat(7), "ml/q": _flat(6)}, now=NOW + 60, thresholds=T)
    assert [d.fingerprint for d in first] == [d.fingerprint for d in again]
    assert first[0].fingerprint != first[1].fingerprint


@pytest.mark.parametrize(("metric", "value", "percent"), [
    ("DCGM_FI_DEV_GPU_UTIL", 37.0, 37.0), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.4, 40.0),
])
def test_utilisation_scales(metric, value, percent):
    assert utilisation_percent(metric=metric, value=value) == pytest.approx(percent)


@pytest.mark.parametrize(
    ("kwargs", "signal"),
    [
        ({"owner": ("PyTorchJob", "llama")}, "owner kind PyTorchJob"),
        ({"owner": ("Job", "nightly")}, "owner kind Job"),
        ({"labels": {"training.kubeflow.org/job-name": "x"}}, "label training.kubeflow.org/job-name"),
        ({"labels": {"app.kubernetes.io/component": "trainer"}}, "label app.kubernetes.io/component=trainer"),
        ({"owner": ("StatefulSet", "bert-finetune")}, "name"),
        ({"owner": ("Deployment", "vllm-server")}, None),
        ({"owner": ("StatefulSet", "constrained")}, None),  # "train" inside a word is not a signal
    ],
)
def test_training_signals(kwargs, signal):
    (item,) = _pods(pod("worker-0", **kwargs))
    signals = training_signals(item)
    if signal is None:
        assert signals == []
    else:
        assert any(s.startswith(signal) for s in signals)


@pytest.mark.parametrize(
    ("qos", "gpus", "phase", "expected"),
    [
        ("BestEffort", 1, "Running", Severity.HIGH),
        ("Burstable", 2, "Pending", Severity.MEDIUM),
        ("Guaranteed", 1, "Running", None),
        ("BestEffort", None, "Running", None),
        ("BestEffort", 1, "Succeeded", None),
    ],
)
def test_evictable_training(qos, gpus, phase, expected):
    pods = _pods(pod("t", qos=qos, gpus=gpus, phase=phase, owner=("PyTorchJob", "ft")))
    found = evictable_training_diagnose(pods=pods)
    assert (found[0].severity if found else None) == expected


def test_gpu_fragmentation_index():
    (item,) = gpu_fragmentation(gpus=[GpuMemory(node="n", gpu="0", free_mib=20_000, used_mib=60_000)])
    assert item.index == pytest.approx(0.75)
    (empty,) = gpu_fragmentation(gpus=[GpuMemory(node="n", gpu="1", free_mib=0, used_mib=0)])
    assert empty.index == 0.0


def test_node_fragmentation_counts_partly_used_gpus_as_not_contiguous():
    pods = _pods(
        pod("whole", node="n1", gpus=4),
        pod("half-a", node="n1", gpus=None, annotations={"gpu-fraction": "0.5"}),
        pod("half-b", node="n1", gpus=None, annotations={"gpu-fraction": "0.75"}),
        pod("gone", node="n1", gpus=2, phase="Succeeded"),
    )
    (item,) = node_fragmentation(nodes=kubernetes_parse(body=listing(node("n1", gpus=8))).nodes, pods=pods)
    # 4 whole + 1.25 in fractions packed on 2 GPUs: 2 untouched of 8, 2.75 free.
    assert (item.max_contiguous_free, item.free) == (2.0, pytest.approx(2.75))
    assert item.index == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("pending_gpus", "blocked"),
    [
        (3, True),  # 2 + 2 free across nodes, no node has 3
        (2, False),  # fits on one node
        (5, False),  # more than the cluster has free: not fragmentation
        (4, True),  # exactly the free total, no single node
    ],
)
def test_pending_pod_blocked_by_fragmentation(pending_gpus, blocked):
    snapshot = kubernetes_parse(body=listing(
        node("n1", gpus=8), node("n2", gpus=8), node("cordoned", gpus=8, unschedulable=True),
        pod("a", node="n1", gpus=6), pod("b", node="n2", gpus=6),
        pod("waiting", phase="Pending", gpus=pending_gpus, priority=100),
    ))
    found = [d for d in fragmentation_diagnose(nodes=snapshot.nodes, pods=snapshot.pods)
             if d.kind == "gpu_fragmentation_blocks_pod"]
    assert bool(found) is blocked
    if found:
        evidence = found[0].evidence_dict()
        assert (evidence["cluster_free_gpus"], evidence["largest_node_free_gpus"]) == (4.0, 2.0)


def test_pending_memory_request_blocked_by_per_gpu_memory():
    snapshot = kubernetes_parse(body=listing(
        node("n1", gpus=2), pod("shared", phase="Pending", gpus=None, extra_resources={"aliyun.com/gpu-mem": "30"}),
    ))
    gpus = [GpuMemory(node="n1", gpu="0", free_mib=20_000, used_mib=61_000),
            GpuMemory(node="n1", gpu="1", free_mib=25_000, used_mib=56_000)]
    found = fragmentation_diagnose(nodes=snapshot.nodes, pods=snapshot.pods, gpus=gpus)
    assert [d.title.endswith("GPU") for d in found if d.kind == "gpu_fragmentation_blocks_pod"] == [True]


def test_node_fragmentation_finding_threshold():
    snapshot = kubernetes_parse(body=listing(
        node("n1", gpus=2), pod("f", node="n1", gpus=None, annotations={"gpu-fraction": "0.25"}),
    ))
    # 1 untouched of 2: FI 0.5 = threshold, 0.75 stranded in the shared GPU.
    found = [d for d in fragmentation_diagnose(nodes=snapshot.nodes, pods=snapshot.pods) if d.kind == "gpu_fragmentation"]
    assert len(found) == 1
    found = fragmentation_diagnose(nodes=snapshot.nodes, pods=snapshot.pods,
                                   thresholds=ClusterThresholds(fragmentation_index=0.51))
    assert not [d for d in found if d.kind == "gpu_fragmentation"]
