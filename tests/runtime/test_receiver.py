"""POST /v1/traces: the OTLP/HTTP contract, through Django's full request stack."""

from __future__ import annotations

import gzip

import orjson
import pytest
from django.test import Client
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.trace import SpanKind

from ingest.models import IngestJob, IngestPayload, JobStatus
from ingest.services import ingest_overload_cache_clear
from tests.runtime.helpers import DATA, SpanFactory

pytestmark = pytest.mark.django_db
PB = "application/x-protobuf"


@pytest.fixture
def key(team, make_key):
    return make_key(team, "traces:write")


def sdk_body(n: int = 3) -> bytes:
    f = SpanFactory()
    for _ in range(n):
        f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    return f.body()


def post(body: bytes, *, content_type: str = PB, key: str | None = None, **headers):
    extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    if key is not None:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return Client().post("/v1/traces", data=body, content_type=content_type, **extra)


def test_protobuf_export_is_stored_before_it_is_acknowledged(key, team):
    body = sdk_body(3)
    response = post(body, key=key)
    assert response.status_code == 200
    assert response["Content-Type"] == PB
    parsed = ExportTraceServiceResponse.FromString(response.content)
    assert not parsed.HasField("partial_success")
    job = IngestJob.objects.get()
    assert (job.kind, job.team_id, job.status) == ("traces", team.id, JobStatus.QUEUED)
    assert job.params == {"encoding": "protobuf", "spans": 3}
    assert bytes(IngestPayload.objects.get(job=job).data) == body


def test_json_export_gets_a_json_response(key):
    body = (DATA / "opentelemetry-proto_examples_trace.json").read_bytes()
    response = post(body, content_type="application/json", key=key)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert orjson.loads(response.content) == {}
    assert IngestJob.objects.get().params["encoding"] == "json"


def test_x_api_key_header_is_accepted(key):
    assert post(sdk_body(), X_Api_Key=key).status_code == 200


def test_gzip_body_is_decompressed(key):
    body = sdk_body(2)
    response = post(gzip.compress(body), key=key, Content_Encoding="gzip")
    assert response.status_code == 200
    assert bytes(IngestPayload.objects.get().data) == body


def test_corrupt_gzip_is_400(key):
    response = post(gzip.compress(sdk_body())[:-10], key=key, Content_Encoding="gzip")
    assert response.status_code == 400
    assert not IngestJob.objects.exists()


def test_gzip_bomb_is_refused_without_inflating_it(key, settings):
    settings.TRUSTRANK_MAX_UPLOAD_BYTES = 64 * 1024
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    response = post(bomb, key=key, Content_Encoding="gzip")
    assert response.status_code == 413
    assert not IngestJob.objects.exists()


def test_partial_success_names_the_rejected_spans(key):
    document = orjson.loads((DATA / "integration_example_trace.json").read_bytes())
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "zz"
    # A resource whose attribute has the wrong type is rejected on its own.
    document["resourceSpans"][1]["resource"]["attributes"].append(
        {"key": "n", "value": {"intValue": "not-a-number"}}
    )
    response = post(orjson.dumps(document), content_type="application/json", key=key)
    assert response.status_code == 200
    partial = orjson.loads(response.content)["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "resourceSpans[0].scopeSpans[0].spans[0]" in partial["errorMessage"]
    assert "resourceSpans[1]" in partial["errorMessage"]
    assert IngestJob.objects.get().params["spans"] == 3


def test_protobuf_partial_success(key):
    f = SpanFactory()
    f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    request = f.request()
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.CopyFrom(request.resource_spans[0].scope_spans[0].spans[0])
    bad.trace_id = b"\x01\x02"
    response = post(request.SerializeToString(), key=key)
    assert response.status_code == 200
    parsed = ExportTraceServiceResponse.FromString(response.content)
    assert parsed.partial_success.rejected_spans == 1
    assert "traceId" in parsed.partial_success.error_message


def test_undecodable_bodies_are_400(key):
    response = post(b"\xff\xff\xff garbage", key=key)
    assert response.status_code == 400
    assert "protobuf" in Status.FromString(response.content).message
    response = post(b"{not json", content_type="application/json", key=key)
    assert response.status_code == 400
    assert "JSON" in orjson.loads(response.content)["message"]
    assert not IngestJob.objects.exists()


def test_missing_key_is_401(db):
    response = post(sdk_body())
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_wrong_key_is_401(db):
    assert post(sdk_body(), key="tr_abc_nope").status_code == 401


def test_key_without_traces_scope_is_403(team, make_key):
    assert post(sdk_body(), key=make_key(team, "read", "sbom:write")).status_code == 403
    assert not IngestJob.objects.exists()


def test_other_content_types_are_415(key):
    response = post(b"<xml/>", content_type="application/xml", key=key)
    assert response.status_code == 415
    response = post(sdk_body(), key=key, Content_Encoding="br")
    assert response.status_code == 415


def test_oversized_body_is_413(key, settings):
    settings.TRUSTRANK_MAX_UPLOAD_BYTES = 2048
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    response = post(sdk_body(40), key=key)
    assert response.status_code == 413
    assert not IngestJob.objects.exists()


def test_deep_queue_answers_429_with_formula_6_retry_after(key, team, settings):
    settings.TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT = 2
    settings.TRUSTRANK_BACKOFF_BASE_SECONDS = 10.0
    assert post(sdk_body(), key=key).status_code == 200
    ingest_overload_cache_clear()
    assert post(sdk_body(), key=key).status_code == 200
    ingest_overload_cache_clear()
    response = post(sdk_body(), key=key)
    assert response.status_code == 429
    # delay = base * (1 + 0.02 q)^2 with q = 2 queued jobs: 10 * 1.04^2 = 10.8 -> 11 s.
    assert response["Retry-After"] == "11"
    assert IngestJob.objects.count() == 2


def test_queue_depth_is_not_counted_on_every_request(key, django_assert_max_num_queries):
    post(sdk_body(), key=key)
    with django_assert_max_num_queries(8) as ctx:
        post(sdk_body(), key=key)
    assert not any("COUNT(" in q["sql"].upper() for q in ctx.captured_queries)


def test_bad_priority_is_400(key):
    assert post(sdk_body(), key=key, X_Priority="urgent").status_code == 400
