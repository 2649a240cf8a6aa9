"""The pure parts: OTLP decoding and splitting, and the aggregation engine."""

from __future__ import annotations

import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import SpanKind

from tests.runtime.helpers import DATA, SpanFactory, nezha_requests, nezha_spans
from trustrank.parsers.otlp import (
    JSON,
    PROTOBUF,
    OtlpDecodeError,
    otlp_decode,
    otlp_validate,
    protobuf_split,
    spans_from_request,
)
from trustrank.runtime import engine, engine_histograms


def test_official_json_example_decodes_with_uppercase_hex_ids():
    decoded = otlp_decode((DATA / "opentelemetry-proto_examples_trace.json").read_bytes(),
                          encoding=JSON)
    span = decoded.request.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == "5b8efff798038103d269b633813fc60c"
    assert span.parent_span_id.hex() == "eee19b7ec3c1b173"
    assert span.kind == 2
    assert span.start_time_unix_nano == 1544712660000000000


def test_json_unknown_fields_are_ignored_and_numbers_accepted():
    document = orjson.loads((DATA / "opentelemetry-proto_examples_trace.json").read_bytes())
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["startTimeUnixNano"] = 1544712660000000000  # a number, not a string
    span["someFutureField"] = {"x": 1}
    decoded = otlp_decode(orjson.dumps(document), encoding=JSON)
    assert decoded.accepted_spans == 1


def test_json_that_is_not_otlp_is_a_decode_error():
    with pytest.raises(OtlpDecodeError):
        otlp_decode(b"[1, 2]", encoding=JSON)
    with pytest.raises(OtlpDecodeError):
        otlp_decode(b'{"resourceSpans": 5}', encoding=JSON)


def test_protobuf_split_keeps_every_span_with_its_resource_and_scope():
    spans = nezha_spans(limit_traces=10)
    body = b"".join(nezha_requests(spans).values())  # concatenated requests merge
    whole = ExportTraceServiceRequest.FromString(body)
    total = sum(len(ss.spans) for rs in whole.resource_spans for ss in rs.scope_spans)
    for max_bytes in (10**9, 20_000, 600, 1):
        seen = []
        for part in protobuf_split(body, max_bytes=max_bytes):
            request = ExportTraceServiceRequest.FromString(part)
            for rs in request.resource_spans:
                assert rs.resource.attributes  # service.name travels with every part
                for ss in rs.scope_spans:
                    assert ss.scope.name
                    seen.extend(s.span_id for s in ss.spans)
        assert len(seen) == total == len(set(seen))


def test_truncated_protobuf_is_a_decode_error():
    body = SpanFactory().body()
    f = SpanFactory()
    f.span(service="a", name="x", kind=SpanKind.SERVER, trace_id=f.trace_id())
    body = f.body()
    with pytest.raises(OtlpDecodeError):
        list(protobuf_split(body[:-3], max_bytes=10))
    with pytest.raises(OtlpDecodeError):
        otlp_decode(body[:-3], encoding=PROTOBUF)


def test_large_body_is_validated_part_by_part():
    f = SpanFactory()
    for _ in range(50):
        f.span(service="a", name="x", kind=SpanKind.SERVER, trace_id=f.trace_id())
    request = f.request()
    request.resource_spans[0].scope_spans[0].spans[3].span_id = b"\0" * 8
    body = request.SerializeToString()
    from trustrank.parsers import otlp

    decoded = otlp_validate(body, encoding=PROTOBUF)
    assert (decoded.total_spans, decoded.rejected_spans) == (50, 1)
    parts = list(otlp.otlp_chunks(body, encoding=PROTOBUF, max_bytes=500))
    assert len(parts) > 1
    assert sum(p.total_spans for p in parts) == 50
    assert sum(p.rejected_spans for p in parts) == 1


def test_histogram_buckets_are_contiguous_and_bounded():
    previous = -1
    for us in range(0, 5000):
        idx = engine_histograms.hist_index(us)
        low, high = engine_histograms.hist_bounds_us(idx)
        assert low <= us < high
        assert idx in (previous, previous + 1)
        previous = idx
    assert engine_histograms.hist_index(10**15) == engine_histograms.HIST_BUCKETS - 1


