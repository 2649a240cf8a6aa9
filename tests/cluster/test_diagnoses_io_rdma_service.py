"""Formulas 13 and 14 from stored node-exporter, cAdvisor and NIC counters to reliability
findings, through storage (and once through the text-scrape receiver)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from tests.cluster import k8s_build as k8s
from tests.cluster.test_receivers_storage import run_jobs
from trustrank.cluster.models import Cluster
from trustrank.cluster.services.diagnoses import cluster_diagnose
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.objects import objects_load
from trustrank.findings.choices import TriageState
from trustrank.findings.models import Finding
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.series import MetricKind, Series

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MIB = 2**20
DISK = {"device": "nvme0n1", "instance": "10.0.0.1:9100", "node": "n1"}
PORT = {"device": "mlx5_0", "node": "n1", "port": "1"}


def _counter(name: str, labels: dict[str, str], increases: list[float], *, end: datetime) -> Series:
    """A cumulative counter with one sample per minute (at second 30) ending before `end`,
    growing by `increases`."""
    first = int(end.timestamp()) // 60 * 60 - len(increases) * 60 - 30
    values, total = [1000.0], 1000.0
    for step in increases:
        total += step
        values.append(total)
    stamps = tuple((first + i * 60) * 1000 for i in range(len(values)))
    return Series(name, tuple(sorted(labels.items())), MetricKind.COUNTER, stamps, tuple(values))


def _disk(cluster: Cluster, *, wait_ms: list[float], end: datetime = NOW) -> None:
    """node-exporter disk counters with that await per minute (600 IOs a minute, 10 %
    busy), the device's MAJ:MIN, and cAdvisor counters of two pods on the device."""
    ops = [300.0] * len(wait_ms)
    spent = [w / 1000 * 300 for w in wait_ms]
    etl = {"container": "", "device": "/dev/nvme0n1", "namespace": "ml", "pod": "etl-0"}
    infer = {**etl, "pod": "infer-0"}
    series_store(cluster=cluster, series=[
        _counter("node_disk_reads_completed_total", DISK, ops, end=end),
        _counter("node_disk_writes_completed_total", DISK, ops, end=end),
        _counter("node_disk_read_time_seconds_total", DISK, spent, end=end),
        _counter("node_disk_write_time_seconds_total", DISK, spent, end=end),
        _counter("node_disk_io_time_seconds_total", DISK, [6.0] * len(wait_ms), end=end),
        Series("node_disk_info", tuple(sorted({**DISK, "major": "259", "minor": "0"}.items())),
               MetricKind.GAUGE, (int((end - timedelta(minutes=1)).timestamp() * 1000),), (1.0,)),
        # etl-0 reads 400 MiB/s and writes 3000 IOs/s at its peak; the inference pod is
        # busier still, but it is the one to protect.
        _counter("container_fs_reads_bytes_total", etl, [400 * MIB * 60] * 3, end=end),
        _counter("container_fs_writes_total", etl, [3000 * 60] * 3, end=end),
        _counter("container_fs_reads_bytes_total", infer, [900 * MIB * 60] * 3, end=end),
    ])


def _rdma(cluster: Cluster, *, metadata_drops: float, tc3_drops: float, end: datetime = NOW) -> None:
    series = []
    for tc, drops in ((0, 0.0), (3, tc3_drops), (5, metadata_drops)):
        labels = {**PORT, "priority": str(tc)}
        series += [_counter("rdma_rx_packets_total", labels, [100_000.0, 100_000.0], end=end),
                   _counter("rdma_rx_discards_total", labels, [0.0, drops], end=end)]
    series += [_counter("rdma_np_cnp_sent_total", PORT, [0.0, 40.0], end=end),
               _counter("rdma_retransmits_total", PORT, [0.0, 0.0], end=end)]
    series_store(cluster=cluster, series=series)


@pytest.fixture
def cluster(team):
    cluster = Cluster.objects.create(team=team, name="gpu-prod")
    objects_load(cluster=cluster, at=NOW - timedelta(hours=2), snapshot=kubernetes_parse(body=k8s.listing(
        k8s.node("n1"),
        k8s.pod("infer-0", node="n1", gpus=1, priority=1000, owner=("StatefulSet", "infer")),
        k8s.pod("etl-0", node="n1", qos="Burstable", owner=("Job", "etl")),
    )))
    return cluster


