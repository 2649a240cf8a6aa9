"""Diagnoses from stored evidence to reliability findings and workload priorities."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.cluster import k8s_build as k8s
from trustrank.cluster.models import Cluster, ClusterWorkload
from trustrank.cluster.services.diagnoses import cluster_diagnose
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.objects import objects_load
from trustrank.findings.choices import TriageState
from trustrank.findings.models import Finding
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.series import MetricKind, Series

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _util(cluster: Cluster, *, pod: str, percent: float, end: datetime) -> None:
    start = int((end - timedelta(minutes=70)).timestamp() * 1000)
    stamps = tuple(start + i * 60_000 for i in range(71))
    series_store(cluster=cluster, series=[Series(
        "DCGM_FI_DEV_GPU_UTIL",
        (("Hostname", "n1"), ("gpu", "0"), ("namespace", "ml"), ("pod", pod)),
        MetricKind.GAUGE, stamps, (percent,) * len(stamps),
    )])


@pytest.fixture
def cluster(team):
    cluster = Cluster.objects.create(team=team, name="gpu-prod")
    snapshot = kubernetes_parse(body=k8s.listing(
        k8s.node("n1"),
        k8s.pod("infer-0", node="n1", gpus=1, qos="Guaranteed", priority=1000,
                owner=("StatefulSet", "infer")),
        k8s.pod("train-0", node="n1", gpus=2, qos="BestEffort", owner=("Job", "train")),
    ))
    objects_load(cluster=cluster, snapshot=snapshot, at=NOW - timedelta(hours=2))
    return cluster


def test_guaranteed_gpu_pod_at_ten_percent_is_an_over_reserved_finding(cluster, team):
    _util(cluster, pod="infer-0", percent=10.0, end=NOW)
    result = cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    assert result.created >= 2
    finding = Finding.objects.get(team=team, category="gpu_over_reserved")
    assert (finding.kind, finding.source) == ("reliability", "cluster")
    assert finding.evidence["cluster"] == "gpu-prod"
    assert finding.evidence["subject"] == "ml/infer-0"
    inputs = finding.evidence["inputs"]
    assert inputs["threshold_percent"] == 40.0
    assert inputs["p95_percent"] == 10.0 and inputs["samples"] >= 10
    evictable = Finding.objects.get(team=team, category="gpu_training_evictable")
    assert evictable.evidence["subject"] == "ml/train-0"
    workloads = {w.key: w for w in ClusterWorkload.objects.filter(cluster=cluster)}
    assert set(workloads) == {"ml/StatefulSet/infer", "ml/Job/train"}
    assert workloads["ml/Job/train"].recommended_qos == "Guaranteed"


def test_the_finding_resolves_when_utilisation_rises_and_other_teams_see_nothing(
    cluster, team, other_team
):
    _util(cluster, pod="infer-0", percent=10.0, end=NOW)
    cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    later = NOW + timedelta(hours=3)
    _util(cluster, pod="infer-0", percent=95.0, end=later)
    result = cluster_diagnose(cluster_id=cluster.pk, now=later)
    assert result.resolved == 1
    finding = Finding.objects.get(team=team, category="gpu_over_reserved")
    assert finding.state == TriageState.RESOLVED and finding.auto_resolved
    assert not Finding.objects.filter(team=other_team).exists()


def test_diagnosing_twice_changes_nothing_but_last_seen(cluster, team):
    _util(cluster, pod="infer-0", percent=10.0, end=NOW)
    cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    count = Finding.objects.filter(team=team).count()
    again = cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    assert again.created == 0 and again.resolved == 0
    assert Finding.objects.filter(team=team).count() == count


def test_two_clusters_with_the_same_pod_names_keep_separate_findings(cluster, team):
    twin = Cluster.objects.create(team=team, name="gpu-dr")
    objects_load(cluster=twin, snapshot=kubernetes_parse(body=k8s.listing(
        k8s.node("n1"),
        k8s.pod("train-0", node="n1", gpus=2, qos="BestEffort", owner=("Job", "train")),
    )))
    cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    cluster_diagnose(cluster_id=twin.pk, now=NOW)
    evictable = Finding.objects.filter(team=team, category="gpu_training_evictable")
    assert sorted(f.evidence["cluster"] for f in evictable) == ["gpu-dr", "gpu-prod"]
    assert all(f.state != TriageState.RESOLVED for f in evictable)


def test_an_inference_workload_behind_an_ingress_in_the_trace_graph_ranks_first(cluster, team):
    from trustrank.runtime.models import Environment, Service

    env = Environment.objects.create(team=team, name="prod", first_seen=NOW, last_seen=NOW)
    Service.objects.create(environment=env, name="infer", namespace="ml",
                           ingress_override=True, first_seen=NOW, last_seen=NOW)
    cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    infer = ClusterWorkload.objects.get(cluster=cluster, key="ml/StatefulSet/infer")
    train = ClusterWorkload.objects.get(cluster=cluster, key="ml/Job/train")
    assert infer.tier == "latency-critical" and infer.direction == "raise"
    assert infer.recommended_priority > train.recommended_priority
    assert any("internet" in r["detail"] for r in infer.reasons)


def test_a_diagnosis_that_dies_leaves_its_request_to_run_again(cluster, team, monkeypatch):
    """The claim commits with the diagnosis: a worker dying during it (here the compute
    raising) leaves the cluster unclaimed, so the redelivered request diagnoses it."""
    from trustrank.cluster.services import diagnoses

    _util(cluster, pod="infer-0", percent=10.0, end=datetime.now(UTC))
    requested = datetime.now(UTC)

    def dies(**kwargs):
        raise SystemExit("worker killed")

    real = diagnoses.cluster_diagnoses_compute
    monkeypatch.setattr(diagnoses, "cluster_diagnoses_compute", dies)
    with pytest.raises(SystemExit):
        diagnoses.cluster_diagnose_if_due(cluster_id=cluster.pk, requested=requested)
    assert Cluster.objects.get(pk=cluster.pk).diagnosed_at is None
    monkeypatch.setattr(diagnoses, "cluster_diagnoses_compute", real)
    result = diagnoses.cluster_diagnose_if_due(cluster_id=cluster.pk, requested=requested)
    assert result is not None and result.created >= 1
    assert Finding.objects.filter(team=team, category="gpu_over_reserved").exists()
    # Delivered once more, it finds the diagnosis done after the request.
    assert diagnoses.cluster_diagnose_if_due(cluster_id=cluster.pk, requested=requested) is None
