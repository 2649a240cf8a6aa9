"""OTLP/HTTP trace bodies -> plain span rows (bytes in, frozen dataclasses out; no ORM).

`otlp_span_batches` is what the aggregation reads: resources with their attributes, scopes
and one plain tuple per usable span (`SpanRow`); protobuf types never leave this module
except through `otlp_decode`/`otlp_validate`, which the receiver uses to count and answer.

Both encodings the OTLP/HTTP specification allows are read here:

- `application/x-protobuf`: the binary ExportTraceServiceRequest, decoded by the `upb`
  protobuf backend (a C parser; about a million spans a second).
- `application/json`: the OTLP JSON mapping, which differs from the proto3 JSON mapping in
  one way that matters: trace, span and parent span ids are hex strings, not base64. Enum
  values may be integers or names and 64-bit integers strings or numbers; protobuf's
  `ParseDict` already accepts both. Unknown fields are ignored, as the specification asks.

A body that cannot be decoded at all raises `OtlpDecodeError` (HTTP 400, job failed). Spans
that decode but cannot be used (ids of the wrong length, an end before the start) are
counted as rejected and skipped, so one bad span or one bad resource never rejects the rest.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans as ResourceSpansMessage

from trustrank.parsers.stackframes import stack_frames

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ENCODINGS = (PROTOBUF, JSON)

_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
# Span message fields that hold ids in hex under the OTLP JSON mapping.
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class OtlpDecodeError(ValueError):
    """The body is not an ExportTraceServiceRequest in the declared encoding."""


@dataclass(frozen=True)
class Decoded:
    """A decoded request and what was wrong with the spans that cannot be used."""

    request: ExportTraceServiceRequest
    total_spans: int
    rejected_spans: int
    problems: tuple[str, ...]

    @property
    def accepted_spans(self) -> int:
        return self.total_spans - self.rejected_spans

    def message(self) -> str:
        if not self.rejected_spans:
            return ""
        shown = "; ".join(self.problems[:5])
        more = f" (and {len(self.problems) - 5} more problems)" if len(self.problems) > 5 else ""
        return f"{self.rejected_spans} of {self.total_spans} spans rejected: {shown}{more}"


def media_type(content_type: str) -> str:
    """`application/json; charset=utf-8` -> `application/json`."""
    return content_type.split(";", 1)[0].strip().lower()


@dataclass(frozen=True)
class SpanWindow:
    """The span times accepted, in Unix nanoseconds: a span ending after `not_after_ns`
    (a clock far ahead, or 2^64-1) or starting before `not_before_ns` would move a
    service's first/last seen to a time that never happened."""

    not_before_ns: int
    not_after_ns: int

    @classmethod
    def around(cls, *, now_ns: int, max_future_ns: int, max_age_ns: int) -> SpanWindow:
        return cls(not_before_ns=max(1, now_ns - max_age_ns), not_after_ns=now_ns + max_future_ns)


_ALL_TIMES = SpanWindow(not_before_ns=1, not_after_ns=2**64 - 1)

# Names are stored in columns of these lengths; a longer name is rejected, not cut (two
# services differing after the limit would silently become one).
SERVICE_NAME_MAX = 200
SERVICE_NAMESPACE_MAX = 120
ENVIRONMENT_MAX = 120
SPAN_NAME_MAX = 200
# Resource attributes that name the node a span belongs to, with their limits.
_RESOURCE_NAMES = (
    ("service.name", SERVICE_NAME_MAX),
    ("service.namespace", SERVICE_NAMESPACE_MAX),
    ("deployment.environment.name", ENVIRONMENT_MAX),
    ("deployment.environment", ENVIRONMENT_MAX),
)


def resource_problem(attributes: Any) -> str | None:
    """Why no span of a resource can be used (its service or environment name holds a NUL or
    is too long), or None. `attributes`: the resource's KeyValue list."""
    for kv in attributes:
        for key, limit in _RESOURCE_NAMES:
            if kv.key == key:
                value = kv.value.string_value
                if "\x00" in value:
                    return f"resource attribute {key} contains a NUL character"
                if len(value) > limit:
                    return f"resource attribute {key} is longer than {limit} characters"
    return None


