"""Issue 23: a telemetry batch answered 2xx is never lost whole because of one bad value.

Each receiver checks every point before it answers: the bad ones are dropped, counted and
named, the good ones stored by the worker, whose job ends `done`. End-to-end tests go
through gunicorn and a real Celery worker; the parser tests below them are fast."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import orjson
import pytest
import requests
from django.db import connection
from django.test import Client
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1 import metrics_pb2

from ingest import services as ingest_services
from ingest.loaders.cluster import OBJECTS, REMOTE_WRITE, SCRAPE
from ingest.models import IngestJob, JobKind, JobStatus
from tests.cluster import k8s_build as k8s
from tests.cluster import otlp_build
from tests.cluster.test_remote_write_and_text import _field, _sample, _timeseries, _write_request
from tests.conftest import wait_for
from trustrank.accounts.principal import principal_for_key
from trustrank.accounts.services import api_key_authenticate_cached
from trustrank.cluster.models import Cluster, ClusterPod
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.metrics_read import minute_rows
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.otlp_columns import otlp_metrics_check_columns
from trustrank.parsers.otlp_metrics import otlp_metrics_parse
from trustrank.parsers.otlp_metrics_model import PROTOBUF
from trustrank.parsers.prometheus_text import OPENMETRICS, prometheus_text_parse
from trustrank.parsers.remote_write import remote_write_parse
from trustrank.parsers.series import MetricKind, Series

MIN_INT64_MS = -(10**15)
MAX_INT64 = 2**63 - 1
SNAPPY = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _raw_timeseries(labels: list[tuple[bytes, bytes]], samples: list[tuple[float, int]]) -> bytes:
    """A TimeSeries whose label bytes are given as they go on the wire (bad UTF-8 too)."""
    body = b"".join(_field(1, _field(1, k) + _field(2, v)) for k, v in labels)
    return body + b"".join(_field(2, _sample(v, t)) for v, t in samples)


def _job_settled(team) -> IngestJob | None:
    jobs = list(IngestJob.objects.filter(team=team, kind=JobKind.TELEMETRY))
    if jobs and all(j.status in (JobStatus.DONE, JobStatus.FAILED) for j in jobs):
        return jobs[-1]
    return None


def _done(team, *, timeout: float = 60) -> IngestJob:
    job = wait_for(lambda: _job_settled(team), timeout=timeout)
    assert job.status == JobStatus.DONE, job.error
    return job


def _stored(team, cluster: str) -> dict[tuple[str, tuple], float]:
    """(name, labels) -> last value of every stored series of the cluster, as read."""
    found = Cluster.objects.get(team=team, name=cluster)
    rows = minute_rows(cluster=found, since=datetime(1970, 1, 1, tzinfo=UTC))
    return {(r.name, r.gpu): r.last for r in rows}


# --- end to end: HTTP receiver -> job -> real worker -> storage --------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("bad_ms", [MIN_INT64_MS, MAX_INT64], ids=["minus-1e15", "int64-max"])
def test_remote_write_sample_with_an_absurd_time_is_dropped_and_the_rest_stored(
    web_server, celery_worker, team, make_key, bad_ms
):
    key = make_key(team, "metrics:write")
    now = _now_ms()
    body = _write_request(
        _timeseries({"__name__": "gpu_util", "gpu": "0", "cluster": "rw"},
                    [(11.0, now - 5_000), (99.0, bad_ms)]),
        _timeseries({"__name__": "gpu_util", "gpu": "1", "cluster": "rw"}, [(12.0, now)]),
    )
    response = requests.post(f"{web_server.url}/api/v1/write", data=body, timeout=30,
                             headers={"Authorization": f"Bearer {key}", **SNAPPY})
    # Partly bad: stored, 2xx (Prometheus would drop the good samples on a 4xx), and the
    # remote-write 2.0 header counts what was written.
    assert response.status_code == 200, response.text
    assert response.headers["X-Prometheus-Remote-Write-Samples-Written"] == "2"
    assert "outside the accepted window" in response.text and str(bad_ms) in response.text
    job = _done(team)
    assert job.counts["points"] == 2 and job.counts["rejected"] == 1
    assert _stored(team, "rw") == {("gpu_util", "0"): 11.0, ("gpu_util", "1"): 12.0}


@pytest.mark.e2e
def test_remote_write_wholly_bad_is_400_and_nothing_is_stored(web_server, team, make_key):
    key = make_key(team, "metrics:write")
    body = _write_request(
        _timeseries({"__name__": "up", "cluster": "rw"}, [(1.0, MAX_INT64)]),
        _raw_timeseries([(b"__name__", b"up"), (b"cluster", b"rw"), (b"job", b"\xff\xfe")],
                        [(1.0, _now_ms())]),
    )
    response = requests.post(f"{web_server.url}/api/v1/write", data=body, timeout=30,
                             headers={"Authorization": f"Bearer {key}", **SNAPPY})
    assert response.status_code == 400
    assert "outside the accepted window" in response.text and "not UTF-8" in response.text
    assert not IngestJob.objects.filter(team=team).exists()


@pytest.mark.e2e
@pytest.mark.parametrize("bad_line,why", [
    (b'gpu_util{gpu="2"} 13 1180591620717411303424', "outside the accepted window"),
    (b'gpu_util{gpu="2",pod="a\x00b"} 13', "NUL"),
    (b'gpu_util{gpu="2",pod="caf\xe9"} 13', "not UTF-8"),
], ids=["time-2^70", "nul-label", "latin1-label"])
def test_text_scrape_bad_line_is_named_and_the_rest_stored(
    web_server, celery_worker, team, make_key, bad_line, why
):
    key = make_key(team, "metrics:write")
    body = (b"# TYPE gpu_util gauge\n" + b'gpu_util{gpu="0"} 11\n' + bad_line + b"\n"
            + b'gpu_util{gpu="1"} 12\n')
    response = requests.post(f"{web_server.url}/api/v1/clusters/scr/metrics", data=body,
                             headers={"Authorization": f"Bearer {key}",
                                      "Content-Type": "text/plain"}, timeout=30)
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer["samples"] == 2 and answer["rejected_samples"] == 1
    (rejected,) = answer["rejected"]
    assert rejected["line"] == 3 and why in rejected["problem"]
    job = _done(team)
    assert job.counts["points"] == 2
    assert _stored(team, "scr") == {("gpu_util", "0"): 11.0, ("gpu_util", "1"): 12.0}


@pytest.mark.e2e
def test_text_scrape_wholly_bad_is_400_naming_every_line(web_server, team, make_key):
    key = make_key(team, "metrics:write")
    body = b'a{x="\x00"} 1\nb 2 1180591620717411303424\n'
    response = requests.post(f"{web_server.url}/api/v1/clusters/scr/metrics", data=body,
                             headers={"Authorization": f"Bearer {key}",
                                      "Content-Type": "text/plain"}, timeout=30)
    assert response.status_code == 400
    problem = response.json()
    assert [r["line"] for r in problem["rejected"]] == [1, 2]
    assert "NUL" in problem["detail"]
    assert not IngestJob.objects.filter(team=team).exists()


@pytest.mark.e2e
def test_kubectl_object_with_a_nul_namespace_is_named_and_the_others_stored(
    web_server, celery_worker, team, make_key
):
    key = make_key(team, "metrics:write")
    listing = k8s.listing(
        k8s.node("n1"), k8s.pod("good", node="n1"),
        k8s.pod("bad", node="n1", namespace="m\x00l"),
    )
    response = requests.post(f"{web_server.url}/api/v1/clusters/k8s/objects", data=listing,
                             headers={"Authorization": f"Bearer {key}",
                                      "Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer["pods"] == 1 and answer["nodes"] == 1
    assert answer["rejected"] == [{"kind": "Pod", "name": "m\\x00l/bad",
                                   "problem": "namespace holds a NUL character"}]
    _done(team)
    assert list(ClusterPod.objects.filter(cluster__team=team).values_list("name", flat=True)) \
        == ["good"]


@pytest.mark.e2e
def test_otlp_resource_attribute_with_a_nul_is_partial_success(
    web_server, celery_worker, team, make_key
):
    key = make_key(team, "metrics:write")
    now = time.time_ns()

    def metric(gpu: str) -> metrics_pb2.Metric:
        built = metrics_pb2.Metric(name="gpu_util")
        otlp_build.number_point(built.gauge.data_points, time_ns=now, value=float(gpu),
                                labels={"gpu": gpu})
        return built

    body = otlp_build.request([
        ({"k8s.cluster.name": "ot", "k8s.pod.name": "p\x00q"}, [metric("7")]),
        ({"k8s.cluster.name": "ot"}, [metric("3")]),
    ]).SerializeToString()
    response = requests.post(f"{web_server.url}/v1/metrics", data=body, timeout=30,
                             headers={"Authorization": f"Bearer {key}",
                                      "Content-Type": PROTOBUF})
    assert response.status_code == 200
    partial = ExportMetricsServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_data_points == 1
    assert "k8s.pod.name" in partial.error_message and "NUL" in partial.error_message
    _done(team)
    assert _stored(team, "ot") == {("gpu_util", "3"): 3.0}


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", [REMOTE_WRITE, SCRAPE, OBJECTS])
def test_a_job_stored_before_the_receiver_checks_still_stores_its_good_points(
    celery_worker, team, make_key, fmt
):
    """Defence in depth: a payload no receiver checked (a job queued by an older version)
    is loaded by the worker with its bad points dropped and counted, not failed."""
    key = make_key(team, "metrics:write")
    now = _now_ms()
    if fmt == REMOTE_WRITE:
        payload = _write_request(
            _timeseries({"__name__": "gpu_util", "gpu": "0"}, [(11.0, now), (9.0, MAX_INT64)]),
            _timeseries({"__name__": "gpu_util", "gpu": "1", "pod": "a\x00b"}, [(1.0, now)]),
            _timeseries({"__name__": "gpu_util", "gpu": "5", "cluster": "a/b"}, [(5.0, now)]),
        )
        params = {"format": REMOTE_WRITE, "cluster": "old", "cluster_label": "cluster"}
    elif fmt == SCRAPE:
        payload = b'gpu_util{gpu="0"} 11\ngpu_util{gpu="1"} 12 1180591620717411303424\n'
        params = {"format": SCRAPE, "cluster": "old", "media_type": "text/plain"}
    else:
        payload = k8s.listing(k8s.pod("good"), k8s.pod("bad", namespace="m\x00l"))
        params = {"format": OBJECTS, "cluster": "old"}
    api_key = api_key_authenticate_cached(secret=key)
    ingest_services.job_create(team=team, kind=JobKind.TELEMETRY, payload=payload,
                               principal=principal_for_key(api_key), params=params)
    job = _done(team)
    assert job.counts["rejected"] >= 1
    if fmt == OBJECTS:
        assert list(ClusterPod.objects.filter(cluster__team=team).values_list(
            "name", flat=True)) == ["good"]
    else:
        assert _stored(team, "old") == {("gpu_util", "0"): 11.0}


@pytest.mark.django_db
def test_remote_write_series_of_an_unusable_cluster_name_are_dropped_not_the_request(
    team, make_key
):
    key = make_key(team, "metrics:write")
    now = _now_ms()
    body = _write_request(
        _timeseries({"__name__": "up", "cluster": "a/b"}, [(1.0, now)]),
        _timeseries({"__name__": "up", "cluster": "good"}, [(1.0, now), (2.0, now + 1)]),
    )
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}", "HTTP_CONTENT_ENCODING": "snappy"}
    response = client.post("/api/v1/write", data=body, content_type=PROTOBUF, **headers)
    assert response.status_code == 200, response.content
    assert response["X-Prometheus-Remote-Write-Samples-Written"] == "2"
    assert b"unusable cluster name" in response.content
    assert IngestJob.objects.get().params["samples"] == 2
    only_bad = _write_request(_timeseries({"__name__": "up", "cluster": "a/b"}, [(1.0, now)]))
    assert client.post("/api/v1/write", data=only_bad, content_type=PROTOBUF,
                       **headers).status_code == 400


# --- storage: the last line behind the parsers ------------------------------------------


@pytest.mark.django_db
def test_series_store_drops_what_storage_cannot_hold_instead_of_failing(team):
    cluster = Cluster.objects.create(team=team, name="last-line")
    now = _now_ms()
    loaded = series_store(cluster=cluster, series=[
        Series("ok", (("gpu", "0"),), MetricKind.GAUGE, (now, 2**70, -(10**15)), (1.0, 2.0, 3.0)),
        Series("ok", (("gpu", "1"), ("pod", "a\x00b")), MetricKind.GAUGE, (now,), (4.0,)),
        Series("bad\x00name", (("gpu", "2"),), MetricKind.GAUGE, (now,), (5.0,)),
        Series("ok", (("gpu", "3"),), MetricKind.GAUGE, (now,), (float("nan"),)),
    ])
    assert (loaded.points, loaded.rejected) == (1, 5)
    rows = minute_rows(cluster=cluster, since=datetime(1970, 1, 1, tzinfo=UTC))
    assert [(r.name, r.gpu, r.last) for r in rows] == [("ok", "0", 1.0)]
    with connection.cursor() as cur:
        cur.execute("SELECT gpu FROM cluster_metriclabels WHERE cluster_id = %s ORDER BY gpu",
                    [cluster.pk])
        # The label set holding a NUL got no row (the others' rows hold no points).
        assert [row[0] for row in cur.fetchall()] == ["0", "2", "3"]


# --- parsers: every bad-value class, fast ------------------------------------------------


@pytest.mark.parametrize("bad_ms", [MIN_INT64_MS, MAX_INT64, 0])
def test_remote_write_parse_drops_a_sample_outside_the_window(bad_ms):
    now = _now_ms()
    body = _write_request(_timeseries({"__name__": "up"}, [(1.0, now), (2.0, bad_ms)]))
    parsed = remote_write_parse(body=body, now_ms=now)
    assert [s.timestamps_ms for s in parsed.series] == [(now,)]
    assert parsed.rejected_samples == 1 and parsed.accepted_samples == 1
    assert "outside the accepted window" in parsed.message() and not parsed.wholly_bad


def test_remote_write_parse_window_follows_the_limits():
    now = _now_ms()
    body = _write_request(_timeseries({"__name__": "up"}, [
        (1.0, now - 15 * 86_400_000), (2.0, now - 13 * 86_400_000), (3.0, now + 700_000)]))
    assert remote_write_parse(body=body, now_ms=now).series[0].values == (2.0,)
    # Without a time of receipt only what storage cannot hold is dropped.
    assert remote_write_parse(body=body).series[0].values == (1.0, 2.0, 3.0)


@pytest.mark.parametrize("labels,why", [
    ([(b"job", b"\xff")], "not UTF-8"),
    ([(b"\xc3(", b"x")], "not UTF-8"),
    ([(b"job", b"a\x00")], "NUL"),
    ([(b"job", b"x" * 5000)], "longer than 4096"),
    ([(b"", b"x")], "empty"),
])
def test_remote_write_parse_rejects_the_series_with_a_bad_label_only(labels, why):
    now = _now_ms()
    body = _write_request(
        _raw_timeseries([(b"__name__", b"up"), *labels], [(1.0, now), (2.0, now)]),
        _timeseries({"__name__": "up", "job": "ok"}, [(3.0, now)]),
    )
    parsed = remote_write_parse(body=body, now_ms=now)
    assert [s.label("job") for s in parsed.series] == ["ok"]
    assert parsed.rejected_samples == 2 and why in parsed.message()


@pytest.mark.parametrize("name", [b"up\x00", b"u\xffp", b"x" * 300])
def test_remote_write_parse_rejects_a_bad_metric_name(name):
    parsed = remote_write_parse(body=_write_request(_raw_timeseries([(b"__name__", name)],
                                                                    [(1.0, 5)])))
    assert not parsed.series and parsed.wholly_bad and "metric name" in parsed.message()


def test_remote_write_parse_keeps_infinities_and_nan_alone_is_not_wholly_bad():
    body = _write_request(_timeseries({"__name__": "a"}, [(float("inf"), 5), (float("-inf"), 6)]))
    assert remote_write_parse(body=body).series[0].values == (float("inf"), float("-inf"))
    only_nan = remote_write_parse(body=_write_request(
        _timeseries({"__name__": "a"}, [(float("nan"), 5)])))
    assert only_nan.rejected_samples == only_nan.nan_samples == 1 and not only_nan.wholly_bad


def test_remote_write_parse_cleans_bad_metadata_text():
    metadata = (b"\x08\x02" + _field(2, b"up") + _field(4, b"h\xff\x00elp") + _field(5, b"s\x00"))
    raw = _field(1, _timeseries({"__name__": "up"}, [(1.0, 5)])) + _field(3, metadata)
    parsed = remote_write_parse(body=raw, compressed=False)
    assert parsed.series[0].help == "h\ufffdelp" and parsed.series[0].unit == "s"


@pytest.mark.parametrize("media", ["text/plain", OPENMETRICS])
@pytest.mark.parametrize("line,why", [
    (b"b 2 1180591620717411303424", "outside the accepted window"),
    (b"b 2 -1000000000000000", "outside the accepted window"),
    (b'b{x="a\x00"} 2', "NUL"),
    (b'b{x="\xff"} 2', "not UTF-8"),
    (b'b{x="' + b"v" * 5000 + b'"} 2', "longer than 4096"),
    (b"b" * 300 + b" 2", "metric name"),
])
def test_text_parse_rejects_the_bad_line_with_its_number(media, line, why):
    now = _now_ms()
    body = b"# TYPE a gauge\na 1\n" + line + b"\nc +Inf\n"
    if media == OPENMETRICS:
        body += b"# EOF\n"
    scrape = prometheus_text_parse(body=body, scraped_at_ms=now, now_ms=now, media_type=media)
    assert [(s.name, s.values) for s in scrape.series] == [("a", (1.0,)), ("c", (float("inf"),))]
    (rejected,) = scrape.rejected
    assert rejected.line == 3 and why in rejected.problem and scrape.rejected_samples == 1
    assert orjson.dumps(rejected.as_dict())  # a JSON answer can carry it


def test_text_parse_judges_own_timestamps_against_the_time_of_receipt():
    now = _now_ms()
    old = now - 20 * 86_400_000
    body = f"a 1 {old}\nb 2\n".encode()
    scrape = prometheus_text_parse(body=body, scraped_at_ms=now, now_ms=now)
    assert [s.name for s in scrape.series] == ["b"] and scrape.rejected[0].line == 1


@pytest.mark.parametrize("change,why", [
    ({"namespace": "m\x00l"}, "namespace holds a NUL"),
    ({"name": "n" * 254}, "name is longer than 253"),
    ({"annotations": {"note": "a\x00b"}}, "a field holds a NUL"),
    ({"node": "x\x00"}, "node holds a NUL"),
])
def test_kubernetes_parse_rejects_an_unstorable_object_and_keeps_the_rest(change, why):
    name = change.pop("name", "bad")
    listing = k8s.listing(k8s.pod("good"), k8s.pod(name, **change), k8s.node("n1"))
    snapshot = kubernetes_parse(body=listing)
    assert [p.name for p in snapshot.pods] == ["good"] and len(snapshot.nodes) == 1
    (rejected,) = snapshot.rejected
    assert rejected.kind == "Pod" and why in rejected.problem


def test_kubernetes_parse_rejects_events_nodes_and_priority_classes_with_a_nul():
    document = {"kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": "n\x00"}},
        {"kind": "Event", "metadata": {"name": "e", "namespace": "ml"}, "message": "x\x00"},
        {"kind": "PriorityClass", "metadata": {"name": "p\x00"}, "value": 5},
        {"kind": "PriorityClass", "metadata": {"name": "fine"}, "value": 5},
    ]}
    snapshot = kubernetes_parse(body=orjson.dumps(document))
    assert [p.name for p in snapshot.priority_classes] == ["fine"]
    assert [r.kind for r in snapshot.rejected] == ["Node", "Event", "PriorityClass"]


def test_otlp_resource_attribute_with_a_nul_rejects_that_resource_only():
    now = time.time_ns()

    def metric(gpu: str) -> metrics_pb2.Metric:
        built = metrics_pb2.Metric(name="gpu_util")
        otlp_build.number_point(built.gauge.data_points, time_ns=now, value=1.0,
                                labels={"gpu": gpu})
        return built

    body = otlp_build.request([
        ({"k8s.cluster.name": "c", "k8s.namespace.name": "m\x00l"}, [metric("0"), metric("1")]),
        ({"k8s.cluster.name": "c"}, [metric("2")]),
    ]).SerializeToString()
    checked, columns = otlp_metrics_check_columns(body=body, encoding=PROTOBUF)
    assert columns is None and (checked.accepted_points, checked.rejected_points) == (1, 2)
    assert "k8s.namespace.name" in checked.message()
    parsed = otlp_metrics_parse(body=body)
    assert [s.label("gpu") for s in parsed.series()] == ["2"]
