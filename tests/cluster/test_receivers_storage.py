"""Cluster telemetry through the receivers, the job runner and storage (Django stack)."""

from __future__ import annotations

import gzip
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from django.db import connection
from django.test import Client
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)

from ingest.models import IngestJob, JobStatus
from ingest.services import job_run
from tests.cluster import k8s_build as k8s
from tests.cluster.otlp_build import dcgm_request
from tests.cluster.test_remote_write_and_text import _timeseries, _write_request
from trustrank.cluster.models import (
    Cluster,
    ClusterEvent,
    ClusterNode,
    ClusterPod,
    ClusterPodChange,
    MetricSeries,
)
from trustrank.cluster.services.metrics import (
    chunk_records,
    metrics_minutes_compact,
    metrics_minutes_compact_due,
    metrics_retention_apply,
    minute_partitions,
    partition_name,
    series_store,
)
from trustrank.cluster.services.metrics_otlp import parsed_metrics_store
from trustrank.cluster.services.metrics_read import minute_rows, series_window
from trustrank.parsers.otlp_metrics import otlp_metrics_parse
from trustrank.parsers.series import MetricKind, Series

pytestmark = pytest.mark.django_db
DATA = Path(__file__).resolve().parent.parent / "data" / "telemetry"
PB = "application/x-protobuf"


@pytest.fixture
def key(team, make_key):
    return make_key(team, "metrics:write")


def _headers(key: str | None, **extra: str) -> dict[str, str]:
    headers = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in extra.items()}
    if key:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return headers


def run_jobs() -> list[IngestJob]:
    for job in IngestJob.objects.filter(status=JobStatus.QUEUED):
        job_run(job_id=str(job.pk))
    jobs = list(IngestJob.objects.all())
    assert all(j.status == JobStatus.DONE for j in jobs), [j.error for j in jobs]
    return jobs


def minutes(cluster: Cluster) -> list[tuple]:
    """The stored minutes as readers see them (a load's chunks combined with other
    loads')."""
    rows = minute_rows(cluster=cluster, since=datetime(1970, 1, 1, tzinfo=UTC))
    return [(r.name, r.pod, r.node, r.gpu, r.min, r.max, r.sum, r.count, r.last)
            for r in sorted(rows, key=lambda r: (r.name, r.gpu, r.minute))]


# --- OTLP ---------------------------------------------------------------------------------

def test_otlp_protobuf_export_is_stored_then_rolled_up_per_minute(key, team):
    now_ns = time.time_ns()
    body = dcgm_request(nodes=2, gpus=2, series=3, time_ns=now_ns).SerializeToString()
    response = Client().post("/v1/metrics", data=body, content_type=PB, **_headers(key))
    assert response.status_code == 200, response.content
    assert not ExportMetricsServiceResponse.FromString(response.content).HasField(
        "partial_success")
    job = IngestJob.objects.get()
    assert (job.kind, job.params["format"], job.params["points"]) == ("telemetry", "otlp", 12)
    run_jobs()
    cluster = Cluster.objects.get(team=team)
    assert cluster.name == "prod"
    assert MetricSeries.objects.filter(cluster=cluster).count() == 12
    util = MetricSeries.objects.get(cluster=cluster, name="DCGM_FI_DEV_GPU_UTIL",
                                    node="gpu-node-0001", gpu="1")
    assert (util.pod, util.namespace, util.container, util.gpu_uuid) == (
        "trainer-0001-1", "ml", "main", "GPU-00001-01-5f2a-4c1e-9b7d")
    assert len(minutes(cluster)) == 12


