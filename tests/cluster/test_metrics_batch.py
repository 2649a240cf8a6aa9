"""A worker stores a team's queued OTLP metric jobs together (ingest.loaders.cluster):
the stored minutes are those of loading each request alone, every job of the batch ends
done with its own counts, and a failure hands the batch back to the queue."""

from __future__ import annotations

import gzip
import time
from datetime import timedelta

import orjson
import pytest
from django.db import connection
from django.test import Client
from opentelemetry.proto.metrics.v1 import metrics_pb2

from ingest.models import IngestJob, IngestPayload, JobStatus
from ingest.services import job_run
from tests.cluster.otlp_build import dcgm_request, request
from tests.cluster.test_otlp_metrics import _gauge
from tests.cluster.test_receivers_storage import PB, _headers, minutes
from trustrank.cluster.models import Cluster, MetricName, MetricSeries
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.metrics_ids import labels_key
from trustrank.parsers.otlp_metrics import otlp_metrics_parse
from trustrank.parsers.series import MetricKind, Series

pytestmark = pytest.mark.django_db


@pytest.fixture
def key(team, make_key):
    return make_key(team, "metrics:write")


def _bodies(now_ns: int) -> list[bytes]:
    """Three scrapes of one cluster 15 s apart (later ones known series, some in the
    same minute) and one of another cluster."""
    start = now_ns - 60_000_000_000
    bodies = [dcgm_request(nodes=2, gpus=2, series=5, time_ns=start + at * 15_000_000_000)
              .SerializeToString() for at in range(3)]
    bodies.append(dcgm_request(nodes=1, gpus=2, series=5, time_ns=start,
                               cluster="lab").SerializeToString())
    return bodies


def _post(key: str, body: bytes, *, gzipped: bool = False) -> None:
    extra = {"Content-Encoding": "gzip"} if gzipped else {}
    response = Client().post("/v1/metrics", data=gzip.compress(body) if gzipped else body,
                             content_type=PB, **_headers(key, **extra))
    assert response.status_code == 200, response.content


def _queue_raw(team, payload: bytes, **params) -> IngestJob:
    job = IngestJob.objects.create(team=team, kind="telemetry",
                                   params={"format": "otlp", "encoding": "protobuf", **params})
    IngestPayload.objects.create(job=job, data=payload)
    return job


def test_one_run_stores_every_queued_request_as_loading_each_alone_would(key, team):
    bodies = _bodies(time.time_ns())
    for at, body in enumerate(bodies):
        _post(key, body, gzipped=at == 1)
    first = IngestJob.objects.order_by("created_at").first()
    assert IngestJob.objects.get(params__content_encoding="gzip").size_bytes < len(bodies[1])

    job_run(job_id=str(first.pk))

    jobs = list(IngestJob.objects.order_by("created_at"))
    assert [j.status for j in jobs] == [JobStatus.DONE] * 4, [j.error for j in jobs]
    assert [j.counts["points"] for j in jobs] == [20, 20, 20, 10]
    assert jobs[0].counts["batch"] == 4
    assert {j.counts.get("batched_with") for j in jobs[1:]} == {str(first.pk)}
    # The same requests loaded one by one, through the other storage path.
    reference = {name: Cluster.objects.create(team=team, name=f"ref-{name}")
                 for name in ("prod", "lab")}
    for body in bodies:
        parsed = otlp_metrics_parse(body=body)
        series_store(cluster=reference[parsed.resources[0].cluster], series=parsed.series())
    for name in ("prod", "lab"):
        stored = sorted(minutes(Cluster.objects.get(team=team, name=name)))
        assert stored and stored == sorted(minutes(reference[name]))
    assert MetricSeries.objects.filter(cluster__name="prod").count() == 20


def test_a_rejected_job_hands_the_jobs_it_took_back_to_the_queue(key, team):
    now_ns = time.time_ns()
    bad = _queue_raw(team, dcgm_request(nodes=1, gpus=1, series=1, time_ns=now_ns,
                                        cluster="a/b").SerializeToString())
    _post(key, dcgm_request(nodes=1, gpus=1, series=2, time_ns=now_ns).SerializeToString())

    job_run(job_id=str(bad.pk))

    bad.refresh_from_db()
    good = IngestJob.objects.exclude(pk=bad.pk).get()
    assert bad.status == JobStatus.FAILED and "a/b" in bad.error
    assert good.status == JobStatus.QUEUED and good.attempts == 0
    assert not MetricSeries.objects.exists()
    job_run(job_id=str(good.pk))
    good.refresh_from_db()
    assert good.status == JobStatus.DONE and good.counts["points"] == 2


def test_an_unreadable_job_in_a_batch_fails_alone(key, team):
    now_ns = time.time_ns()
    _post(key, dcgm_request(nodes=1, gpus=1, series=2, time_ns=now_ns).SerializeToString())
    broken = _queue_raw(team, b"\xff\xff\xff not protobuf")
    first = IngestJob.objects.exclude(pk=broken.pk).get()

    job_run(job_id=str(first.pk))

    first.refresh_from_db()
    broken.refresh_from_db()
    assert first.status == JobStatus.DONE and first.counts == {
        **first.counts, "points": 2, "batch": 1}
    assert broken.status == JobStatus.FAILED and broken.error
    assert len(minutes(Cluster.objects.get(team=team, name="prod"))) == 2


