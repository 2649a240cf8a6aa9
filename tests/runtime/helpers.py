"""Span builders for the runtime tests: real opentelemetry-sdk spans and its OTLP encoder,
and the Nezha OnlineBoutique span CSV turned into per-service OTLP export requests."""

from __future__ import annotations

import csv
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

DATA = Path(__file__).resolve().parent.parent / "data" / "traces"
NEZHA_CSV = DATA / "nezha_onlineboutique_2022-08-23_17-00_trace_first120traces.csv"


def exception_event(stacktrace: str, *, type_: str = "java.lang.RuntimeException") -> tuple[
        str, dict[str, Any]]:
    """A span `exception` event as the SDKs record one (`span.record_exception`)."""
    return ("exception", {"exception.type": type_, "exception.message": "boom",
                          "exception.stacktrace": stacktrace, "exception.escaped": "False"})


class SpanFactory:
    """Builds ReadableSpans the way an instrumented service's SDK would."""

    def __init__(self, *, env: str = "production", seed: int = 7) -> None:
        self.env = env
        self.rng = random.Random(seed)
        self.spans: list[ReadableSpan] = []
        self.now = time.time_ns()

    def resource(self, service: str, **extra: str) -> Resource:
        attrs = {"service.name": service, "deployment.environment.name": self.env}
        attrs.update(extra)
        return Resource.create(attrs)

    def trace_id(self) -> int:
        return self.rng.getrandbits(128) | 1

    def span(
        self,
        *,
        service: str,
        name: str,
        kind: SpanKind,
        trace_id: int,
        parent: SpanContext | None = None,
        start_offset_ms: float = 0,
        duration_ms: float = 10,
        attributes: dict[str, Any] | None = None,
        error: bool = False,
        scope: tuple[str, str] = ("opentelemetry.instrumentation.test", "1.0"),
        resource: Resource | None = None,
        events: list[tuple[str, dict[str, Any]]] | None = None,
    ) -> SpanContext:
        context = SpanContext(
            trace_id, self.rng.getrandbits(64) | 1, is_remote=False, trace_flags=TraceFlags(1)
        )
        start = self.now + int(start_offset_ms * 1e6)
        self.spans.append(
            ReadableSpan(
                name=name,
                context=context,
                parent=parent,
                resource=resource or self.resource(service),
                attributes=attributes or {},
                kind=kind,
                status=Status(StatusCode.ERROR if error else StatusCode.UNSET),
                start_time=start,
                end_time=start + int(duration_ms * 1e6),
                instrumentation_scope=InstrumentationScope(*scope),
                events=[
                    Event(event_name, attributes=event_attributes, timestamp=start)
                    for event_name, event_attributes in events or []
                ],
            )
        )
        return context

    def request(self, spans: list[ReadableSpan] | None = None) -> ExportTraceServiceRequest:
        return encode_spans(self.spans if spans is None else spans)

    def body(self, spans: list[ReadableSpan] | None = None) -> bytes:
        return self.request(spans).SerializeToString()

    def by_service(self) -> dict[str, list[ReadableSpan]]:
        grouped: dict[str, list[ReadableSpan]] = defaultdict(list)
        for span in self.spans:
            grouped[str(span.resource.attributes["service.name"])].append(span)
        return grouped


@dataclass(frozen=True)
class NezhaSpan:
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    operation: str
    start_ns: int
    end_ns: int


def nezha_spans(limit_traces: int | None = None) -> list[NezhaSpan]:
    """The CSV rows; the service is the pod name without its ReplicaSet and pod suffixes."""
    spans = []
    traces: list[str] = []
    with NEZHA_CSV.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row["TraceID"] not in traces:
                if limit_traces is not None and len(traces) >= limit_traces:
                    continue
                traces.append(row["TraceID"])
            spans.append(
                NezhaSpan(
                    trace_id=row["TraceID"],
                    span_id=row["SpanID"],
                    parent_id="" if row["ParentID"] == "root" else row["ParentID"],
                    service=row["PodName"].rsplit("-", 2)[0],
                    operation=row["OperationName"],
                    start_ns=int(row["StartTimeUnixNano"]),
                    end_ns=int(row["EndTimeUnixNano"]),
                )
            )
    return spans


def nezha_kinds(spans: list[NezhaSpan]) -> dict[str, SpanKind]:
    """The CSV has no span kind: a root span or one whose parent is in another service is
    the server side of a call; a span with a child in another service is its client side."""
    service_of = {s.span_id: s.service for s in spans}
    calls_out = {s.parent_id for s in spans if s.parent_id and service_of.get(s.parent_id)
                 not in (None, s.service)}
    kinds = {}
    for s in spans:
        if not s.parent_id or service_of.get(s.parent_id, s.service) != s.service:
            kinds[s.span_id] = SpanKind.SERVER
        elif s.span_id in calls_out:
            kinds[s.span_id] = SpanKind.CLIENT
        else:
            kinds[s.span_id] = SpanKind.INTERNAL
    return kinds


def nezha_expected_edges(spans: list[NezhaSpan]) -> dict[tuple[str, str], int]:
    service_of = {s.span_id: s.service for s in spans}
    edges: dict[tuple[str, str], int] = defaultdict(int)
    for s in spans:
        if s.parent_id and s.parent_id in service_of and service_of[s.parent_id] != s.service:
            edges[(service_of[s.parent_id], s.service)] += 1
    return dict(edges)