def test_otlp_json_gzip_with_bad_points_answers_partial_success(key):
    now_ns = str(time.time_ns())
    doc = {"resourceMetrics": [{
        "resource": {"attributes": [
            {"key": "k8s.cluster.name", "value": {"stringValue": "edge"}}]},
        "scopeMetrics": [{"metrics": [{"name": "vllm:num_requests_waiting", "gauge": {
            "dataPoints": [{"timeUnixNano": now_ns, "asDouble": 3},
                           {"timeUnixNano": "0", "asDouble": 1}]}}]}],
    }]}
    response = Client().post(
        "/v1/metrics", data=gzip.compress(orjson.dumps(doc)), content_type="application/json",
        **_headers(key, **{"Content-Encoding": "gzip"}))
    assert response.status_code == 200
    partial = orjson.loads(response.content)["partialSuccess"]
    assert partial["rejectedDataPoints"] == "1" and partial["errorMessage"]
    run_jobs()
    assert Cluster.objects.get().name == "edge"


def test_otlp_without_a_cluster_is_refused_and_the_query_parameter_names_one(key, team):
    body = dcgm_request(nodes=1, gpus=1, series=1, time_ns=time.time_ns(), cluster="")
    raw = body.SerializeToString()
    refused = Client().post("/v1/metrics", data=raw, content_type=PB, **_headers(key))
    assert refused.status_code == 400
    assert "cluster" in Status.FromString(refused.content).message
    assert not IngestJob.objects.exists()
    ok = Client().post("/v1/metrics?cluster=lab", data=raw, content_type=PB, **_headers(key))
    assert ok.status_code == 200
    run_jobs()
    assert Cluster.objects.get(team=team).name == "lab"


@pytest.mark.parametrize(
    ("body", "content_type", "headers", "status"),
    [
        (b"\xff\xff", PB, {}, 400),
        (b"{}", "text/csv", {}, 415),
        (b"x", PB, {"Content-Encoding": "br"}, 415),
        (b"not gzip", PB, {"Content-Encoding": "gzip"}, 400),
    ],
)
def test_otlp_bad_requests_are_refused_and_nothing_is_stored(key, body, content_type, headers,
                                                              status):
    response = Client().post("/v1/metrics", data=body, content_type=content_type,
                             **_headers(key, **headers))
    assert response.status_code == status
    assert not IngestJob.objects.exists()


def test_otlp_needs_a_key_with_the_scope_and_telemetry_write_still_works(team, make_key):
    body = dcgm_request(nodes=1, gpus=1, series=1, time_ns=time.time_ns()).SerializeToString()
    assert Client().post("/v1/metrics", data=body, content_type=PB).status_code == 401
    read_only = make_key(team, "read")
    assert Client().post("/v1/metrics", data=body, content_type=PB,
                         **_headers(read_only)).status_code == 403
    legacy = make_key(team, "telemetry:write")
    assert Client().post("/v1/metrics", data=body, content_type=PB,
                         **_headers(legacy)).status_code == 200


def test_otlp_overload_answers_429_with_retry_after(key, settings):
    settings.TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT = 0
    body = dcgm_request(nodes=1, gpus=1, series=1, time_ns=time.time_ns()).SerializeToString()
    response = Client().post("/v1/metrics", data=body, content_type=PB, **_headers(key))
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert not IngestJob.objects.exists()


# --- remote write ---------------------------------------------------------------------------

def _rw_body(cluster_label: str | None = "gpu-a") -> bytes:
    now = int(time.time() * 1000)
    labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "n1",
              "pod": "train-0", "namespace": "ml"}
    if cluster_label:
        labels["cluster"] = cluster_label
    return _write_request(_timeseries(labels, [(10.0, now - 20_000), (30.0, now - 5_000)]))


def test_remote_write_is_stored_with_204_and_the_external_label_names_the_cluster(key, team):
    response = Client().post("/api/v1/write", data=_rw_body(), content_type=PB,
                             **_headers(key, **{"Content-Encoding": "snappy"}))
    assert response.status_code == 204, response.content
    run_jobs()
    cluster = Cluster.objects.get(team=team)
    assert cluster.name == "gpu-a"
    rows = minutes(cluster)
    assert sum(r[7] for r in rows) == 2
    assert {r[0] for r in rows} == {"DCGM_FI_DEV_GPU_UTIL"}