def test_new_series_keep_tabs_newlines_and_backslashes_in_names_and_labels(team):
    cluster = Cluster.objects.create(team=team, name="c")
    labels = (("pod", "p\\1\t2"), ("quote", 'say "hi"\x01'), ("reason", "line\none\r\\n"))
    series_store(cluster=cluster, series=[
        Series("odd\\name\t", labels, MetricKind.GAUGE, (int(time.time() * 1000),), (1.0,)),
    ])
    stored = MetricSeries.objects.get(cluster=cluster)
    assert (stored.name, stored.pod) == ("odd\\name\t", "p\\1\t2")
    assert stored.labels == dict(labels)


def test_label_set_keys_are_the_ones_the_migration_computes_in_sql():
    # Migration 0007 keyed the label sets it moved in SQL; a load must find them again.
    for labels in ((), (("gpu", "0"), ("pod", "p\tq")), (("a", "é"), ("b\x1f", "v\x1d")),
                   (("Z", "1"), ("a", "2"), ("é", "3"))):
        with connection.cursor() as cur:
            cur.execute(
                "SELECT md5(coalesce((SELECT string_agg(e.key || chr(29) || e.value, chr(30) "
                "ORDER BY e.key COLLATE \"C\") FROM jsonb_each_text(%s::jsonb) e), ''))::uuid",
                [orjson.dumps(dict(labels)).decode()])
            assert cur.fetchone()[0] == labels_key(labels)


def test_the_receiver_stores_columns_the_worker_loads_as_it_would_the_body(key, team):
    now_ns = time.time_ns()
    bodies = [dcgm_request(nodes=2, gpus=2, series=4, time_ns=now_ns - at * 15_000_000_000)
              .SerializeToString() for at in range(2)]
    for at, body in enumerate(bodies):
        _post(key, body, gzipped=at == 0)
    payloads = list(IngestPayload.objects.order_by("job__created_at"))
    assert all(p.prepared and bytes(p.prepared).startswith(b"TRc2") for p in payloads)
    # The first job's body is gone: only its packed columns can give its points. The
    # second job's packed columns are damaged: the worker reads its body instead.
    IngestPayload.objects.filter(pk=payloads[0].pk).update(data=b"not the body")
    IngestPayload.objects.filter(pk=payloads[1].pk).update(prepared=b"TRc2 damaged")

    job_run(job_id=str(payloads[0].job_id))

    assert [j.status for j in IngestJob.objects.all()] == [JobStatus.DONE] * 2
    reference = Cluster.objects.create(team=team, name="reference")
    for body in bodies:
        series_store(cluster=reference, series=otlp_metrics_parse(body=body).series())
    stored = sorted(minutes(Cluster.objects.get(team=team, name="prod")))
    assert stored and stored == sorted(minutes(reference))


def test_json_and_histograms_store_no_columns(key):
    now = str(time.time_ns())
    doc = {"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "g", "gauge": {
        "dataPoints": [{"timeUnixNano": now, "asDouble": 1}]}}]}]}]}
    response = Client().post("/v1/metrics?cluster=c", data=orjson.dumps(doc),
                             content_type="application/json", **_headers(key))
    assert response.status_code == 200
    assert IngestPayload.objects.get().prepared is None


def test_a_fresh_job_waits_a_little_for_more_unless_urgent(key, team, settings):
    from ingest.loaders.cluster import _otlp_batch_wait

    settings.TRUSTRANK_METRICS_BATCH_WAIT_MS = 300
    body = dcgm_request(nodes=1, gpus=1, series=2, time_ns=time.time_ns()).SerializeToString()
    _post(key, body)
    job = IngestJob.objects.get()
    started = time.monotonic()
    assert _otlp_batch_wait(job) == []
    assert 0.15 < time.monotonic() - started < 2
    job.priority = 1  # X-Priority: 1
    started = time.monotonic()
    _otlp_batch_wait(job)
    assert time.monotonic() - started < 0.15
    job.priority = 10
    job.created_at -= timedelta(seconds=1)  # waited in the queue already
    started = time.monotonic()
    _otlp_batch_wait(job)
    assert time.monotonic() - started < 0.15
    _post(key, body)  # a second request queued: claimed with the first
    job.created_at += timedelta(seconds=1)
    assert len(_otlp_batch_wait(job)) == 1
    assert IngestJob.objects.filter(status=JobStatus.RUNNING).count() == 1


def test_a_metric_without_points_makes_no_name(key, team):
    now_ns = time.time_ns()
    empty = metrics_pb2.Metric(name="never_sampled")
    empty.gauge.SetInParent()
    body = request([({"k8s.cluster.name": "prod"}, [
        empty, _gauge("sampled", [(now_ns, 1.0, {"gpu": "0"})])])]).SerializeToString()
    _post(key, body)
    job_run(job_id=str(IngestJob.objects.get().pk))
    assert list(MetricName.objects.values_list("name", flat=True)) == ["sampled"]


def test_a_gzip_request_of_two_clusters_is_read_from_its_body(key, team):
    # Its packed columns hold two clusters: the worker parses the (gzip) body instead.
    now_ns = time.time_ns()
    body = request([
        ({"k8s.cluster.name": "east"}, [_gauge("g", [(now_ns, 1.0, {"gpu": "0"})])]),
        ({"k8s.cluster.name": "west"}, [_gauge("g", [(now_ns, 2.0, {"gpu": "0"})])]),
    ]).SerializeToString()
    _post(key, body, gzipped=True)
    job = IngestJob.objects.get()
    assert IngestPayload.objects.get(job=job).prepared
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    assert job.status == JobStatus.DONE, job.error
    assert [r[4] for r in minutes(Cluster.objects.get(team=team, name="west"))] == [2.0]
    assert [r[4] for r in minutes(Cluster.objects.get(team=team, name="east"))] == [1.0]