def nezha_requests(spans: list[NezhaSpan], *, env: str = "boutique") -> dict[str, bytes]:
    """One OTLP export request per service, as each service's own SDK would send."""
    kinds = nezha_kinds(spans)
    resources = {}
    by_service: dict[str, list[ReadableSpan]] = defaultdict(list)
    for s in spans:
        if s.service not in resources:
            resources[s.service] = Resource.create(
                {"service.name": s.service, "deployment.environment": env}
            )
        parent = (
            SpanContext(int(s.trace_id, 16), int(s.parent_id, 16), is_remote=True)
            if s.parent_id else None
        )
        by_service[s.service].append(
            ReadableSpan(
                name=s.operation,
                context=SpanContext(int(s.trace_id, 16), int(s.span_id, 16), is_remote=False),
                parent=parent,
                resource=resources[s.service],
                attributes={"rpc.system": "grpc"},
                kind=kinds[s.span_id],
                start_time=s.start_ns,
                end_time=s.end_ns,
                instrumentation_scope=InstrumentationScope("opentelemetry.instrumentation.grpc"),
            )
        )
    return {name: encode_spans(items).SerializeToString() for name, items in by_service.items()}


JAVA_TRACE = """java.lang.IllegalStateException: boom
\tat org.apache.logging.log4j.core.Logger.log(Logger.java:123)
\tat com.fasterxml.jackson.databind.ObjectMapper.readValue(ObjectMapper.java:3600)
\tat java.base/java.lang.Thread.run(Thread.java:833)
"""
PY_TRACE = """Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/requests/sessions.py", line 589, in request
  File "/app/shop/views.py", line 12, in checkout
ValueError: boom
"""


def shop(seed: int, traces: int = 60) -> SpanFactory:
    """A shop whose traces take every path the aggregation knows: calls matched in one
    request, databases, untraced and settled external peers, entries from public, private,
    loopback and unrecorded addresses, lost trace contexts, exception stack frames."""
    f = SpanFactory(seed=seed)
    rng = random.Random(seed)
    clients = ["203.0.113.7", "10.1.2.3", "127.0.0.1", "", "198.51.100.20"]
    for n in range(traces):
        tid = f.trace_id()
        at = rng.uniform(-120_000, 0)
        root = f.span(
            service="frontend", name="GET /checkout", kind=SpanKind.SERVER, trace_id=tid,
            start_offset_ms=at, duration_ms=rng.uniform(1, 90),
            attributes={"client.address": clients[n % len(clients)], "url.scheme": "https"},
            error=rng.random() < 0.1,
        )
        call = f.span(
            service="frontend", name="Cart/Get", kind=SpanKind.CLIENT, trace_id=tid,
            parent=root, start_offset_ms=at + 1, duration_ms=rng.uniform(0.001, 40),
            attributes={"rpc.system": "grpc", "server.address": "cart.shop.svc:7070" if n % 2 else "Cart:7070"},
        )
        f.span(
            service="cart", name="Cart/Get", kind=SpanKind.SERVER, trace_id=tid, parent=call,
            start_offset_ms=at + 1.5, duration_ms=rng.uniform(0.001, 30),
            attributes={"tls.client.subject": "CN=frontend"} if n % 3 else {},
            error=n % 7 == 0,
            events=[exception_event(JAVA_TRACE)] if n % 5 == 0 else None,
        )
        f.span(
            service="cart", name="HGET", kind=SpanKind.CLIENT, trace_id=tid, parent=call,
            start_offset_ms=at + 2, duration_ms=0.2,
            attributes={"db.system": "redis", "server.address": "redis-cart"},
        )
        # A client span to a peer that is not traced (held open, or a settled external).
        f.span(
            service="frontend", name="POST /pay", kind=SpanKind.CLIENT, trace_id=tid,
            parent=root, start_offset_ms=at + 3, duration_ms=rng.uniform(1, 5000),
            attributes={"peer.service": "payments" if n % 2 else "api.stripe.com"},
            events=[exception_event(PY_TRACE, type_="ValueError")] if n % 4 == 0 else None,
        )
        # Lost context: the callee starts a new trace while the call is open.
        if n % 6 == 0:
            f.span(
                service="frontend", name="Catalog/List", kind=SpanKind.CLIENT, trace_id=tid,
                parent=root, start_offset_ms=at + 4, duration_ms=20,
                attributes={"rpc.system": "grpc", "server.address": "catalog"},
            )
            f.span(
                service="catalog", name="Catalog/List", kind=SpanKind.SERVER,
                trace_id=f.trace_id(), start_offset_ms=at + 5, duration_ms=10,
            )
        f.span(
            service="worker", name="consume", kind=SpanKind.CONSUMER, trace_id=tid,
            start_offset_ms=at + 6, duration_ms=3, attributes={"messaging.system": "kafka"},
        )
        f.span(
            service="worker", name="internal", kind=SpanKind.INTERNAL, trace_id=tid,
            start_offset_ms=at + 7, duration_ms=3,
            attributes={"code.namespace": "shop.worker", "code.function": "shop.worker.run"},
            scope=("", ""),
        )
    return f