def test_remote_write_refusals(key):
    client = Client()
    snappy = _headers(key, **{"Content-Encoding": "snappy"})
    assert client.post("/api/v1/write", data=_rw_body(), content_type=PB,
                       **_headers(key)).status_code == 415
    bad = client.post("/api/v1/write", data=b"\xff\xff\xff", content_type=PB, **snappy)
    assert bad.status_code == 400 and b"snappy" in bad.content.lower()
    nameless = client.post("/api/v1/write", data=_rw_body(None), content_type=PB, **snappy)
    assert nameless.status_code == 400 and b"cluster" in nameless.content
    assert client.post("/api/v1/write?cluster=c1", data=_rw_body(None), content_type=PB,
                       **snappy).status_code == 204
    assert client.post("/api/v1/write", data=_rw_body(), content_type=PB).status_code == 401
    assert IngestJob.objects.count() == 1


# --- text scrape and objects ------------------------------------------------------------------

def test_dcgm_exporter_scrape_is_stored_and_linked_to_its_gpu(api, team):
    body = (DATA / "datadog-integrations-core_dcgm_metrics.txt").read_bytes()
    client = api(team, "metrics:write")
    response = client.post("/api/v1/clusters/lab/metrics", data=body, content_type="text/plain")
    assert response.status_code == 202, response.content
    assert response.json()["status_url"].startswith("/api/v1/jobs/")
    run_jobs()
    cluster = Cluster.objects.get(team=team, name="lab")
    util = MetricSeries.objects.get(cluster=cluster, name="DCGM_FI_DEV_GPU_UTIL")
    assert (util.node, util.gpu) == ("424773df46e0", "0")
    assert util.gpu_uuid.startswith("GPU-20c56d28")


def test_bad_scrape_is_refused_with_the_parser_message(api, team):
    client = api(team, "metrics:write")
    response = client.post("/api/v1/clusters/lab/metrics", data=b"metric{oops 1\n",
                           content_type="text/plain")
    assert response.status_code == 400
    assert response.json()["detail"]
    assert not IngestJob.objects.exists()


def test_kubectl_objects_are_stored_and_pod_history_is_diffed(api, team):
    client = api(team, "metrics:write")
    first = k8s.listing(
        k8s.node("n1"), k8s.pod("a", node="n1", gpus=1),
        k8s.pod("b", phase="Pending", gpus=2),
        k8s.event("FailedScheduling", name="b"),
    )
    assert client.post("/api/v1/clusters/lab/objects", data=first,
                       content_type="application/json").status_code == 202
    run_jobs()
    second = k8s.listing(k8s.node("n1"), k8s.pod("b", node="n1", gpus=2))
    assert client.post("/api/v1/clusters/lab/objects", data=second,
                       content_type="application/json").status_code == 202
    run_jobs()
    cluster = Cluster.objects.get(team=team, name="lab")
    assert ClusterNode.objects.get(cluster=cluster).allocatable_gpus == 8
    pods = {p.name: p for p in ClusterPod.objects.filter(cluster=cluster)}
    assert pods["a"].deleted_at is not None and pods["b"].node == "n1"
    changes = {(c.name, c.change, c.before, c.after)
               for c in ClusterPodChange.objects.filter(cluster=cluster)}
    assert ("a", "deleted", "Running", "") in changes
    assert ("b", "node", "", "n1") in changes
    assert ClusterEvent.objects.get(cluster=cluster).reason == "FailedScheduling"


def test_bad_objects_are_refused_and_other_teams_see_nothing(api, team, other_team):
    client = api(team, "metrics:write")
    bad = k8s.pod("x")
    bad["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    response = client.post("/api/v1/clusters/lab/objects", data=k8s.listing(bad),
                           content_type="application/json")
    assert response.status_code == 400 and "lots" in response.json()["detail"]
    reader = api(team, "read")
    assert reader.post("/api/v1/clusters/lab/objects", data=k8s.listing(k8s.pod("y")),
                       content_type="application/json").status_code == 403
    assert not IngestJob.objects.exists()


