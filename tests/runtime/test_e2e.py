"""End to end on the production path: gunicorn -> PostgreSQL -> a real Celery worker -> API.

The exporters are the real ones: the opentelemetry-sdk OTLPSpanExporter (HTTP/protobuf), a
chunked JSON body as @opentelemetry/exporter-trace-otlp-http sends it, and a gzip protobuf
body as the Collector's otlphttp exporter sends it.
"""

from __future__ import annotations

import gzip
import http.client
from urllib.parse import urlparse

import orjson
import pytest
import requests
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for
from tests.runtime.helpers import DATA, SpanFactory

pytestmark = pytest.mark.e2e


def provider(url: str, key: str, service: str, *, compression=Compression.NoCompression):
    tp = TracerProvider(
        resource=Resource.create(
            {"service.name": service, "deployment.environment.name": "e2e",
             "service.version": "3.1.0"}
        )
    )
    exporter = OTLPSpanExporter(
        endpoint=f"{url}/v1/traces", headers={"Authorization": f"Bearer {key}"},
        compression=compression,
    )
    tp.add_span_processor(BatchSpanProcessor(exporter))
    return tp


def jobs_done(n: int):
    def check():
        jobs = list(IngestJob.objects.filter(kind="traces"))
        failed = [j.error for j in jobs if j.status == JobStatus.FAILED]
        assert not failed, failed
        return len(jobs) >= n and all(j.status == JobStatus.DONE for j in jobs)

    return check


def test_python_sdk_exporter_to_live_server_is_aggregated(
    web_server, celery_worker, team, other_team, make_key
):
    key = make_key(team, "traces:write", "read")
    frontend = provider(web_server.url, key, "frontend")
    backend = provider(web_server.url, key, "backend", compression=Compression.Gzip)
    ft = frontend.get_tracer("opentelemetry.instrumentation.flask", "0.48b0")
    bt = backend.get_tracer("opentelemetry.instrumentation.django", "0.48b0")
    for i in range(25):
        with ft.start_as_current_span("GET /", kind=SpanKind.SERVER), \
                ft.start_as_current_span(
                    "GET backend", kind=SpanKind.CLIENT,
                    attributes={"server.address": "backend", "url.scheme": "https"},
                ):
            carrier: dict[str, str] = {}
            inject(carrier)
            # The backend process: context arrives in the traceparent header.
            with bt.start_as_current_span(
                "GET /api", context=extract(carrier), kind=SpanKind.SERVER
            ) as span, bt.start_as_current_span(
                "SELECT", kind=SpanKind.CLIENT,
                attributes={"db.system": "postgresql", "server.address": "pg"},
            ):
                if i % 5 == 0:
                    span.set_status(trace.Status(trace.StatusCode.ERROR))
    # Each provider exports its own spans: caller and callee halves arrive separately.
    assert frontend.force_flush(30_000)
    assert backend.force_flush(30_000)
    frontend.shutdown()
    backend.shutdown()
    wait_for(jobs_done(2), timeout=90)

    session = requests.Session()
    session.headers["X-Api-Key"] = key
    edges = session.get(f"{web_server.url}/api/v1/environments/e2e/edges?window=1h").json()
    assert edges["count"] == 3
    by_pair = {(e["caller"], e["callee"]): e for e in edges["results"]}
    assert by_pair[("frontend", "backend")]["callee_kind"] == "service"
    assert by_pair[("backend", "pg")]["callee_kind"] == "external"
    assert by_pair[("frontend", "backend")]["calls"] == 25
    assert by_pair[("frontend", "backend")]["errors"] == 5
    assert by_pair[("frontend", "backend")]["tls_calls"] == 0  # the server span has no TLS
    assert by_pair[("internet", "frontend")]["calls"] == 25
    assert by_pair[("backend", "pg")]["calls"] == 25
    assert by_pair[("frontend", "backend")]["p99_ms"] is not None
    svcs = session.get(f"{web_server.url}/api/v1/environments/e2e/services").json()
    backend_row = next(s for s in svcs["results"] if s["name"] == "backend")
    assert backend_row["version"] == "3.1.0"
    assert not backend_row["ingress"]
    assert any(lib["name"] == "opentelemetry.instrumentation.django"
               for lib in backend_row["libraries"])
    # Another team's key sees nothing of it.
    other = requests.get(
        f"{web_server.url}/api/v1/environments/e2e/edges",
        headers={"X-Api-Key": make_key(other_team, "read")},
    )
    assert other.status_code == 404


def test_chunked_json_body_without_content_length_through_gunicorn(
    web_server, celery_worker, team, make_key
):
    key = make_key(team, "traces:write")
    document = orjson.loads((DATA / "opentelemetry-proto_examples_trace.json").read_bytes())
    body = orjson.dumps(document)
    target = urlparse(web_server.url)
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    conn.putrequest("POST", "/v1/traces")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Authorization", f"Bearer {key}")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    for start in range(0, len(body), 300):
        piece = body[start:start + 300]
        conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    conn.send(b"0\r\n\r\n")
    response = conn.getresponse()
    assert response.status == 200, response.read()
    assert response.getheader("Content-Type") == "application/json"
    assert orjson.loads(response.read()) == {}
    wait_for(jobs_done(1), timeout=60)
    job = IngestJob.objects.get(kind="traces")
    assert job.counts["spans"] == 1


def test_collector_style_gzip_protobuf_and_a_failed_job(web_server, celery_worker, team,
                                                        make_key):
    key = make_key(team, "traces:write")
    f = SpanFactory(env="collector")
    for _ in range(10):
        f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    response = requests.post(
        f"{web_server.url}/v1/traces", data=gzip.compress(f.body()),
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip",
                 "Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/x-protobuf"
    wait_for(jobs_done(1), timeout=60)
    job = IngestJob.objects.get(kind="traces")
    assert job.counts["spans"] == 10
    # Raw spans are not kept once aggregated.
    assert bytes(job.payload.data) == b""

    # A stored payload that cannot be decoded fails its job with the reason.
    from ingest.services import job_create
    from trustrank.accounts.principal import principal_for_key

    bad = job_create(team=team, kind="traces", payload=b"\xff\xfe not protobuf",
                     principal=principal_for_key(job.requested_by_key),
                     params={"encoding": "protobuf"})

    def failed():
        bad.refresh_from_db()
        return bad.status == JobStatus.FAILED

    wait_for(failed, timeout=60)
    assert "cannot be decoded" in bad.error