def test_percentiles_over_merged_histograms():
    a = {engine_histograms.hist_index(1000): 90}  # 1 ms
    b = {engine_histograms.hist_index(100_000): 10}  # 100 ms
    merged = engine_histograms.hist_merge([engine_histograms.hist_to_list(a), engine_histograms.hist_to_list(b)])
    pct = engine_histograms.hist_percentiles(merged)
    assert pct[0.5] == pytest.approx(1.0, rel=0.15)
    assert pct[0.95] == pytest.approx(100.0, rel=0.15)
    assert engine_histograms.hist_percentiles([])[0.5] is None


def test_window_parse():
    from datetime import timedelta

    from trustrank.runtime.windows import window_parse

    assert window_parse("15m") == timedelta(minutes=15)
    assert window_parse(None) == timedelta(hours=1)
    assert window_parse("all") is None
    for bad in ("1w", "-1h", "0m", "9999d", "soon"):
        with pytest.raises(ValueError):
            window_parse(bad)


@pytest.mark.parametrize(
    ("raw", "peer"),
    [("CartService:7070", "cartservice"), ("https://api.stripe.com/v1", "api.stripe.com"),
     ("[::1]:8080", "[::1]"), ("10.0.0.7", "10.0.0.7"), ("redis", "redis")],
)
def test_peer_normalize(raw, peer):
    assert engine.peer_normalize(raw) == peer


def test_peer_lookup_tries_the_first_dns_label():
    known = {("prod", "cart"): ("service", "", "cart")}
    assert engine.peer_lookup(known, "prod", "cart.shop.svc.cluster.local") == known[
        ("prod", "cart")]
    assert engine.peer_lookup(known, "prod", "10.0.0.1") is None
    assert engine.peer_lookup(known, "staging", "cart") is None


def test_aggregate_edges_ingress_libraries_and_rejects():
    f = SpanFactory(env="prod")
    t = f.trace_id()
    root = f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t)
    call = f.span(service="web", name="call", kind=SpanKind.CLIENT, trace_id=t, parent=root,
                  attributes={"peer.service": "api"})
    f.span(service="api", name="serve", kind=SpanKind.SERVER, trace_id=t, parent=call,
           error=True, attributes={"rpc.system": "grpc", "messaging.system": "kafka"})
    f.span(service="api", name="q", kind=SpanKind.CLIENT, trace_id=t, parent=call,
           attributes={"db.system": "redis"})
    request = f.request()
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.trace_id = b"\1" * 16  # no span id: rejected
    bad.start_time_unix_nano = 1
    batch = spans_from_request(request)
    agg = engine.aggregate(batch.resources)
    assert (agg.spans, batch.rejected_spans) == (4, 1)
    web, api = ("service", "", "web"), ("service", "", "api")
    edges = {(c, d): s for (_e, c, d, _b), s in agg.edges.items()}
    assert edges[(engine.INTERNET_NODE, web)].calls == 1
    assert (edges[(web, api)].calls, edges[(web, api)].errors) == (1, 1)
    assert edges[(api, ("external", "", "redis"))].calls == 1
    assert agg.ingress == {("prod", web)}
    kinds = {(k[1][2], k[3], k[4]) for k in agg.libraries}
    assert {("api", "rpc", "grpc"), ("api", "messaging", "kafka"), ("api", "db", "redis")} <= kinds
    assert not agg.pending and not agg.open_clients


def test_aggregate_is_deterministic():
    f = SpanFactory()
    for _ in range(20):
        t = f.trace_id()
        root = f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t)
        f.span(service="web", name="call", kind=SpanKind.CLIENT, trace_id=t, parent=root,
               attributes={"server.address": "somewhere.example"})
    request = f.request()
    resources = spans_from_request(request).resources
    a, b = engine.aggregate(resources), engine.aggregate(resources)
    assert a.edges == b.edges and a.open_clients == b.open_clients
    # A peer nobody claimed yet is held for matching, not counted as external.
    assert len(a.open_clients) == 20
    c = engine.aggregate(resources, known_externals={("production", "somewhere.example")})
    assert not c.open_clients
    assert sum(s.calls for (_e, _c, d, _b), s in c.edges.items() if d[0] == "external") == 20
