"""Aggregation into PostgreSQL: the handler's service, on real data and SDK-built spans."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.utils import timezone
from opentelemetry.trace import SpanKind

from ingest.loaders.traces import traces_load
from ingest.models import IngestJob
from tests.runtime.helpers import (
    DATA,
    SpanFactory,
    nezha_expected_edges,
    nezha_requests,
    nezha_spans,
)
from trustrank.findings.models import Finding
from trustrank.parsers.otlp import JSON, otlp_decode, spans_from_request
from trustrank.runtime import engine_histograms, services
from trustrank.runtime.models import (
    CallEdgeBucket,
    Environment,
    LibraryBucket,
    OpenClientSpan,
    PendingServerSpan,
    Service,
    ServiceAlias,
    TraceSample,
)

pytestmark = pytest.mark.django_db


def store(team, request) -> dict:
    return services.traces_aggregate_store(
        team_id=team.id, batch=spans_from_request(request), received_at=timezone.now()
    )


def edge_calls(env_name: str) -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = {}
    for b in CallEdgeBucket.objects.filter(environment__name=env_name).select_related(
        "caller", "callee"
    ):
        key = (b.caller.name, b.callee.name)
        totals[key] = totals.get(key, 0) + b.calls
    return totals


def test_nezha_call_graph_is_rebuilt_from_per_service_exports(team):
    spans = nezha_spans(limit_traces=40)
    expected = nezha_expected_edges(spans)
    requests = nezha_requests(spans)
    # Callees first for half the services, callers first for the rest: both halves of a
    # cross-request call must be matched whichever arrives first.
    order = sorted(requests)
    order = order[::2] + order[1::2]
    for name in order:
        decoded = otlp_decode(requests[name], encoding="application/x-protobuf")
        store(team, decoded.request)
    got = {k: v for k, v in edge_calls("boutique").items() if k[0] != "internet"}
    assert got == expected
    assert not PendingServerSpan.objects.exists()
    frontend = Service.objects.get(name="frontend", kind="service")
    assert frontend.ingress_candidate
    roots = sum(1 for s in spans if not s.parent_id)
    assert edge_calls("boutique")[("internet", "frontend")] == roots


def test_official_otlp_json_example_is_aggregated(team):
    body = (DATA / "opentelemetry-proto_examples_trace.json").read_bytes()
    decoded = otlp_decode(body, encoding=JSON)
    assert decoded.rejected_spans == 0
    counts = store(team, decoded.request)
    assert counts["spans"] == 1
    service = Service.objects.get(name="my.service")
    assert service.environment.name == "default"
    lib = LibraryBucket.objects.get(service=service, kind="scope")
    assert (lib.name, lib.version, lib.spans) == ("my.library", "1.0.0", 1)
    # Its server span names a parent that never arrives: it waits to be matched.
    assert PendingServerSpan.objects.filter(service=service).count() == 1


def test_jaeger_fixture_client_span_to_untraced_peer_makes_an_external_edge(team, settings):
    body = (DATA / "memory_fixtures_otel_traces_01.json").read_bytes()
    store(team, otlp_decode(body, encoding=JSON).request)
    # The callee's own export might still come: nothing is counted as external yet.
    assert not Service.objects.filter(kind="external").exists()
    result = services.traces_sweep(
        now=timezone.now() + timedelta(seconds=settings.TRUSTRANK_TRACE_MATCH_SECONDS + 1)
    )
    assert result["external_calls"] == 2
    external = Service.objects.get(kind="external", name="service-y")
    bucket = CallEdgeBucket.objects.get(callee=external)
    assert bucket.caller.name == "service-x"
    # One client and one producer span name peer.service=service-y; both failed.
    assert (bucket.calls, bucket.errors) == (2, 2)
    # Once settled as external, later calls to it are counted at once (in a partial row
    # of that load's own, which readers add to the bucket's others).
    store(team, otlp_decode(body, encoding=JSON).request)
    rows = CallEdgeBucket.objects.filter(callee=external, bucket_start=bucket.bucket_start)
    assert sum(rows.values_list("calls", flat=True)) == 4
    assert not OpenClientSpan.objects.exists()


def test_unmatched_remote_parent_becomes_an_entry_point_after_the_match_window(team, settings):
    f = SpanFactory()
    from opentelemetry.trace import SpanContext

    remote = SpanContext(f.trace_id(), 0xABC, is_remote=True)
    f.span(service="billing", name="POST /charge", kind=SpanKind.SERVER,
           trace_id=remote.trace_id, parent=remote)
    store(team, f.request())
    billing = Service.objects.get(name="billing")
    assert not billing.ingress_candidate
    result = services.traces_sweep(
        now=timezone.now() + timedelta(seconds=settings.TRUSTRANK_TRACE_MATCH_SECONDS + 1)
    )
    assert result["entry_spans"] == 1
    billing.refresh_from_db()
    assert billing.ingress_candidate
    assert edge_calls("production") == {("internet", "billing"): 1}
    assert not PendingServerSpan.objects.exists()


def test_libraries_tls_and_latency_percentiles(team):
    f = SpanFactory()
    for i in range(100):
        t = f.trace_id()
        root = f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t,
                      duration_ms=50, attributes={"url.scheme": "https"})
        call = f.span(service="web", name="GET api", kind=SpanKind.CLIENT, trace_id=t,
                      parent=root, duration_ms=i + 1, attributes={"server.address": "api-internal:8080"})
        srv = f.span(service="api", name="GET /items", kind=SpanKind.SERVER, trace_id=t,
                     parent=call, duration_ms=i + 1, error=i < 5,
                     attributes={"tls.client.subject": "CN=web", "tls.protocol.version": "1.3"},
                     scope=("io.opentelemetry.tomcat-10.0", "2.1.0"))
        f.span(service="api", name="load", kind=SpanKind.INTERNAL, trace_id=t, parent=srv,
               attributes={"code.namespace": "org.apache.logging.log4j.core.Logger",
                           "code.function": "log"}, scope=("org.apache.logging.log4j", "2.14.1"))
        f.span(service="api", name="SELECT", kind=SpanKind.CLIENT, trace_id=t, parent=srv,
               attributes={"db.system": "postgresql", "server.address": "items-db"})
    store(team, f.request())
    calls = edge_calls("production")
    assert calls[("internet", "web")] == 100
    assert calls[("web", "api")] == 100
    assert calls[("api", "items-db")] == 100
    edge = CallEdgeBucket.objects.filter(caller__name="web", callee__name="api")
    assert sum(b.errors for b in edge) == 5
    assert sum(b.mtls_calls for b in edge) == 100

    pct = engine_histograms.hist_percentiles(engine_histograms.hist_merge(b.hist for b in edge))
    assert pct[0.5] == pytest.approx(50, rel=0.15)
    assert pct[0.99] == pytest.approx(99, rel=0.15)
    libs = {
        (lb.kind, lb.name, lb.version): lb.spans
        for lb in LibraryBucket.objects.filter(service__name="api")
    }
    assert libs[("scope", "org.apache.logging.log4j", "2.14.1")] == 100
    assert libs[("code", "org.apache.logging.log4j.core.Logger", "")] == 100
    assert libs[("db", "postgresql", "")] == 100
    # The alias "api-internal" was learnt from the matched client span.
    assert ServiceAlias.objects.filter(peer="api-internal", service__name="api").exists()


def test_broken_context_within_one_request(team):
    f = SpanFactory()
    for _ in range(3):
        t = f.trace_id()
        root = f.span(service="gateway", name="GET /pay", kind=SpanKind.SERVER, trace_id=t,
                      duration_ms=40)
        f.span(service="gateway", name="POST payments", kind=SpanKind.CLIENT, trace_id=t,
               parent=root, start_offset_ms=1, duration_ms=30,
               attributes={"peer.service": "payments"})
        # payments lost the context: its server span starts a trace of its own.
        f.span(service="payments", name="POST /charge", kind=SpanKind.SERVER,
               trace_id=f.trace_id(), start_offset_ms=2, duration_ms=25)
    store(team, f.request())
    finding = Finding.objects.get(kind="reliability", category="broken_context")
    ev = finding.evidence
    assert (ev["caller"], ev["callee"], ev["occurrences"]) == ("gateway", "payments", 3)
    assert finding.service.name == "payments" and finding.team_id == team.pk
    assert len(ev["examples"]) == 3
    assert all(len(e["caller_trace_id"]) == 32 for e in ev["examples"])
    assert finding.events.get().action == "created"
    # The same loss seen again adds up on the one finding.
    store(team, f.request())
    finding.refresh_from_db()
    assert finding.evidence["occurrences"] == 6 and len(finding.evidence["examples"]) == 5


def test_broken_context_across_requests_is_found_by_the_sweep(team, settings):
    f = SpanFactory()
    t = f.trace_id()
    root = f.span(service="gateway", name="GET /pay", kind=SpanKind.SERVER, trace_id=t)
    f.span(service="gateway", name="POST payments", kind=SpanKind.CLIENT, trace_id=t,
           parent=root, attributes={"peer.service": "payments"})
    payments_root = f.span(service="payments", name="POST /charge", kind=SpanKind.SERVER,
                           trace_id=f.trace_id())
    grouped = f.by_service()
    store(team, f.request(grouped["payments"]))
    store(team, f.request(grouped["gateway"]))
    assert OpenClientSpan.objects.count() == 1
    assert not Finding.objects.exists()
    services.traces_sweep(
        now=timezone.now() + timedelta(seconds=settings.TRUSTRANK_TRACE_MATCH_SECONDS + 1)
    )
    finding = Finding.objects.get(kind="reliability")
    assert (finding.evidence["caller"], finding.evidence["callee"]) == ("gateway", "payments")
    assert payments_root.trace_id  # the callee's trace exists, on its own


def test_sampled_traces_are_kept_with_retention(team, settings):
    settings.TRUSTRANK_TRACE_SAMPLE_RATE = 1.0
    f = SpanFactory()
    t = f.trace_id()
    f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t)
    store(team, f.request())
    sample = TraceSample.objects.get()
    assert sample.trace_id == f"{t:032x}"
    assert sample.spans[0]["service"] == "web"
    services.traces_sweep(
        now=timezone.now() + timedelta(days=settings.TRUSTRANK_TRACE_SAMPLE_RETENTION_DAYS + 1)
    )
    assert not TraceSample.objects.exists()


def test_no_samples_when_the_rate_is_zero(team, settings):
    settings.TRUSTRANK_TRACE_SAMPLE_RATE = 0.0
    f = SpanFactory()
    f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    store(team, f.request())
    assert not TraceSample.objects.exists()


def test_aggregates_add_up_across_jobs(team):
    f = SpanFactory()
    for _ in range(10):
        f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    store(team, f.request())
    store(team, f.request())
    assert edge_calls("production") == {("internet", "web"): 20}
    assert Environment.objects.filter(team=team).count() == 1


def test_environments_are_per_team(team, other_team):
    f = SpanFactory()
    f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    store(team, f.request())
    store(other_team, f.request())
    assert Environment.objects.filter(name="production").count() == 2
    assert CallEdgeBucket.objects.filter(environment__team=other_team).count() == 1


def test_json_request_with_enum_names_and_int64_strings(team):
    document = orjson.loads((DATA / "integration_example_trace.json").read_bytes())
    span = document["resourceSpans"][2]["scopeSpans"][0]["spans"][0]
    span["kind"] = "SPAN_KIND_SERVER"
    span["status"] = {"code": "STATUS_CODE_ERROR"}
    decoded = otlp_decode(orjson.dumps(document), encoding=JSON)
    assert decoded.rejected_spans == 0
    store(team, decoded.request)
    bucket = CallEdgeBucket.objects.get(callee__name="example-service-1", caller__kind="internet")
    assert (bucket.calls, bucket.errors) == (2, 1)


def test_a_large_export_is_aggregated_in_parts_with_the_same_result(team, settings):
    spans = nezha_spans(limit_traces=30)
    body = b"".join(nezha_requests(spans).values())
    settings.TRUSTRANK_TRACE_PART_BYTES = 4096
    job = IngestJob.objects.create(team=team, kind="traces", digest="-",
                                   params={"encoding": "protobuf"})
    counts = traces_load(job=job, payload=body, progress=lambda **_: None)
    assert counts["spans"] == len(spans)
    expected = nezha_expected_edges(spans)
    got = {k: v for k, v in edge_calls("boutique").items() if k[0] != "internet"}
    assert got == expected


def test_the_sweep_runs_on_the_beat_schedule(team, settings):
    from trustrank.runtime.tasks import runtime_traces_sweep

    entry = settings.CELERY_BEAT_SCHEDULE["runtime-traces-sweep"]
    assert entry["task"] == runtime_traces_sweep.name
    assert runtime_traces_sweep() == {
        "entry_spans": 0, "external_calls": 0, "broken_context": 0,
        "broken_context_resolved": 0, "samples_deleted": 0,
        "edge_buckets_folded": 0, "library_buckets_folded": 0,
    }


def test_rejected_spans_are_counted_on_the_job(team):
    f = SpanFactory()
    f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    request = f.request()
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.CopyFrom(request.resource_spans[0].scope_spans[0].spans[0])
    bad.span_id = b"\0" * 8
    job = IngestJob.objects.create(team=team, kind="traces", digest="-",
                                   params={"encoding": "protobuf"})
    counts = traces_load(
        job=job, payload=request.SerializeToString(), progress=lambda **_: None
    )
    assert (counts["spans"], counts["rejected_spans"]) == (1, 1)


def test_broken_context_resolves_when_unseen_and_reopens_when_back(team, settings):
    f = SpanFactory()

    def lose_context() -> None:
        t = f.trace_id()
        root = f.span(service="gateway", name="GET /pay", kind=SpanKind.SERVER, trace_id=t)
        f.span(service="gateway", name="POST payments", kind=SpanKind.CLIENT, trace_id=t,
               parent=root, start_offset_ms=1, duration_ms=30,
               attributes={"peer.service": "payments"})
        f.span(service="payments", name="POST /charge", kind=SpanKind.SERVER,
               trace_id=f.trace_id(), start_offset_ms=2, duration_ms=25)

    lose_context()
    store(team, f.request())
    finding = Finding.objects.get(kind="reliability")
    later = timezone.now() + timedelta(hours=settings.TRUSTRANK_TRACE_BROKEN_CONTEXT_RESOLVE_HOURS)
    assert services.traces_sweep(now=later + timedelta(minutes=1))["broken_context_resolved"] == 1
    finding.refresh_from_db()
    assert finding.state == "resolved" and finding.auto_resolved
    f = SpanFactory()
    lose_context()
    store(team, f.request())
    finding.refresh_from_db()
    assert finding.state == "in_triage" and not finding.auto_resolved
    # (by insertion: the sweep above ran with a clock a day ahead)
    assert [e.action for e in finding.events.order_by("pk")] == [
        "created", "auto_resolved", "reopened",
    ]


@pytest.mark.parametrize(
    ("address", "origin"),
    [("127.0.0.1", "local"), ("::1", "local"), ("10.2.3.4", "internal"),
     ("192.168.1.9", "internal"), ("93.184.216.34", "internet"), (None, "internet")],
)
def test_root_spans_are_ingress_only_from_outside(team, address, origin):
    """Root server spans count as calls from the internet only when the caller is outside:
    loopback and private callers are recorded as the service's local or internal origins."""
    from trustrank.runtime.models import CallEdgeBucket, LibraryBucket

    f = SpanFactory()
    attributes = {} if address is None else {"client.address": address}
    for _ in range(3):
        f.span(service="etcd", name="Range", kind=SpanKind.SERVER, trace_id=f.trace_id(),
               attributes=attributes)
    store(team, f.request())
    internet_calls = sum(
        CallEdgeBucket.objects.filter(caller__kind="internet").values_list("calls", flat=True)
    )
    origins = dict(
        LibraryBucket.objects.filter(kind="origin").values_list("name", "spans")
    )
    if origin == "internet":
        assert internet_calls == 3 and origins == {}
    else:
        assert internet_calls == 0 and origins == {origin: 3}