# --- storage ------------------------------------------------------------------------------------

def test_series_store_rolls_points_up_per_minute_and_merges_repeated_loads(team):
    cluster = Cluster.objects.create(team=team, name="c")
    base = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    ms = int(base.timestamp() * 1000)
    labels = (("gpu", "0"), ("pod", "p"))
    series_store(cluster=cluster, series=[Series("g", labels, MetricKind.GAUGE,
                                                 (ms, ms + 10_000, ms + 70_000), (5.0, 1.0, 7.0))])
    series_store(cluster=cluster, series=[Series("g", labels, MetricKind.GAUGE,
                                                 (ms + 20_000,), (9.0,))])
    rows = minutes(cluster)
    assert [r[4:] for r in rows] == [(1.0, 9.0, 15.0, 3, 9.0), (7.0, 7.0, 7.0, 1, 7.0)]
    [stored] = series_window(cluster=cluster, since=base - timedelta(minutes=1))
    assert stored.values == (5.0, 7.0) and stored.timestamps_ms == (ms + 20_000, ms + 70_000)


def _raw_rows(cluster: Cluster) -> list[tuple]:
    """(minute, count) of every stored entry of the cluster's chunks, as written."""
    with connection.cursor() as cur:
        cur.execute("SELECT minute, data FROM cluster_metricchunk WHERE cluster_id = %s",
                    [cluster.pk])
        rows = cur.fetchall()
    return sorted((minute, int(count)) for minute, data in rows
                  for count in chunk_records(bytes(data))["count"])


def test_each_load_appends_partial_minutes_that_read_and_compact_as_one(team):
    cluster = Cluster.objects.create(team=team, name="c")
    base = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    ms = int(base.timestamp() * 1000)
    labels = (("gpu", "0"),)
    # The second load holds the minute's earliest point: the last value goes by time,
    # not by the order of the loads.
    series_store(cluster=cluster, series=[Series("g", labels, MetricKind.GAUGE,
                                                 (ms + 30_000, ms + 40_000), (4.0, 6.0))])
    series_store(cluster=cluster, series=[Series("g", labels, MetricKind.GAUGE,
                                                 (ms + 10_000,), (2.0,))])
    series_store(cluster=cluster, series=[Series("g", labels, MetricKind.GAUGE,
                                                 (ms + 50_000,), (8.0,))])
    assert [count for _, count in _raw_rows(cluster)] == [1, 1, 2]
    combined = minutes(cluster)
    assert [r[4:] for r in combined] == [(2.0, 8.0, 20.0, 4, 8.0)]
    [stored] = series_window(cluster=cluster, since=base)
    assert stored.values == (5.0,) and stored.timestamps_ms == (ms + 50_000,)

    assert metrics_minutes_compact_due(now=base + timedelta(hours=1)) == []  # not finished
    assert metrics_minutes_compact_due(now=base + timedelta(days=1)) == [
        partition_name(base.date())]
    assert _raw_rows(cluster) == [(base, 4)]
    assert minutes(cluster) == combined
    assert metrics_minutes_compact_due(now=base + timedelta(days=1)) == []  # done once
    # A late point for a compacted day is a partial row again, read with the rest.
    series_store(cluster=cluster, series=[Series("g", labels, MetricKind.GAUGE,
                                                 (ms + 20_000,), (1.0,))])
    assert [r[4:] for r in minutes(cluster)] == [(1.0, 8.0, 21.0, 5, 8.0)]
    assert metrics_minutes_compact(day=base.date()) == 1
    assert _raw_rows(cluster) == [(base, 5)]


