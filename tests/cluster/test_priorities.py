from __future__ import annotations

import pytest

from tests.cluster.k8s_build import listing, pod
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.risk.cluster.findings import Diagnosis, Severity, SubjectKind
from trustrank.risk.cluster.priorities import Workload, workload_priorities, workloads_from_pods


def _diagnosis(kind: str, workload: str) -> Diagnosis:
    return Diagnosis(kind=kind, subject_kind=SubjectKind.POD, subject="x", severity=Severity.MEDIUM,
                     title=kind, evidence=(), workload=workload)


def _workload(key="ml/Deployment/api", *, priority=0, qos="Guaranteed", gpus=1.0, training=False,
              latency=False, internet=False):
    return Workload(key=key, priority_class="", priority=priority, qos_class=qos, gpus=gpus, training=training,
                    serves_latency_sensitive=latency, on_internet_path=internet)


@pytest.mark.parametrize(
    ("workload", "diagnoses", "tier", "direction"),
    [
        (_workload(latency=True, internet=True, priority=1000), [], "latency-critical", "raise"),
        (_workload(latency=True, priority=100_000), [], "latency-sensitive", "keep"),
        (_workload(training=True, priority=1_000_000), [], "batch-training", "lower"),
        (_workload(priority=10_000), [], "service", "keep"),
        # Starved internal inference: latency violations push it to latency-critical.
        (_workload(latency=True, priority=100_000), ["inference_latency"], "latency-critical", "raise"),
        # 65 + 5 = 70 stays latency-sensitive; the 1.8 weight makes it 74, still below 75.
        (_workload(latency=True, priority=100_000), ["inference_kv_cache_pressure", "inference_throughput_unstable"],
         "latency-sensitive", "keep"),
        # 65 + 8 = 73; × 1.8 = 79.4: instability tips it over.
        (_workload(latency=True, priority=100_000), ["inference_queue_imbalance", "inference_throughput_unstable"],
         "latency-critical", "raise"),
        # An idle reservation lowers a service: 45 − 10 = 35, exactly the service floor.
        (_workload(priority=10_000), ["gpu_over_reserved"], "service", "keep"),
        (_workload(priority=10_000), ["gpu_over_reserved", "gpu_over_reserved"], "batch-training", "lower"),
    ],
)
def test_recommended_tier_and_direction(workload, diagnoses, tier, direction):
    (result,) = workload_priorities(workloads=[workload], diagnoses=[_diagnosis(k, workload.key) for k in diagnoses])
    assert (result.tier, result.direction) == (tier, direction)
    assert result.reasons[0].factor == "serves"
    assert len(result.diagnoses) == len([k for k in diagnoses if k != "inference_throughput_unstable"])


def test_evictable_gpu_training_is_told_to_become_guaranteed():
    (result,) = workload_priorities(workloads=[_workload(training=True, qos="BestEffort", priority=1000)], diagnoses=[])
    assert (result.recommended_qos, result.direction, result.disagrees) == ("Guaranteed", "keep", True)
    assert any(r.factor == "qos" for r in result.reasons)


def test_disagreements_come_first_then_score():
    workloads = [_workload("a/Deployment/batch", training=True, priority=5000),
                 _workload("a/Deployment/api", latency=True, internet=True, priority=1000),
                 _workload("a/Deployment/svc", priority=10_000)]
    order = [r.workload for r in workload_priorities(workloads=workloads, diagnoses=[])]
    assert order == ["a/Deployment/api", "a/Deployment/batch", "a/Deployment/svc"]


def test_the_inference_on_the_internet_path_outranks_batch_training_declared_above_it():
    workloads = [_workload("ml/PyTorchJob/ft", training=True, priority=100_000),
                 _workload("web/Deployment/chat", latency=True, internet=True, priority=1000)]
    results = {r.workload: r for r in workload_priorities(workloads=workloads, diagnoses=[])}
    assert results["web/Deployment/chat"].recommended_priority > results["ml/PyTorchJob/ft"].recommended_priority
    assert (results["web/Deployment/chat"].direction, results["ml/PyTorchJob/ft"].direction) == ("raise", "lower")


def test_workloads_from_pods_groups_by_owner():
    pods = kubernetes_parse(body=listing(
        pod("chat-7c9-a", owner=("ReplicaSet", "chat-7c9"), labels={"pod-template-hash": "7c9"}, priority=5, gpus=1),
        pod("chat-7c9-b", owner=("ReplicaSet", "chat-7c9"), labels={"pod-template-hash": "7c9"}, priority=5, gpus=1,
            qos="Burstable"),
        pod("ft-0", owner=("PyTorchJob", "ft"), gpus=8, qos="BestEffort"),
        pod("lonely"),
    )).pods
    workloads = {w.key: w for w in workloads_from_pods(pods=pods, latency_sensitive={"ml/Deployment/chat": True},
                                                       internet_path={"ml/Deployment/chat": True})}
    chat = workloads["ml/Deployment/chat"]
    assert (chat.gpus, chat.qos_class, chat.priority, chat.serves_latency_sensitive, chat.on_internet_path) == (
        2.0, "Burstable", 5, True, True)
    assert workloads["ml/PyTorchJob/ft"].training and not workloads["ml/Pod/lonely"].training