def span_problem(span: object, *, window: SpanWindow = _ALL_TIMES) -> str | None:
    """Why a decoded span cannot be used, or None. Shared by the receiver and the worker so
    both count exactly the same spans as rejected."""
    trace_id = span.trace_id  # type: ignore[attr-defined]
    span_id = span.span_id  # type: ignore[attr-defined]
    if len(trace_id) != 16 or trace_id == _ZERO_TRACE:
        return "traceId must be 16 bytes and not all zero"
    if len(span_id) != 8 or span_id == _ZERO_SPAN:
        return "spanId must be 8 bytes and not all zero"
    parent = span.parent_span_id  # type: ignore[attr-defined]
    if parent and len(parent) != 8:
        return "parentSpanId must be empty or 8 bytes"
    start = span.start_time_unix_nano  # type: ignore[attr-defined]
    end = span.end_time_unix_nano  # type: ignore[attr-defined]
    if not start or end < start:
        return "startTimeUnixNano must be set and not after endTimeUnixNano"
    if start < window.not_before_ns or end > window.not_after_ns:
        return "the span's times are outside the accepted window (too old or in the future)"
    name = span.name  # type: ignore[attr-defined]
    if "\x00" in name:
        return "the span name contains a NUL character"
    if len(name) > SPAN_NAME_MAX:
        return f"the span name is longer than {SPAN_NAME_MAX} characters"
    return None


# --- plain span data for the aggregation ---------------------------------------------------

# One usable span, as a plain tuple rather than an object: at a hundred thousand spans a
# second per core, building one dataclass instance per span would cost more than the rest
# of the extraction. Fields, in order:
#   span_key (trace_id + span_id, 24 bytes: the key spans are matched by, one object
#   instead of two), parent_span_id (b"" or 8 bytes),
#   start_ns, end_ns, kind (OTLP SpanKind number), error (status code ERROR),
#   name (None outside the name sample, see spans_from_request),
#   peer (client and producer spans: the un-normalised peer name, peer.service, else
#   server.address, else db.system; server and consumer spans: the caller's address,
#   client.address else network.peer.address, which tells outside callers from local ones),
#   is_db (db.system set), tls, mtls,
#   libraries (((kind, name), ...) evidence of libraries in use, or None): db, messaging,
#   rpc and code (code.namespace) from the attributes, then java_frame, python_frame and
#   js_frame from the stack traces of the span's `exception` events (parsers.stackframes).
# Only tuples of atoms: the cyclic garbage collector stops tracking those after one pass.
SpanRow = tuple[
    bytes, bytes, int, int, int, bool, "str | None", str, bool, bool, bool,
    "tuple[tuple[str, str], ...] | None",
]