def test_exception_stack_frames_are_counted_as_library_evidence(team, settings):
    from tests.parsers.test_stackframes import JAVA, NODE
    from tests.runtime.helpers import exception_event

    f = SpanFactory(env="prod")
    for i in range(3):
        f.span(service="gateway", name="POST /pay", kind=SpanKind.SERVER,
               trace_id=f.trace_id(), start_offset_ms=i, error=True,
               events=[exception_event(JAVA)])
    f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id(),
           events=[exception_event(NODE), ("log", {"exception.stacktrace": JAVA})])
    settings.TRUSTRANK_TRACE_STACK_FRAMES = 3
    job = IngestJob.objects.create(team=team, kind="traces", digest="-",
                                   params={"encoding": "protobuf"})
    traces_load(job=job, payload=f.body(), progress=lambda **_: None)
    rows = {
        (b.service.name, b.kind, b.name): b.spans
        for b in LibraryBucket.objects.filter(kind__endswith="_frame").select_related("service")
    }
    # The setting bounds the frames read per trace: the first three frame lines.
    assert rows == {
        ("gateway", "java_frame", "org.apache.logging.log4j.core.Logger.log"): 3,
        ("gateway", "java_frame", "org.apache.logging.log4j.spi.AbstractLogger.logMessage"): 3,
        ("web", "js_frame", "express/lib/router/index.js"): 1,
        ("web", "js_frame", "express/lib/router/layer.js"): 1,
        ("web", "js_frame", "body-parser/lib/read.js"): 1,
    }
