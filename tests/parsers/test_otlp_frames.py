"""Span `exception` events become library evidence in the parser's plain span rows."""

from __future__ import annotations

import orjson
from opentelemetry.trace import SpanKind

from tests.parsers.test_stackframes import JAVA, NODE, PYTHON
from tests.runtime.helpers import SpanFactory, exception_event
from trustrank.parsers.otlp import JSON, otlp_decode, otlp_span_batches, spans_from_request


def _libraries(request, **kwargs):
    batch = spans_from_request(request, **kwargs)
    return [row[11] for r in batch.resources for s in r.scopes for row in s.spans]


def test_exception_event_frames_join_the_span_libraries():
    f = SpanFactory()
    f.span(service="payment-gateway", name="POST /pay", kind=SpanKind.SERVER,
           trace_id=f.trace_id(), attributes={"code.namespace": "com.shop.Pay"},
           events=[exception_event(JAVA)])
    (libs,) = _libraries(f.request())
    assert libs[0] == ("code", "com.shop.Pay")
    assert ("java_frame", "org.apache.logging.log4j.core.Logger.log") in libs
    assert ("java_frame", "java.base/java.lang.reflect.Method.invoke") not in libs


def test_only_exception_events_with_a_stacktrace_count():
    f = SpanFactory()
    f.span(service="svc", name="a", kind=SpanKind.INTERNAL, trace_id=f.trace_id(),
           events=[("log", {"exception.stacktrace": JAVA}),
                   ("exception", {"exception.type": "E", "exception.message": "no trace"})])
    f.span(service="svc", name="b", kind=SpanKind.INTERNAL, trace_id=f.trace_id())
    assert _libraries(f.request()) == [None, None]


def test_frames_are_bounded_per_trace_and_per_span():
    f = SpanFactory()
    f.span(service="svc", name="retry", kind=SpanKind.CLIENT, trace_id=f.trace_id(),
           events=[exception_event(JAVA), exception_event(PYTHON), exception_event(NODE)])
    request = f.request()
    (everything,) = _libraries(request, max_stack_frames=50, max_span_frames=100)
    assert {k for k, _ in everything} == {"java_frame", "python_frame", "js_frame"}
    (per_trace,) = _libraries(request, max_stack_frames=1, max_span_frames=100)
    assert per_trace == (
        ("java_frame", "org.apache.logging.log4j.core.Logger.log"),
        ("python_frame", "urllib3.connectionpool.urlopen"),
        ("js_frame", "express/lib/router/index.js"),
    )
    (per_span,) = _libraries(request, max_stack_frames=50, max_span_frames=3)
    assert len(per_span) == 3
    assert _libraries(request, max_stack_frames=0) == [None]


def test_the_same_stacktrace_on_many_spans_gives_the_same_frames():
    f = SpanFactory()
    for _ in range(50):
        f.span(service="svc", name="x", kind=SpanKind.SERVER, trace_id=f.trace_id(),
               events=[exception_event(PYTHON)])
    rows = _libraries(f.request())
    assert len(rows) == 50 and len(set(rows)) == 1
    assert ("python_frame", "requests.sessions.request") in rows[0]


def test_json_exports_carry_frames_too():
    trace_id, span_id = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
    body = orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "web"}}]},
        "scopeSpans": [{"scope": {"name": "manual"}, "spans": [{
            "traceId": trace_id, "spanId": span_id, "name": "GET /", "kind": 2,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000100000000",
            "events": [{"name": "exception", "timeUnixNano": "1700000000050000000",
                        "attributes": [{"key": "exception.stacktrace",
                                        "value": {"stringValue": NODE}}]}],
        }]}],
    }]})
    decoded = otlp_decode(body, encoding=JSON)
    assert decoded.rejected_spans == 0
    (batch,) = otlp_span_batches(body, encoding=JSON)
    libs = batch.resources[0].scopes[0].spans[0][11]
    assert ("js_frame", "@nestjs/core/router/router-proxy.js") in libs


def test_a_zero_bound_turns_frame_evidence_off():
    f = SpanFactory()
    f.span(service="svc", name="x", kind=SpanKind.SERVER, trace_id=f.trace_id(),
           events=[exception_event(JAVA)])
    assert _libraries(f.request(), max_span_frames=0) == [None]