_STATUS_ERROR = 2
# Span attribute keys the aggregation needs (OpenTelemetry semantic conventions, old and
# new names), mapped to a small code for the hot loop.
_A_PEER_SERVICE, _A_SERVER_ADDRESS, _A_DB, _A_MESSAGING, _A_RPC = 1, 2, 3, 4, 5
_A_CODE_NS, _A_CODE_FN, _A_SCHEME, _A_TLS, _A_MTLS = 6, 7, 8, 9, 10
_A_CLIENT = 11
_SERVER_KINDS = (2, 5)  # SPAN_KIND_SERVER, SPAN_KIND_CONSUMER
_SPAN_KEYS: dict[str, int] = {
    # The caller's address, on the server side of a call (newest convention first wins).
    "client.address": _A_CLIENT,
    "network.peer.address": _A_CLIENT,
    "net.sock.peer.addr": _A_CLIENT,
    "net.peer.ip": _A_CLIENT,
    "peer.service": _A_PEER_SERVICE,
    "server.address": _A_SERVER_ADDRESS,
    "net.peer.name": _A_SERVER_ADDRESS,
    "db.system": _A_DB,
    "db.system.name": _A_DB,
    "messaging.system": _A_MESSAGING,
    "rpc.system": _A_RPC,
    "code.namespace": _A_CODE_NS,
    "code.function": _A_CODE_FN,
    "code.function.name": _A_CODE_FN,
    "url.scheme": _A_SCHEME,
    "http.scheme": _A_SCHEME,
    "tls.established": _A_TLS,
    "tls.protocol.version": _A_TLS,
    "tls.protocol.name": _A_TLS,
    "tls.cipher": _A_TLS,
    "tls.server.subject": _A_TLS,
    "tls.client.subject": _A_MTLS,
    "tls.client.certificate": _A_MTLS,
    "tls.client.certificate_chain": _A_MTLS,
    "tls.client.hash.sha256": _A_MTLS,
}
_TLS_SCHEMES = frozenset({"https", "grpcs", "wss"})
# Bounds on the stack-frame evidence of one span (see spans_from_request); the worker
# passes TRUSTRANK_TRACE_STACK_FRAMES and TRUSTRANK_TRACE_SPAN_FRAMES.
STACK_FRAMES_DEFAULT = 20
SPAN_FRAMES_DEFAULT = 40
# Distinct stack traces whose frames are remembered per request: the same few traces
# repeat across thousands of spans (one failing call path), so each is parsed once.
_STACK_CACHE_MAX = 1024


@dataclass(frozen=True, slots=True)
class ScopeSpans:
    """The usable spans of one instrumentation scope."""

    name: str
    version: str
    spans: tuple[SpanRow, ...]


@dataclass(frozen=True, slots=True)
class ResourceSpans:
    """One resource (a service instance): its attributes as strings, and its scopes."""

    attributes: dict[str, str]
    scopes: tuple[ScopeSpans, ...]


@dataclass(frozen=True)
class SpanBatch:
    """One part of an export request as plain data, and what was rejected in it."""

    resources: tuple[ResourceSpans, ...]
    total_spans: int
    rejected_spans: int
    problems: tuple[str, ...]

    def message(self) -> str:
        if not self.rejected_spans:
            return ""
        shown = "; ".join(self.problems[:5])
        more = f" (and {len(self.problems) - 5} more problems)" if len(self.problems) > 5 else ""
        return f"{self.rejected_spans} of {self.total_spans} spans rejected: {shown}{more}"


def any_value_text(value: Any) -> str:
    """An AnyValue as text (strings, numbers, booleans); "" for arrays, maps and bytes."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return str(value.string_value)
    if which in ("int_value", "double_value", "bool_value"):
        return str(getattr(value, which))
    return ""


def _library(code: int, value: str) -> tuple[str, str] | None:
    if code == _A_DB:
        return ("db", value[:200])
    if code == _A_MESSAGING:
        return ("messaging", value[:200])
    if code == _A_RPC:
        return ("rpc", value[:200])
    if code == _A_CODE_NS:
        return ("code", value[:200])
    if "." in value:  # code.function(.name), fully qualified: its module is the evidence
        return ("code", value.rsplit(".", 1)[0][:200])
    return None


def _exception_frames(
    events: Any,
    cache: dict[str, tuple[tuple[str, str], ...]],
    max_stack_frames: int,
    max_span_frames: int,
) -> tuple[tuple[str, str], ...]:
    """The library frames named by a span's `exception` events, each once, at most
    `max_span_frames`; `cache` maps stack trace text to its frames within one request."""
    found: dict[tuple[str, str], None] = {}
    for event in events:
        if event.name != "exception":
            continue
        for kv in event.attributes:
            if kv.key != "exception.stacktrace":
                continue
            text = kv.value.string_value
            frames = cache.get(text)
            if frames is None:
                # A NUL cannot be stored in PostgreSQL text; frame names never hold one.
                frames = stack_frames(text.replace("\x00", ""), max_frames=max_stack_frames)
                if len(cache) < _STACK_CACHE_MAX:
                    cache[text] = frames
            for frame in frames:
                found[frame] = None
            break
        if len(found) >= max_span_frames:
            break
    return tuple(found)[:max_span_frames]


def sample_threshold(rate: float) -> bytes | None:
    """Traces whose id's last 8 bytes sort below this are in a `rate` sample (W3C trace ids
    are random there), None for no sample. Shared with the aggregation's trace samples."""
    if rate <= 0:
        return None
    if rate >= 1:
        return b"\xff" * 9
    return int(rate * (1 << 64)).to_bytes(8, "big")


