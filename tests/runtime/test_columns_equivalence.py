"""The columnar span path gives exactly what the span-by-span reference gives.

`spans_from_protobuf` (numpy on the wire layout, cached attribute tails) against
`spans_from_request` on the decoded request, and `engine_columns.aggregate` against
`engine.aggregate`, on SDK-built exports that exercise every branch: calls matched inside a
request and across requests, databases, settled and unknown external peers, entries from
public, private, loopback and unrecorded addresses, lost trace contexts, exception stack
frames, sampled names, unusable spans and resources, odd wire layouts and repeated ids.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.runtime.helpers import SpanFactory, nezha_requests, nezha_spans, shop
from trustrank.parsers.otlp import (
    PROTOBUF,
    OtlpDecodeError,
    SpanWindow,
    otlp_decode,
    spans_from_request,
)
from trustrank.parsers.otlp_span_columns import spans_from_protobuf, spans_usable_protobuf
from trustrank.parsers.otlp_wire import _field_bytes
from trustrank.runtime import engine, engine_columns, engine_histograms


def requests_of(f: SpanFactory) -> list[bytes]:
    by_service = f.by_service()
    return [f.body(), *(f.body(spans) for spans in by_service.values())]


def nezha_bodies() -> list[bytes]:
    spans = nezha_spans(limit_traces=40)
    return list(nezha_requests(spans).values())


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("rate", [1.0, 0.3, 0.0])
def test_columnar_rows_equal_the_reference(seed, rate):
    for body in [*requests_of(shop(seed)), *nezha_bodies()]:
        expected = spans_from_request(ExportTraceServiceRequest.FromString(body),
                                      name_sample_rate=rate)
        assert spans_from_protobuf(body, name_sample_rate=rate) == expected


def _mangled_request() -> ExportTraceServiceRequest:
    f = shop(4, traces=10)
    request = f.request()
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = bytes(16)  # all zero: rejected
    spans[1].end_time_unix_nano = spans[1].start_time_unix_nano - 1  # ends before it starts
    spans[2].name = "é" * 90  # not ASCII, 180 bytes: another name length encoding
    spans[3].trace_state = "vendor=1"  # a field the usual layout has not
    spans[4].kind = 0  # no kind field on the wire
    spans[5].name = "x" * 300  # too long: rejected
    for kv in request.resource_spans[1].resource.attributes:
        if kv.key == "service.name":
            kv.value.string_value = "a\x00b"  # a service name PostgreSQL cannot store
    return request


def test_columnar_rows_equal_the_reference_for_odd_and_bad_spans():
    request = _mangled_request()
    body = request.SerializeToString()
    expected = spans_from_request(ExportTraceServiceRequest.FromString(body))
    assert expected.rejected_spans > 3
    assert spans_from_protobuf(body) == expected
    window = SpanWindow(not_before_ns=1, not_after_ns=2**63)
    checked = otlp_decode(body, encoding=PROTOBUF, window=window)
    assert (checked.total_spans, checked.rejected_spans) == (
        expected.total_spans, expected.rejected_spans)
    assert spans_usable_protobuf(body) is None


@pytest.mark.parametrize("change, usable", [
    (lambda span: setattr(span, "name", "结账/购物车"), True),  # not ASCII, in the layout
    (lambda span: setattr(span, "name", "Cart\x00Get"), False),  # NUL: PostgreSQL refuses it
    (lambda span: setattr(span, "span_id", bytes(8)), False),  # an all-zero span id
    (lambda span: setattr(span, "trace_id", bytes(16)), False),  # an all-zero trace id
])
def test_a_scope_in_the_usual_layout_with_an_odd_span_equals_the_reference(change, usable):
    """The layout's checks over whole arrays (ids, names' bytes) decide as the span by span
    reference does, for the receiver's count too."""
    request = shop(8, traces=10).request()
    for index in (3, 7):
        change(request.resource_spans[0].scope_spans[0].spans[index])
    body = request.SerializeToString()
    for rate in (1.0, 0.01):
        expected = spans_from_request(ExportTraceServiceRequest.FromString(body),
                                      name_sample_rate=rate)
        assert spans_from_protobuf(body, name_sample_rate=rate) == expected
    assert expected.rejected_spans == (0 if usable else 2)
    total = sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
    assert spans_usable_protobuf(body) == (total if usable else None)
    names = {row[6] for resource in spans_from_protobuf(body).resources
             for scope in resource.scopes for row in scope.spans}
    assert ("结账/购物车" in names) == usable


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_columnar_reader_and_the_receivers_count_equal_the_reference_on_mutated_bytes(seed):
    """Bytes flipped anywhere in SDK-built exports: whatever still decodes is read by the
    columnar path as by the reference, and the receiver counts what the worker keeps (a
    tail that repeated a head field as its default once made them differ)."""
    rng = random.Random(seed)
    bases = [shop(s, traces=8).body() for s in range(1, 6)]
    decoded = 0
    for _ in range(4000):
        body = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(len(body))] = rng.randrange(256)
        try:
            request = ExportTraceServiceRequest.FromString(bytes(body))
        except DecodeError:
            continue
        decoded += 1
        expected = spans_from_request(request)
        assert spans_from_protobuf(bytes(body)) == expected
        try:
            counted = otlp_decode(bytes(body), encoding=PROTOBUF)
        except OtlpDecodeError:
            continue  # a string the real schema refuses: the receiver answers 400
        assert (counted.total_spans, counted.rejected_spans) == (
            expected.total_spans, expected.rejected_spans)
    assert decoded > 1000


