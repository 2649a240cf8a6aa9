"""End to end: gunicorn -> PostgreSQL -> a real Celery worker, with real clients: the stock
OpenTelemetry SDK metric exporter (OTLP/HTTP protobuf), a remote-write body, a kubectl
listing, and (when Debian's `prometheus` is installed) a real Prometheus server scraping a
dcgm-exporter text and remote-writing it."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from ingest.models import IngestJob, JobStatus
from tests.cluster import k8s_build as k8s
from tests.conftest import free_port, wait_for
from trustrank.cluster.models import Cluster, ClusterWorkload, MetricSeries
from trustrank.findings.models import Finding

pytestmark = pytest.mark.e2e
DATA = Path(__file__).resolve().parent.parent / "data" / "telemetry"


def jobs_done(n: int):
    def check():
        jobs = list(IngestJob.objects.filter(kind="telemetry"))
        failed = [j.error for j in jobs if j.status == JobStatus.FAILED]
        assert not failed, failed
        return len(jobs) >= n and all(j.status == JobStatus.DONE for j in jobs)

    return check


def test_sdk_metric_exporter_and_kubectl_objects_reach_storage_and_diagnoses(
    web_server, start_worker, team, other_team, make_key
):
    start_worker(TRUSTRANK_CLUSTER_DIAGNOSE_DEBOUNCE_SECONDS="0")
    key = make_key(team, "metrics:write", "read")
    exporter = OTLPMetricExporter(
        endpoint=f"{web_server.url}/v1/metrics", headers={"Authorization": f"Bearer {key}"},
        compression=Compression.Gzip,
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(
        resource=Resource.create({"k8s.cluster.name": "e2e", "service.name": "dcgm-exporter"}),
        metric_readers=[reader],
    )
    meter = provider.get_meter("dcgm")

    def utilisation(_: CallbackOptions):
        for gpu in range(2):
            yield Observation(12.0 + gpu, {"gpu": str(gpu), "Hostname": "n1",
                                           "namespace": "ml", "pod": f"train-{gpu}"})

    meter.create_observable_gauge("DCGM_FI_DEV_GPU_UTIL", [utilisation], unit="%")
    # The SDK refuses ":" in instrument names; vLLM's own names come by scrape.
    tokens = meter.create_counter("vllm_generation_tokens")
    tokens.add(42, {"namespace": "ml", "pod": "infer-0", "model_name": "llama"})
    assert provider.force_flush(10_000)
    provider.shutdown()

    listing = k8s.listing(k8s.node("n1"), k8s.pod("train-0", node="n1", gpus=1,
                                                  qos="BestEffort", owner=("Job", "train")))
    response = requests.post(f"{web_server.url}/api/v1/clusters/e2e/objects", data=listing,
                             headers={"Authorization": f"Bearer {key}",
                                      "Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 202, response.text
    # force_flush and shutdown each export once: two OTLP jobs and the objects job.
    wait_for(jobs_done(3), timeout=90)

    cluster = Cluster.objects.get(team=team, name="e2e")
    # The SDK lower-cases instrument names (a Collector relaying dcgm-exporter keeps them).
    util = MetricSeries.objects.filter(cluster=cluster, name="dcgm_fi_dev_gpu_util")
    assert sorted(util.values_list("node", "gpu", "pod")) == [
        ("n1", "0", "train-0"), ("n1", "1", "train-1")]
    assert MetricSeries.objects.filter(cluster=cluster, pod="infer-0").exists()
    finding = wait_for(
        lambda: Finding.objects.filter(team=team, category="gpu_training_evictable").first(),
        timeout=60,
    )
    assert finding.evidence["subject"] == "ml/train-0"
    assert ClusterWorkload.objects.filter(cluster=cluster, key="ml/Job/train").exists()
    assert not Finding.objects.filter(team=other_team).exists()
    workloads = requests.get(f"{web_server.url}/api/v1/clusters/e2e/workloads",
                             headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
    assert workloads["count"] == 1


class _Scrape(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="Debian's prometheus package is not installed")
def test_real_prometheus_scrapes_dcgm_and_remote_writes_to_trustrank(
    web_server, celery_worker, team, make_key, tmp_path
):
    key = make_key(team, "metrics:write")
    _Scrape.body = (DATA / "datadog-integrations-core_dcgm_metrics.txt").read_bytes()
    exporter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scrape)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    (tmp_path / "key").write_text(key)
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  external_labels:
    cluster: prom-e2e
scrape_configs:
  - job_name: dcgm
    static_configs:
      - targets: ["127.0.0.1:{exporter.server_address[1]}"]
remote_write:
  - url: {web_server.url}/api/v1/write
    authorization:
      credentials_file: {tmp_path / "key"}
    queue_config:
      batch_send_deadline: 1s
""")
    port = free_port()
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(tmp_path / "prometheus.log").open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        util = wait_for(
            lambda: MetricSeries.objects.filter(
                cluster__team=team, cluster__name="prom-e2e", name="DCGM_FI_DEV_GPU_UTIL",
            ).first(),
            timeout=90, interval=0.5,
        )
        assert (util.node, util.gpu) == ("424773df46e0", "0")
        assert util.labels["job"] == "dcgm"
    finally:
        prometheus.terminate()
        prometheus.wait(20)
        exporter.shutdown()