def spans_from_request(
    request: ExportTraceServiceRequest,
    *,
    name_sample_rate: float = 1.0,
    rejected: int = 0,
    total: int | None = None,
    problems: tuple[str, ...] = (),
    window: SpanWindow = _ALL_TIMES,
    max_stack_frames: int = STACK_FRAMES_DEFAULT,
    max_span_frames: int = SPAN_FRAMES_DEFAULT,
) -> SpanBatch:
    """Read a decoded request into plain rows, dropping (and counting) unusable spans.

    The one loop over every span of an upload: fields are read once into locals and the
    attributes the aggregation needs are picked out by a dict lookup per attribute.
    Spans with events are the exception: the `exception.stacktrace` of each `exception`
    event is read for library frames, at most `max_stack_frames` frames per trace and
    `max_span_frames` distinct frames per span (a span that retried and failed a hundred
    times must not cost a hundred stack traces).
    Span names are read only for traces in a `name_sample_rate` sample (`sample_threshold`),
    the rest get None: only sampled traces show names, and reading every name costs ~2 % of
    the loop. `rejected`/`total`/`problems` carry what decoding already refused (JSON ids).
    """
    names_below = sample_threshold(name_sample_rate)
    span_keys = _SPAN_KEYS
    single_library: dict[int, dict[str, tuple[tuple[str, str], ...]]] = {
        code: {} for code in (_A_DB, _A_MESSAGING, _A_RPC, _A_CODE_NS, _A_CODE_FN)
    }
    peers: dict[str, str] = {}
    stacks: dict[str, tuple[tuple[str, str], ...]] = {}
    # Reading `span.events` costs ~0.2 µs a span even when empty (a few % of this loop);
    # a zero bound skips it altogether.
    read_events = max_stack_frames > 0 and max_span_frames > 0
    tls_schemes = _TLS_SCHEMES
    zero_trace, zero_span, status_error = _ZERO_TRACE, _ZERO_SPAN, _STATUS_ERROR
    seen = bad = 0
    resources: list[ResourceSpans] = []
    found: list[str] = []
    lo, hi = window.not_before_ns, window.not_after_ns
    for r_index, resource_spans in enumerate(request.resource_spans):
        # A resource whose service or environment name cannot be stored: none of its spans
        # can be attributed, so all of them are rejected (and counted), the rest stays.
        problem = resource_problem(resource_spans.resource.attributes)
        if problem is not None:
            spans_here = sum(len(s.spans) for s in resource_spans.scope_spans)
            seen += spans_here
            bad += spans_here
            if len(found) < 20:
                found.append(f"resourceSpans[{r_index}]: {problem}")
            continue
        # Other text is kept, with a NUL (which PostgreSQL cannot store) replaced.
        attributes = {
            kv.key: any_value_text(kv.value).replace("\x00", "\ufffd")
            for kv in resource_spans.resource.attributes
        }
        scopes: list[ScopeSpans] = []
        for s_index, scope_spans in enumerate(resource_spans.scope_spans):
            scope = scope_spans.scope
            rows: list[SpanRow] = []
            append = rows.append
            spans = scope_spans.spans
            seen += len(spans)
            for span in spans:
                trace_id = span.trace_id
                span_id = span.span_id
                parent = span.parent_span_id
                start = span.start_time_unix_nano
                end = span.end_time_unix_nano
                name = span.name
                if (
                    len(trace_id) != 16
                    or len(span_id) != 8
                    or (parent and len(parent) != 8)
                    or not start
                    or end < start
                    or start < lo
                    or end > hi
                    or trace_id == zero_trace
                    or span_id == zero_span
                    or len(name) > SPAN_NAME_MAX
                    or "\x00" in name
                ):
                    bad += 1
                    if len(found) < 20:
                        found.append(
                            f"resourceSpans[{r_index}].scopeSpans[{s_index}]: "
                            f"{span_problem(span, window=window)}"
                        )
                    continue
                peer_service = address = db = client = ""
                tls = mtls = False
                libraries: tuple[tuple[str, str], ...] | None = None
                for kv in span.attributes:
                    code = span_keys.get(kv.key)
                    if code is None:
                        continue
                    value = kv.value.string_value
                    if "\x00" in value:
                        value = value.replace("\x00", "\ufffd")
                    if code == _A_PEER_SERVICE:
                        peer_service = value
                    elif code == _A_SERVER_ADDRESS:
                        address = value
                    elif code == _A_SCHEME:
                        if value.lower() in tls_schemes:
                            tls = True
                    elif code == _A_TLS:
                        if kv.value.WhichOneof("value") == "bool_value":
                            tls = tls or kv.value.bool_value
                        else:
                            tls = True
                    elif code == _A_MTLS:
                        mtls = True
                    elif code == _A_CLIENT:
                        client = client or value
                    elif value:
                        if code == _A_DB:
                            db = value
                        # One shared ((kind, name),) per distinct attribute: a few distinct
                        # libraries cover millions of spans, and a tuple per span would make
                        # the rows outweigh the protobuf messages they replace.
                        one = single_library[code].get(value)
                        if one is None:
                            library = _library(code, value)
                            # () for "no library here" is cached too (an unqualified
                            # code.function), so the miss is paid once per value.
                            one = single_library[code][value] = (
                                () if library is None else (library,)
                            )
                        if one:
                            libraries = one if libraries is None else (*libraries, *one)
                if read_events and span.events:
                    frames = _exception_frames(
                        span.events, stacks, max_stack_frames, max_span_frames
                    )
                    if frames:
                        libraries = frames if libraries is None else (*libraries, *frames)
                peer = client if span.kind in _SERVER_KINDS else peer_service or address or db
                if peer:
                    # Shared, as above: the same few peer names on most spans.
                    peer = peers.setdefault(peer, peer)
                append((
                    trace_id + span_id, parent, start, end, span.kind,
                    span.status.code == status_error,
                    name if names_below is not None and trace_id[8:] < names_below else None,
                    peer, db != "", tls, mtls,
                    libraries,
                ))
            scopes.append(
                ScopeSpans(
                    name=scope.name.replace("\x00", "\ufffd"),
                    version=scope.version.replace("\x00", "\ufffd"),
                    spans=tuple(rows),
                )
            )
        resources.append(ResourceSpans(attributes=attributes, scopes=tuple(scopes)))
    return SpanBatch(
        resources=tuple(resources),
        total_spans=seen + rejected if total is None else total,
        rejected_spans=rejected + bad,
        problems=problems + tuple(found[: max(0, 20 - len(problems))]),
    )