def test_slow_disk_is_an_io_throttling_finding_with_the_io_max_line(cluster, team):
    _disk(cluster, wait_ms=[5, 60, 70, 80, 5])
    cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    finding = Finding.objects.get(team=team, category="io_throttling")
    assert (finding.kind, finding.source) == ("reliability", "cluster")
    evidence = finding.evidence
    assert (evidence["subject"], evidence["workload"]) == ("ml/infer-0@259:0", "ml/StatefulSet/infer")
    inputs = evidence["inputs"]
    assert inputs["io_max"] == "259:0 rbps=209715200 wbps=max riops=max wiops=1500"
    assert inputs["neighbour"] == "ml/etl-0"
    assert [round(w) for w in inputs["wait_ms"]] == [60, 70, 80]
    assert (inputs["wait_limit_ms"], inputs["periods"]) == (50.0, 3)


def test_congested_and_metadata_classes_are_findings_and_metadata_drops_are_retries(cluster, team):
    _rdma(cluster, metadata_drops=3, tc3_drops=15_000)
    cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    retries = Finding.objects.get(team=team, category="rdma_metadata_retries")
    assert retries.evidence["subject"] == "n1/mlx5_0/1"
    inputs = retries.evidence["inputs"]
    assert (inputs["traffic_class"], inputs["drops"], inputs["retries"]) == (5, 3.0, 3.0)
    assert "3 metadata packets dropped, at least 3 retries" in retries.title
    congested = Finding.objects.get(team=team, category="rdma_congestion")
    assert congested.evidence["inputs"]["traffic_class"] == 3
    assert congested.evidence["inputs"]["cnp"] == 40.0
    assert congested.evidence["inputs"]["interval_s"] == 60.0


def test_healthy_counters_give_no_finding_and_recovered_ones_resolve(cluster, team):
    _disk(cluster, wait_ms=[60, 70, 80])
    _rdma(cluster, metadata_drops=1, tc3_drops=0)
    cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    later = NOW + timedelta(hours=3)
    _disk(cluster, wait_ms=[5, 5, 5, 5], end=later)
    _rdma(cluster, metadata_drops=0, tc3_drops=0, end=later)
    cluster_diagnose(cluster_id=cluster.pk, now=later)
    for category in ("io_throttling", "rdma_metadata_retries"):
        finding = Finding.objects.get(team=team, category=category)
        assert finding.state == TriageState.RESOLVED, category
    assert not Finding.objects.filter(team=team, category="rdma_congestion").exists()


def test_node_exporter_text_through_the_receiver_is_diagnosed(api, team):
    client = api(team, "metrics:write")
    now = timezone.now()
    start = (int(now.timestamp()) // 60 - 5) * 60 + 30
    waits = [5, 60, 70, 80]  # ms per read in each minute after the first, 300 reads a minute
    for minute in range(len(waits)):
        at_ms = (start + minute * 60) * 1000
        ops, spent = 1000 + minute * 300, 1000 + sum(w / 1000 * 300 for w in waits[1:minute + 1])
        labels = 'device="nvme0n1",instance="10.0.0.1:9100",node="n1"'
        body = f"""# TYPE node_disk_info gauge
node_disk_info{{{labels},major="259",minor="0"}} 1 {at_ms}
# TYPE node_disk_reads_completed_total counter
node_disk_reads_completed_total{{{labels}}} {ops} {at_ms}
# TYPE node_disk_read_time_seconds_total counter
node_disk_read_time_seconds_total{{{labels}}} {spent} {at_ms}
# TYPE node_disk_io_time_seconds_total counter
node_disk_io_time_seconds_total{{{labels}}} {100 + minute * 6} {at_ms}
"""
        response = client.post("/api/v1/clusters/lab/metrics", data=body.encode(), content_type="text/plain")
        assert response.status_code == 202, response.content
    run_jobs()
    cluster_diagnose(cluster_id=Cluster.objects.get(team=team, name="lab").pk, now=now)
    finding = Finding.objects.get(team=team, category="io_throttling")
    # No snapshot and no cAdvisor: the node is the subject and there is no rate to halve.
    assert finding.evidence["subject"] == "n1@259:0"
    assert finding.evidence["inputs"]["io_max"] == "259:0 rbps=max wbps=max riops=max wiops=max"


def test_healthy_disk_and_nic_from_the_start_give_no_io_or_rdma_finding(cluster, team):
    _disk(cluster, wait_ms=[5, 49, 50, 10])
    _rdma(cluster, metadata_drops=0, tc3_drops=500)  # 0.5 % under congestion: below 1 %
    cluster_diagnose(cluster_id=cluster.pk, now=NOW)
    assert not Finding.objects.filter(
        team=team, category__in=["io_throttling", "rdma_congestion", "rdma_metadata_retries"]
    ).exists()