def _wire(request: ExportTraceServiceRequest, extra: bytes) -> bytes:
    """The request's wire bytes with `extra` appended to its first span's message."""
    out = b""
    for r_index, resource in enumerate(request.resource_spans):
        resource_raw = _field_bytes(1, resource.resource.SerializeToString())
        for s_index, scope in enumerate(resource.scope_spans):
            scope_raw = _field_bytes(1, scope.scope.SerializeToString())
            for index, span in enumerate(scope.spans):
                raw = span.SerializeToString()
                if (r_index, s_index, index) == (0, 0, 0):
                    raw += extra
                scope_raw += _field_bytes(2, raw)
            resource_raw += _field_bytes(2, scope_raw)
        out += _field_bytes(1, resource_raw)
    return out


@pytest.mark.parametrize("extra", [
    b"\x2a\x07renamed",  # the name again after the tail: protobuf keeps the last one
    b"\x0a\x10" + bytes(range(1, 17)),  # the trace id again
    b"\x30\x03",  # the kind again
    b"\x0a\x00",  # the trace id again, empty: the span is rejected
    b"\x12\x00",  # the span id again, empty
    b"\x30\x00",  # the kind again, as its default
])
def test_fields_out_of_order_or_repeated_take_the_reference_path(extra):
    request = shop(5, traces=4).request()
    body = _wire(request, extra)
    assert body != request.SerializeToString()
    expected = spans_from_request(ExportTraceServiceRequest.FromString(body))
    assert spans_from_protobuf(body) == expected
    # The receiver counts what the worker will keep.
    decoded = otlp_decode(body, encoding=PROTOBUF)
    assert (decoded.total_spans, decoded.rejected_spans) == (
        expected.total_spans, expected.rejected_spans)


def test_good_exports_are_counted_without_the_span_by_span_check():
    body = shop(6).body()
    decoded = otlp_decode(body, encoding=PROTOBUF)
    assert decoded.rejected_spans == 0
    assert spans_usable_protobuf(body) == decoded.total_spans > 0


def _aggregates(body: bytes, **kwargs):
    resources = spans_from_protobuf(body, name_sample_rate=0.5).resources
    return (engine.aggregate(resources, sample_rate=0.5, **kwargs),
            engine_columns.aggregate(resources, sample_rate=0.5, **kwargs))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columnar_aggregate_equals_the_reference(seed):
    known = {("production", "payments"): ("service", "", "payments"),
             ("production", "catalog"): ("service", "", "catalog")}
    externals = {("production", "api.stripe.com")}
    for body in [*requests_of(shop(seed)), *nezha_bodies()]:
        for kwargs in ({}, {"known_peers": known, "known_externals": externals}):
            reference, columnar = _aggregates(body, **kwargs)
            assert columnar == reference
    reference, _ = _aggregates(shop(seed).body(), known_peers=known, known_externals=externals)
    # The data took the branches it is meant to cover.
    assert reference.broken and reference.ingress and reference.open_clients
    assert reference.aliases and reference.samples
    assert any(key[3] == "java_frame" for key in reference.libraries)
    assert any(key[3] == "origin" for key in reference.libraries)
    assert any(callee[0] == "external" for _, _, callee, _ in reference.edges)


def test_the_known_peers_of_the_batchs_peer_keys_give_the_whole_graphs_aggregate():
    """A trace job reads only the known peers of `engine.peer_keys` (not a team's whole
    graph): every lookup the aggregation makes must be among them."""
    for seed in (1, 2, 3):
        for body in [*requests_of(shop(seed)), *nezha_bodies()]:
            resources = spans_from_protobuf(body, name_sample_rate=0.5).resources
            # Every peer any span names (servers' client addresses too), its first label,
            # and names of nothing here: half known as services, half as externals.
            words = {"unrelated", "other.example.com"}
            for resource in resources:
                for scope in resource.scopes:
                    for row in scope.spans:
                        peer = engine.peer_normalize(row[7])
                        words |= {peer, peer.split(".", 1)[0]}
            envs = {engine.resource_environment(r.attributes) for r in resources}
            keys = sorted((env, word) for env in envs for word in words if word)
            known = {key: ("service", "", key[1]) for key in keys[::2]}
            externals = set(keys[1::2])
            wanted = engine.peer_keys(resources)
            narrowed = {key: value for key, value in known.items() if key in wanted}
            for aggregate in (engine.aggregate, engine_columns.aggregate):
                whole = aggregate(resources, sample_rate=0.5, known_peers=known,
                                  known_externals=externals)
                assert aggregate(
                    resources, sample_rate=0.5, known_peers=narrowed,
                    known_externals=externals & wanted,
                ) == whole
            assert len(narrowed) < len(known)


def test_columnar_aggregate_with_repeated_span_ids_equals_the_reference():
    f = shop(7, traces=6)
    f.spans.extend(f.spans[:5])  # an exporter that sent some spans twice
    reference, columnar = _aggregates(f.body())
    assert columnar == reference


def test_histogram_indexes_match_the_reference_everywhere():
    values = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 1023, 1024, 1025, 2**31 - 1, 2**31,
              2**40 + 12345, 2**53 - 1, 2**53, 2**53 + 1, 2**62, 2**63 - 1]
    values += [(1 << b) + d for b in range(2, 63) for d in (-1, 0, 1)]
    got = engine_columns.hist_indexes(np.array(values, dtype=np.int64)).tolist()
    assert got == [engine_histograms.hist_index(v) for v in values]