def otlp_span_batches(
    body: bytes,
    *,
    encoding: str,
    max_bytes: int = 4 << 20,
    name_sample_rate: float = 1.0,
    window: SpanWindow = _ALL_TIMES,
    max_stack_frames: int = STACK_FRAMES_DEFAULT,
    max_span_frames: int = SPAN_FRAMES_DEFAULT,
) -> Iterator[SpanBatch]:
    """Decode a body part by part (see protobuf_split) into plain span batches; spans
    outside `window`, and resources whose names cannot be stored, are rejected and counted
    exactly as the receiver counted them."""
    for decoded in otlp_chunks(
        body, encoding=encoding, max_bytes=max_bytes, count=False, window=window
    ):
        batch = spans_from_request(
            decoded.request,
            name_sample_rate=name_sample_rate,
            rejected=decoded.rejected_spans,
            problems=decoded.problems,
            window=window,
            max_stack_frames=max_stack_frames,
            max_span_frames=max_span_frames,
        )
        # The decoded messages (~4x the part's size) are garbage once the rows exist; drop
        # them before the caller aggregates, or both would count in the worker's peak memory.
        del decoded
        yield batch


def _count(
    request: ExportTraceServiceRequest, *, window: SpanWindow = _ALL_TIMES
) -> tuple[int, int, list[str]]:
    total = rejected = 0
    problems: list[str] = []
    lo, hi = window.not_before_ns, window.not_after_ns
    for r_index, resource_spans in enumerate(request.resource_spans):
        problem = resource_problem(resource_spans.resource.attributes)
        if problem is not None:
            spans_here = sum(len(s.spans) for s in resource_spans.scope_spans)
            total += spans_here
            rejected += spans_here
            if len(problems) < 20:
                problems.append(f"resourceSpans[{r_index}]: {problem}")
            continue
        for s_index, scope_spans in enumerate(resource_spans.scope_spans):
            spans = scope_spans.spans
            total += len(spans)
            for index, span in enumerate(spans):
                # The common case inline; span_problem only explains a bad span.
                trace_id = span.trace_id
                span_id = span.span_id
                parent = span.parent_span_id
                start = span.start_time_unix_nano
                end = span.end_time_unix_nano
                name = span.name
                if (
                    len(trace_id) == 16
                    and len(span_id) == 8
                    and (not parent or len(parent) == 8)
                    and start
                    and end >= start
                    and start >= lo
                    and end <= hi
                    and trace_id != _ZERO_TRACE
                    and span_id != _ZERO_SPAN
                    and len(name) <= SPAN_NAME_MAX
                    and "\x00" not in name
                ):
                    continue
                problem = span_problem(span, window=window)
                if problem is not None:
                    rejected += 1
                    if len(problems) < 20:
                        problems.append(
                            f"resourceSpans[{r_index}].scopeSpans[{s_index}].spans[{index}]: "
                            f"{problem}"
                        )
    return total, rejected, problems


