"""Unusable spans and resources are counted in partial_success and left out; the rest of the
export is stored. The receiver's count and the worker's agree, rule by rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.trace import SpanKind

from ingest.models import IngestJob, JobStatus
from ingest.services import job_run
from tests.runtime.helpers import SpanFactory
from trustrank.parsers.otlp import PROTOBUF, SpanWindow, otlp_decode
from trustrank.runtime.models import Service

pytestmark = pytest.mark.django_db

GOOD = 50
BAD = 5


def _export(spoil: Callable[[ExportTraceServiceRequest], None]) -> ExportTraceServiceRequest:
    """50 good spans of service `web`, then 5 spans of service `bad` spoiled by `spoil`
    (given a request holding only the bad resource)."""
    f = SpanFactory()
    for _ in range(GOOD):
        f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    good = f.request()
    g = SpanFactory(seed=11)
    for _ in range(BAD):
        g.span(service="bad", name="GET /x", kind=SpanKind.SERVER, trace_id=g.trace_id())
    bad = g.request()
    spoil(bad)
    good.resource_spans.extend(bad.resource_spans)
    return good


def _set_resource(key: str, value: str) -> Callable[[ExportTraceServiceRequest], None]:
    def spoil(request: ExportTraceServiceRequest) -> None:
        for rs in request.resource_spans:
            for kv in rs.resource.attributes:
                if kv.key == key:
                    kv.value.string_value = value
                    break
            else:
                attr = rs.resource.attributes.add()
                attr.key, attr.value.string_value = key, value
    return spoil


def _each_span(change: Callable[..., None]) -> Callable[[ExportTraceServiceRequest], None]:
    def spoil(request: ExportTraceServiceRequest) -> None:
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    change(span)
    return spoil


def _times(start: int, end: int) -> Callable[..., None]:
    def change(span) -> None:
        span.start_time_unix_nano, span.end_time_unix_nano = start, end
    return change


def _name(value: str) -> Callable[..., None]:
    def change(span) -> None:
        span.name = value
    return change


DAY_NS = 86_400 * 10**9
SPOILERS = {
    "NUL in service.name": _set_resource("service.name", "bad\x00svc"),
    "NUL in service.namespace": _set_resource("service.namespace", "ns\x00"),
    "NUL in the environment": _set_resource("deployment.environment.name", "prod\x00"),
    "service.name over the limit": _set_resource("service.name", "s" * 201),
    "environment over the limit": _set_resource("deployment.environment.name", "e" * 121),
    "end at 2^64-1": _each_span(_times(1_700_000_000 * 10**9, 2**64 - 1)),
    "start two days ahead": _each_span(
        _times(SpanFactory().now + 2 * DAY_NS, SpanFactory().now + 2 * DAY_NS + 1000)
    ),
    "start at 1 ns after the epoch": _each_span(_times(1, 1000)),
    "NUL in the span name": _each_span(_name("GET \x00")),
    "span name over the limit": _each_span(_name("n" * 201)),
}


@pytest.mark.parametrize("case", sorted(SPOILERS))
def test_the_receiver_counts_them_and_the_worker_stores_the_rest(team, make_key, case):
    key = make_key(team, "traces:write")
    body = _export(SPOILERS[case]).SerializeToString()
    response = Client().post("/v1/traces", data=body, content_type=PROTOBUF,
                             HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200
    reply = ExportTraceServiceResponse.FromString(response.content)
    assert reply.partial_success.rejected_spans == BAD, case
    assert reply.partial_success.error_message
    job = IngestJob.objects.get()
    assert job.params["spans"] == GOOD
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    assert job.status == JobStatus.DONE, job.error
    assert job.counts["spans"] == GOOD
    assert job.counts["rejected_spans"] == BAD
    names = set(Service.objects.values_list("name", flat=True))
    assert "web" in names
    assert not any("\x00" in n or len(n) > 200 for n in names)
    assert not Service.objects.filter(last_seen__year__gt=2100).exists()


@pytest.mark.parametrize("case", sorted(SPOILERS))
def test_the_parser_rejects_exactly_the_spoiled_spans(case):
    now_ns = SpanFactory().now
    window = SpanWindow.around(now_ns=now_ns, max_future_ns=DAY_NS, max_age_ns=3650 * DAY_NS)
    decoded = otlp_decode(_export(SPOILERS[case]).SerializeToString(), encoding=PROTOBUF,
                          window=window)
    assert (decoded.total_spans, decoded.rejected_spans) == (GOOD + BAD, BAD)
    assert decoded.message()


def test_other_text_with_a_nul_is_kept_readable(team, make_key):
    f = SpanFactory()
    f.span(service="web", name="SELECT", kind=SpanKind.CLIENT, trace_id=f.trace_id(),
           attributes={"peer.service": "db\x00x", "db.system": "post\x00gres"})
    key = make_key(team, "traces:write")
    response = Client().post("/v1/traces", data=f.body(), content_type=PROTOBUF,
                             HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200
    job = IngestJob.objects.get()
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    assert job.status == JobStatus.DONE, job.error
    assert job.counts["spans"] == 1