def test_minutes_across_midnight_go_to_their_day_partitions(team):
    cluster = Cluster.objects.create(team=team, name="c")
    midnight = datetime(2026, 11, 30, tzinfo=UTC)
    at = int(midnight.timestamp() * 1000)
    series_store(cluster=cluster, series=[
        Series("g", (("gpu", str(gpu)),), MetricKind.GAUGE, (at - 30_000, at),
               (float(gpu), float(gpu) + 0.5)) for gpu in range(5)])
    rows = minutes(cluster)
    assert [(r[3], r[4], r[7]) for r in rows] == [
        (str(gpu), value, 1) for gpu in range(5) for value in (gpu, gpu + 0.5)]
    with connection.cursor() as cur:
        for day, series in ((midnight - timedelta(days=1), 5), (midnight, 5)):
            cur.execute(f"SELECT count(*), sum(series) FROM {partition_name(day.date())}")
            assert cur.fetchone() == (1, series)


def test_retention_drops_whole_day_partitions(team, settings):
    settings.TRUSTRANK_CLUSTER_RETENTION_DAYS = 14
    cluster = Cluster.objects.create(team=team, name="c")
    now = datetime.now(tz=UTC)
    old = int((now - timedelta(days=20)).timestamp() * 1000)
    new = int(now.timestamp() * 1000)
    series_store(cluster=cluster, series=[Series("g", (), MetricKind.GAUGE, (old, new),
                                                 (1.0, 2.0))])
    assert len(minute_partitions()) >= 2
    dropped = metrics_retention_apply(now=now)
    assert dropped and all(d.endswith((now - timedelta(days=20)).strftime("%Y%m%d"))
                           for d in dropped)
    assert [r[8] for r in minutes(cluster)] == [2.0]


def test_columnar_otlp_store_matches_the_series_path_histograms_included(team):
    now_ns = time.time_ns()
    request = dcgm_request(nodes=2, gpus=2, series=6, time_ns=now_ns)
    histogram = request.resource_metrics[0].scope_metrics[0].metrics.add()
    histogram.name = "vllm:e2e_request_latency_seconds"
    histogram.histogram.aggregation_temporality = 2
    point = histogram.histogram.data_points.add()
    point.time_unix_nano, point.count, point.sum = now_ns, 3, 1.5
    point.explicit_bounds.extend([0.5, 1.0])
    point.bucket_counts.extend([1, 1, 1])
    parsed = otlp_metrics_parse(body=request.SerializeToString())
    columnar = Cluster.objects.create(team=team, name="columnar")
    by_series = Cluster.objects.create(team=team, name="series")
    loaded = parsed_metrics_store(cluster=columnar, resources=parsed.resources)
    series_store(cluster=by_series, series=parsed.series())
    assert loaded.points == 24 + 5
    assert minutes(columnar) == minutes(by_series)
    assert MetricSeries.objects.filter(
        cluster=columnar, name="vllm:e2e_request_latency_seconds_bucket").count() == 3


def test_chunks_read_alike_compressed_or_packed_as_migration_0007_left_them(team):
    cluster = Cluster.objects.create(team=team, name="c")
    ms = int(datetime(2026, 11, 30, 10, 0, tzinfo=UTC).timestamp() * 1000)
    series_store(cluster=cluster, series=[
        Series("g", (("gpu", str(gpu)),), MetricKind.GAUGE, (ms, ms + 5_000),
               (float(gpu), 2.0 * gpu)) for gpu in range(4)])
    before = minutes(cluster)
    with connection.cursor() as cur:
        cur.execute("SELECT data FROM cluster_metricchunk WHERE cluster_id = %s", [cluster.pk])
        [(data,)] = cur.fetchall()
        assert bytes(data).startswith(b"\x28\xb5\x2f\xfd")  # zstd
        cur.execute("UPDATE cluster_metricchunk SET data = %s WHERE cluster_id = %s",
                    [chunk_records(bytes(data)).tobytes(), cluster.pk])
    assert minutes(cluster) == before and len(before) == 4