def _hex_to_b64(value: object, *, length: int, allow_empty: bool) -> str:
    if value in (None, ""):
        if allow_empty:
            return ""
        raise ValueError("is missing")
    if not isinstance(value, str):
        raise ValueError("must be a hex string")
    try:
        raw = bytes.fromhex(value)
    except ValueError as exc:
        raise ValueError(f"{value[:40]!r} is not hex") from exc
    if len(raw) != length:
        raise ValueError(f"must be {length} bytes ({2 * length} hex digits)")
    return base64.b64encode(raw).decode()


def _span_ids_to_b64(span: dict[str, object]) -> None:
    """Rewrite a JSON span's hex ids (and its links' ids) as base64 for ParseDict."""
    span["traceId"] = _hex_to_b64(span.get("traceId"), length=16, allow_empty=False)
    span["spanId"] = _hex_to_b64(span.get("spanId"), length=8, allow_empty=False)
    span["parentSpanId"] = _hex_to_b64(span.get("parentSpanId"), length=8, allow_empty=True)
    links = span.get("links")
    if isinstance(links, list):
        for link in links:
            if isinstance(link, dict):
                link["traceId"] = _hex_to_b64(link.get("traceId"), length=16, allow_empty=True)
                link["spanId"] = _hex_to_b64(link.get("spanId"), length=8, allow_empty=True)


