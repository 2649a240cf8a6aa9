"""Decoded OTLP trace requests -> plain span rows for the aggregation (no ORM).

`spans_from_request` reads a decoded ExportTraceServiceRequest (protobuf messages, as the
JSON path and the tests give); `otlp_rows_protobuf` (in `otlp_columns_spans`) reads protobuf
bytes column by column and gives the same rows, faster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from trustrank.parsers.otlp_checks import (
    _ALL_TIMES,
    _ZERO_SPAN,
    _ZERO_TRACE,
    SPAN_NAME_MAX,
    SpanWindow,
    resource_problem,
    span_problem,
)
from trustrank.parsers.stackframes import stack_frames

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


def attribute_facts(
    attributes: Iterable[Any], single_library: dict[tuple[int, str], tuple[tuple[str, str], ...]],
) -> tuple[str, str, str, str, bool, bool, tuple[tuple[str, str], ...] | None]:
    """What a span's attributes (KeyValue messages) tell the aggregation: (client address,
    peer.service, server address, db.system, TLS, mTLS, library evidence or None).
    `single_library` keeps the library of each (attribute, value) met, () for none, so a
    few distinct libraries cover millions of spans with shared tuples: a tuple per span
    would make the rows outweigh the protobuf messages they replace."""
    peer_service = address = db = client = ""
    tls = mtls = False
    libraries: tuple[tuple[str, str], ...] | None = None
    for kv in attributes:
        code = _SPAN_KEYS.get(kv.key)
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
            if value.lower() in _TLS_SCHEMES:
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
            one = single_library.get((code, value))
            if one is None:
                library = _library(code, value)
                # "No library here" (an unqualified code.function) is kept too, so the
                # miss is paid once per value.
                one = single_library[(code, value)] = () if library is None else (library,)
            if one:
                libraries = one if libraries is None else (*libraries, *one)
    return client, peer_service, address, db, tls, mtls, libraries


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
    single_library: dict[tuple[int, str], tuple[tuple[str, str], ...]] = {}
    peers: dict[str, str] = {}
    stacks: dict[str, tuple[tuple[str, str], ...]] = {}
    # Reading `span.events` costs ~0.2 µs a span even when empty (a few % of this loop);
    # a zero bound skips it altogether.
    read_events = max_stack_frames > 0 and max_span_frames > 0
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
                client, peer_service, address, db, tls, mtls, libraries = attribute_facts(
                    span.attributes, single_library)
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

