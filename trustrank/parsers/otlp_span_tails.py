"""What the undecoded parts of a span mean to the aggregation (no ORM).

The columnar span path (`otlp_span_columns`) decodes requests with a shadow schema whose
Span keeps its attributes, events, links and status as undecoded `bytes` (the same wire
type, so every valid request decodes). Spans of one operation repeat those bytes exactly
(a Collector sends the same attribute lists request after request), so what they mean is
worked out once per distinct value and kept across requests, in bounded caches: an
attribute list (the tuple of its KeyValue bytes) gives the peer names, TLS, mTLS and
library evidence `spans_from_request` reads from it; a span's *tail* (everything after its
end time, in the usual layout) gives all that, its error status and the library frames
of its `exception` events. Each distinct value is decoded with the real message types,
so a body the real decoder refuses raises `OtlpDecodeError` here too.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from trustrank.parsers.otlp_checks import OtlpDecodeError
from trustrank.parsers.otlp_rows import _exception_frames, attribute_facts
from trustrank.parsers.otlp_shadow import shadow_messages
from trustrank.parsers.otlp_wire import _fields

_SHADOW_PACKAGE = "trustrank.shadow.otlp.trace"
_RAW_SPAN_FIELDS = {"attributes", "events", "links", "status"}


def _raw_span_field(message: str, field: str) -> bool:
    """A scope's spans, and a Span's attributes, events, links and status."""
    return (message == "ScopeSpans" and field == "spans") or (
        message == "Span" and field in _RAW_SPAN_FIELDS)


_ShadowRequest, _ShadowSpan = shadow_messages(
    trace_pb2, package=_SHADOW_PACKAGE, file_name="trustrank/shadow/otlp_trace.proto",
    raw=_raw_span_field, request_field="resource_spans", request_type="ResourceSpans",
    names=("Request", "Span"),
)

_KIND = attrgetter("kind")
_ATTRIBUTES = attrgetter("attributes")
_EVENTS = attrgetter("events")
_LINKS = attrgetter("links")
_STATUS = attrgetter("status")
_SERVER_KIND, _CONSUMER_KIND = 2, 5
_STATUS_ERROR = 2

# What one attribute list means to the aggregation, as `spans_from_request` reads it:
# (the caller's address for a server span, the peer name for a client span, db.system set,
# TLS, mTLS, library evidence or None).
_AttributeInfo = tuple[str, str, bool, bool, bool, "tuple[tuple[str, str], ...] | None"]
_CACHE_MAX = 50_000


class _AttributeInfos(dict[tuple[bytes, ...], _AttributeInfo]):
    """Attribute list (its KeyValue bytes) -> what it means; kept across requests and
    bounded (cleared when full). Peer names and library tuples are shared by every span
    with the same list, which keeps the rows small."""

    def __missing__(self, key: tuple[bytes, ...]) -> _AttributeInfo:
        if len(self) >= _CACHE_MAX:
            self.clear()
        info = self[key] = _attribute_info(key)
        return info


_SINGLE_LIBRARY: dict[tuple[int, str], tuple[tuple[str, str], ...]] = {}


def _attribute_info(raw: tuple[bytes, ...]) -> _AttributeInfo:
    try:
        kvs = [KeyValue.FromString(item) for item in raw]
    except DecodeError as exc:
        raise OtlpDecodeError(
            f"the body is not a protobuf ExportTraceServiceRequest: {exc}"
        ) from exc
    if len(_SINGLE_LIBRARY) >= _CACHE_MAX:
        _SINGLE_LIBRARY.clear()
    client, peer_service, address, db, tls, mtls, libraries = attribute_facts(
        kvs, _SINGLE_LIBRARY)
    return (client, peer_service or address or db, db != "", tls, mtls, libraries)


_INFOS = _AttributeInfos()


class _StatusErrors(dict[bytes, bool]):
    def __missing__(self, key: bytes) -> bool:
        try:
            status = Status.FromString(key)
        except DecodeError as exc:
            raise OtlpDecodeError(
                f"the body is not a protobuf ExportTraceServiceRequest: {exc}"
            ) from exc
        error = self[key] = status.code == _STATUS_ERROR
        if len(self) > _CACHE_MAX:
            self.clear()
        return error


_ERRORS = _StatusErrors()


def _decoded(message_type: type[Message], raw: bytes) -> Any:
    try:
        return message_type.FromString(raw)
    except DecodeError as exc:
        raise OtlpDecodeError(
            f"the body is not a protobuf ExportTraceServiceRequest: {exc}"
        ) from exc


_ID_TAIL = attrgetter("trace_id", "span_id", "parent_span_id", "name", "kind",
                      "start_time_unix_nano", "end_time_unix_nano", "trace_state")


# What a tail means: the peer of a span of each kind 0..5 (`spans_from_request`: the
# caller's address for server and consumer spans, else the peer name), db.system set, TLS,
# mTLS, the libraries (attributes, then the library frames of its `exception` events),
# error; None when the tail sets a field of the head again (the last one counts).
_TailInfo = tuple[
    str, str, str, str, str, str, bool, bool, bool, "tuple[tuple[str, str], ...] | None", bool
]
_KIND_MAX = 5


class _TailInfos(dict[bytes, "_TailInfo | None"]):
    """Tail -> what it means, for one pair of stack frame bounds; kept across requests,
    bounded (cleared when full)."""

    def __init__(self, max_stack_frames: int, max_span_frames: int) -> None:
        super().__init__()
        self.bounds = (max_stack_frames, max_span_frames)

    def __missing__(self, tail: bytes) -> _TailInfo | None:
        if len(self) >= _CACHE_MAX:
            self.clear()
        info = self[tail] = _tail_info(tail, *self.bounds)
        return info


# The head's fields: trace id, span id, trace state, parent span id, name, kind, times.
_HEAD_FIELDS = frozenset(range(1, 9))


def _head_again(tail: bytes) -> bool:
    """Whether a tail sets a field of the head again (the last one counts), even to its
    default value, which the decoded tail cannot show."""
    try:
        return any(number in _HEAD_FIELDS for number, _, _, _ in _fields(tail))
    except OtlpDecodeError:  # a wire type the walk does not know: read span by span
        return True


def _tail_info(tail: bytes, max_stack_frames: int, max_span_frames: int) -> _TailInfo | None:
    span = _decoded(_ShadowSpan, tail)
    if any(_ID_TAIL(span)) or _head_again(tail):
        return None
    client, peer, is_db, tls, mtls, libraries = _INFOS[tuple(span.attributes)]
    if max_stack_frames > 0 and max_span_frames > 0 and span.events:
        frames = _exception_frames(
            [_decoded(Span.Event, raw) for raw in span.events], {}, max_stack_frames,
            max_span_frames,
        )
        if frames:
            libraries = frames if libraries is None else (*libraries, *frames)
    for raw in span.links:
        _decoded(Span.Link, raw)
    return (peer, peer, client, peer, peer, client, is_db, tls, mtls, libraries,
            _ERRORS[span.status])


_TAILS: dict[tuple[int, int], _TailInfos] = {}


def _tails(max_stack_frames: int, max_span_frames: int) -> _TailInfos:
    bounds = (max_stack_frames, max_span_frames)
    tails = _TAILS.get(bounds)
    if tails is None:
        tails = _TAILS[bounds] = _TailInfos(*bounds)
    return tails