def _decode_json(body: bytes, *, count: bool = True, window: SpanWindow = _ALL_TIMES) -> Decoded:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OtlpDecodeError(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise OtlpDecodeError("the JSON body must be an object with a resourceSpans array")
    resource_list = document.get("resourceSpans", document.get("resource_spans", []))
    if not isinstance(resource_list, list):
        raise OtlpDecodeError("resourceSpans must be an array")
    request = ExportTraceServiceRequest()
    total = rejected = 0
    problems: list[str] = []
    for r_index, item in enumerate(resource_list):
        if not isinstance(item, dict):
            problems.append(f"resourceSpans[{r_index}]: must be an object")
            continue
        scope_list = item.get("scopeSpans", item.get("scope_spans", []))
        if not isinstance(scope_list, list):
            scope_list = []
            problems.append(f"resourceSpans[{r_index}].scopeSpans: must be an array")
        resource_total = resource_bad = 0
        for s_index, scope_spans in enumerate(scope_list):
            spans = scope_spans.get("spans") if isinstance(scope_spans, dict) else None
            if not isinstance(spans, list):
                continue
            kept = []
            for index, span in enumerate(spans):
                resource_total += 1
                try:
                    if not isinstance(span, dict):
                        raise ValueError("must be an object")
                    _span_ids_to_b64(span)
                    kept.append(span)
                except ValueError as exc:
                    resource_bad += 1
                    if len(problems) < 20:
                        problems.append(
                            f"resourceSpans[{r_index}].scopeSpans[{s_index}].spans[{index}]: "
                            f"id {exc}"
                        )
            scope_spans["spans"] = kept
        total += resource_total
        rejected += resource_bad
        # One resource at a time: a resource whose attributes or spans have the wrong types
        # is rejected alone, the rest of the request is kept (OTLP partial success).
        parsed = ResourceSpansMessage()
        try:
            json_format.ParseDict(item, parsed, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError) as exc:
            rejected += resource_total - resource_bad
            problems.append(f"resourceSpans[{r_index}]: {str(exc)[:300]}")
            continue
        request.resource_spans.append(parsed)
    late_rejected, late_problems = 0, list[str]()
    if count:
        _, late_rejected, late_problems = _count(request, window=window)
    return Decoded(
        request=request,
        total_spans=total,
        rejected_spans=rejected + late_rejected,
        problems=tuple(problems + late_problems),
    )


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise OtlpDecodeError("the protobuf body is truncated or malformed (varint)")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, int, int]]:
    """Top-level fields of a protobuf message: (field number, wire type, start, end) where
    [start, end) is the whole field (tag included)."""
    pos = 0
    end = len(buf)
    while pos < end:
        start = pos
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise OtlpDecodeError(f"the protobuf body uses an unsupported wire type {wire}")
        if pos > end or number == 0:
            raise OtlpDecodeError("the protobuf body is truncated or malformed")
        yield number, wire, start, pos


def _payload(buf: bytes, start: int) -> bytes:
    """The value bytes of a length-delimited field starting at `start`."""
    _, pos = _varint(buf, start)
    length, pos = _varint(buf, pos)
    return buf[pos:pos + length]


def _field_bytes(number: int, value: bytes) -> bytes:
    out = bytearray()
    for part in ((number << 3) | 2, len(value)):
        while True:
            byte = part & 0x7F
            part >>= 7
            if part:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                break
    return bytes(out) + value


def _split_message(buf: bytes, *, repeated: int, max_bytes: int, nested: Any) -> Iterator[bytes]:
    """Split a message whose field `repeated` is a list, keeping every other field in each
    part. `nested(value)` splits one oversized list element further (or yields it whole)."""
    header = bytearray()
    items: list[tuple[int, int]] = []
    for number, wire, start, end in _fields(buf):
        if number == repeated and wire == 2:
            items.append((start, end))
        else:
            header += buf[start:end]
    part = bytearray(header)
    filled = False
    for start, end in items:
        if end - start > max_bytes:
            if filled:
                yield bytes(part)
                part, filled = bytearray(header), False
            for piece in nested(_payload(buf, start)):
                yield bytes(header) + _field_bytes(repeated, piece)
            continue
        if filled and len(part) + (end - start) > max_bytes:
            yield bytes(part)
            part, filled = bytearray(header), False
        part += buf[start:end]
        filled = True
    if filled or not items:
        yield bytes(part)


def protobuf_split(body: bytes, *, max_bytes: int) -> Iterator[bytes]:
    """Cut an ExportTraceServiceRequest into smaller valid ExportTraceServiceRequests of at
    most about `max_bytes` each, on the wire format, without decoding it: a ResourceSpans too
    large is cut between its ScopeSpans, a ScopeSpans too large between its spans (each part
    keeps its resource and scope). Decoding a whole request costs ~4x its size in memory;
    decoding it part by part keeps a million-span request within a few hundred megabytes."""

    def scope_parts(scope_spans: bytes) -> Iterator[bytes]:
        yield from _split_message(
            scope_spans, repeated=2, max_bytes=max_bytes, nested=lambda span: iter([span])
        )

    def resource_parts(resource_spans: bytes) -> Iterator[bytes]:
        yield from _split_message(
            resource_spans, repeated=2, max_bytes=max_bytes, nested=scope_parts
        )

    yield from _split_message(body, repeated=1, max_bytes=max_bytes, nested=resource_parts)


def otlp_chunks(
    body: bytes,
    *,
    encoding: str,
    max_bytes: int = 4 << 20,
    count: bool = True,
    window: SpanWindow = _ALL_TIMES,
) -> Iterator[Decoded]:
    """Decode a body part by part (protobuf) or whole (JSON); see protobuf_split.
    `count=False` skips counting rejected protobuf spans, for a caller that checks every
    span itself anyway (the aggregation engine)."""
    if encoding == PROTOBUF and len(body) > max_bytes:
        for part in protobuf_split(body, max_bytes=max_bytes):
            yield otlp_decode(part, encoding=encoding, count=count, window=window)
    else:
        yield otlp_decode(body, encoding=encoding, count=count, window=window)


def otlp_validate(body: bytes, *, encoding: str, window: SpanWindow = _ALL_TIMES) -> Decoded:
    """Count the spans and rejected spans of a body with bounded memory. The returned
    `request` is empty for a large protobuf body (it was checked part by part)."""
    total = rejected = 0
    problems: list[str] = []
    last: Decoded | None = None
    parts = 0
    for decoded in otlp_chunks(body, encoding=encoding, window=window):
        parts += 1
        last = decoded
        total += decoded.total_spans
        rejected += decoded.rejected_spans
        problems.extend(decoded.problems[: max(0, 20 - len(problems))])
    if parts == 1 and last is not None:
        return last
    return Decoded(
        request=ExportTraceServiceRequest(), total_spans=total, rejected_spans=rejected,
        problems=tuple(problems),
    )


def otlp_decode(
    body: bytes, *, encoding: str, count: bool = True, window: SpanWindow = _ALL_TIMES
) -> Decoded:
    """Decode an (already decompressed) OTLP/HTTP trace body in `encoding` (a media type)."""
    if encoding == PROTOBUF:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise OtlpDecodeError(
                f"the body is not a protobuf ExportTraceServiceRequest: {exc}"
            ) from exc
        if not count:
            return Decoded(request=request, total_spans=0, rejected_spans=0, problems=())
        total, rejected, problems = _count(request, window=window)
        return Decoded(
            request=request, total_spans=total, rejected_spans=rejected, problems=tuple(problems)
        )
    if encoding == JSON:
        return _decode_json(body, count=count, window=window)
    raise OtlpDecodeError(f"unsupported encoding {encoding!r}; use {PROTOBUF} or {JSON}")


def response_encode(*, encoding: str, rejected_spans: int = 0, message: str = "") -> bytes:
    """ExportTraceServiceResponse in the request's encoding (partial_success only when set)."""
    response = ExportTraceServiceResponse()
    if rejected_spans or message:
        response.partial_success.rejected_spans = rejected_spans
        response.partial_success.error_message = message
    if encoding == JSON:
        body: dict[str, object] = {}
        if rejected_spans or message:
            # OTLP JSON: 64-bit integers as strings, lowerCamelCase keys.
            body["partialSuccess"] = {
                "rejectedSpans": str(rejected_spans),
                "errorMessage": message,
            }
        return orjson.dumps(body)
    return response.SerializeToString()


def status_encode(*, encoding: str, code: int, message: str) -> bytes:
    """A google.rpc.Status error body, as OTLP/HTTP asks for failed requests."""
    from google.rpc.status_pb2 import Status

    if encoding == JSON:
        return orjson.dumps({"code": code, "message": message})
    return Status(code=code, message=message).SerializeToString()
