"""Protobuf trace bytes -> the aggregation's plain span rows, column by column (no ORM).

`spans_from_protobuf(part)` gives exactly the `SpanBatch` that `spans_from_request` gives for
the decoded part, several times faster: the part is decoded with a shadow schema whose
scopes keep their spans as undecoded `bytes` (`otlp_span_tails`); a scope whose spans are
all in the usual wire layout (below) is read with numpy on the joined spans, and what
follows a span's fixed fields (attributes, events, links, status) is looked up whole in a
cache of what it means. Other scopes are read field by field over shadow Span messages
(`map` over the repeated field, no Python loop body per span), which also explains every
rejected span exactly as the reference does.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from operator import add, getitem, itemgetter
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from trustrank.parsers.otlp_checks import (
    _ALL_TIMES,
    _ZERO_SPAN,
    _ZERO_TRACE,
    SPAN_NAME_MAX,
    OtlpDecodeError,
    SpanWindow,
    bad_spans,
    resource_problem,
    span_columns,
)
from trustrank.parsers.otlp_rows import (
    SPAN_FRAMES_DEFAULT,
    STACK_FRAMES_DEFAULT,
    ResourceSpans,
    ScopeSpans,
    SpanBatch,
    _exception_frames,
    any_value_text,
    sample_threshold,
)
from trustrank.parsers.otlp_span_tails import (
    _ATTRIBUTES,
    _CONSUMER_KIND,
    _ERRORS,
    _EVENTS,
    _INFOS,
    _KIND,
    _KIND_MAX,
    _LINKS,
    _SERVER_KIND,
    _STATUS,
    _decoded,
    _ShadowRequest,
    _ShadowSpan,
    _tails,
)

# --- the usual layout, read with numpy -----------------------------------------------------
#
# Every mainstream encoder (upb, Go's pdata, the Java and JavaScript SDKs) writes a span's
# fields in field-number order and leaves defaults out, so a span starts
#   0a 10 <trace id> 12 08 <span id> [22 08 <parent id>] 2a <name length> <name>
#   [30 <kind>] 39 <start, 8 bytes> 41 <end, 8 bytes>
# and its attributes, events, links and status follow (the *tail*). A scope whose spans
# all start so, with names shorter than 128 bytes, is read with numpy on the joined spans;
# the tail is looked up whole in a cache of what it means, since spans of one operation
# repeat it byte for byte. Anything else is read span by span through the shadow Span.
_PAD = bytes(64)


def _gather(data: np.ndarray[Any, Any], at: np.ndarray[Any, Any], width: int) -> Any:
    return data[at[:, None] + np.arange(width)]


@dataclass(frozen=True, slots=True)
class _Checked:
    """The head fields of a scope's spans in the usual layout, all usable, as arrays."""

    data: np.ndarray[Any, Any]
    offsets: np.ndarray[Any, Any]
    has_parent: np.ndarray[Any, Any]
    kinds: np.ndarray[Any, Any]
    starts: np.ndarray[Any, Any]
    ends: np.ndarray[Any, Any]
    tails: np.ndarray[Any, Any]
    name_ends: np.ndarray[Any, Any]
    name_lengths: np.ndarray[Any, Any]
    ascii_names: bool


def _layout_checked(raws: list[bytes], window: SpanWindow) -> _Checked | None:
    """Whether every span of a scope (raw bytes) is in the usual layout and usable
    (`span_problem` finds nothing) but for its ids, with no Python work per span: its head
    fields as arrays, or None. A name's text is checked here for what PostgreSQL cannot
    store (NUL) and for being ASCII; a non-ASCII name's UTF-8 is the caller's to check, and
    so are all-zero ids (`_ids_usable`, or the caller's own lists of them)."""
    count = len(raws)
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=count)
    if int(lengths.min()) < 50:
        return None
    offsets = np.zeros(count, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    data = np.frombuffer(b"".join(raws) + _PAD, dtype=np.uint8)
    ok = (data[offsets] == 0x0A) & (data[offsets + 1] == 16)
    ok &= (data[offsets + 18] == 0x12) & (data[offsets + 19] == 8)
    has_parent = data[offsets + 28] == 0x22
    ok &= ~has_parent | (data[offsets + 29] == 8)
    at = offsets + 28 + 10 * has_parent
    ok &= data[at] == 0x2A
    name_lengths = data[at + 1].astype(np.int64)
    ok &= name_lengths < 128
    name_ends = at + 2 + name_lengths
    has_kind = data[name_ends] == 0x30
    kinds = np.where(has_kind, data[name_ends + 1], 0)
    ok &= kinds < 128
    at = name_ends + 2 * has_kind
    ok &= (data[at] == 0x39) & (data[at + 9] == 0x41)
    tails = at + 18
    ok &= tails <= offsets + lengths
    if not ok.all():
        return None
    starts = _gather(data, at + 1, 8).copy().view("<u8").ravel()
    ends = _gather(data, at + 10, 8).copy().view("<u8").ravel()
    lo, hi = np.uint64(max(window.not_before_ns, 1)), np.uint64(window.not_after_ns)
    if not ((starts >= lo) & (ends >= starts) & (ends <= hi)).all():
        return None
    # The names' bytes, gathered: none may be NUL (PostgreSQL cannot store it).
    ascii_names = True
    total = int(name_lengths.sum())
    if total:
        name_starts = name_ends - name_lengths
        firsts = np.repeat(name_starts - (np.cumsum(name_lengths) - name_lengths), name_lengths)
        name_bytes = data[firsts + np.arange(total)]
        if not name_bytes.all():
            return None
        ascii_names = bool(name_bytes.max() < 0x80)
    return _Checked(data, offsets, has_parent, kinds, starts, ends, tails, name_ends,
                    name_lengths, ascii_names)


@dataclass(frozen=True, slots=True)
class _Head:
    """`_Checked`, with the ids as bytes and, when not all ASCII, the names as text."""

    checked: _Checked
    trace_ids: list[bytes]
    span_ids: list[bytes]
    names: list[str] | None  # None when all are ASCII: read from the spans when needed


def _ids_usable(checked: _Checked) -> bool:
    """No span's trace id or span id is all zero."""
    data, offsets = checked.data, checked.offsets
    return bool(_gather(data, offsets + 2, 16).any(axis=1).all()
                and _gather(data, offsets + 20, 8).any(axis=1).all())


def _layout_head(raws: list[bytes], window: SpanWindow) -> _Head | None:
    """The head of every span of a scope (raw bytes), when all are in the usual layout and
    usable (`span_problem` finds nothing); None otherwise."""
    checked = _layout_checked(raws, window)
    if checked is None:
        return None
    trace_ids = list(map(itemgetter(slice(2, 18)), raws))
    span_ids = list(map(itemgetter(slice(20, 28)), raws))
    if _ZERO_TRACE in trace_ids or _ZERO_SPAN in span_ids:
        return None
    names: list[str] | None = None
    if not checked.ascii_names:
        name_ends = (checked.name_ends - checked.offsets).tolist()
        name_from = (checked.name_ends - checked.name_lengths - checked.offsets).tolist()
        try:
            names = [
                raw[start:end].decode()
                for raw, start, end in zip(raws, name_from, name_ends, strict=True)
            ]
        except UnicodeDecodeError:
            return None  # the span by span path raises the decoder's error
        if max(map(len, names)) > SPAN_NAME_MAX:
            return None
    return _Head(checked, trace_ids, span_ids, names)


def _tail_infos(
    raws: list[bytes], checked: _Checked, max_stack_frames: int, max_span_frames: int
) -> list[Any]:
    """What each span's tail means (`otlp_span_tails._tails`), None where the layout
    cannot read it (a tail that sets a head field again)."""
    tails = _tails(max_stack_frames, max_span_frames)
    starts = (checked.tails - checked.offsets).tolist()
    return [tails[raw[start:]] for raw, start in zip(raws, starts, strict=True)]


def _layout_rows(
    raws: list[bytes], *, names_below: bytes | None, window: SpanWindow,
    max_stack_frames: int, max_span_frames: int,
) -> tuple[Any, ...] | None:
    """The rows of a scope's spans (raw bytes) all in the usual layout and all usable;
    None otherwise (the caller reads them span by span, which also explains rejects)."""
    head = _layout_head(raws, window)
    if head is None:
        return None
    count = len(raws)
    checked = head.checked
    data, offsets, kinds = checked.data, checked.offsets, checked.kinds
    trace_ids, span_ids = head.trace_ids, head.span_ids
    parents = [
        raw[30:38] if present else b""
        for raw, present in zip(raws, checked.has_parent.tolist(), strict=True)
    ]
    infos = _tail_infos(raws, checked, max_stack_frames, max_span_frames)
    if None in infos or int(kinds.max()) > _KIND_MAX:
        return None
    kind_list = kinds.tolist()
    sampled: list[Any] = [None] * count
    if names_below is not None:
        # trace_id[8:] < names_below, on the ids' last 8 bytes as big-endian numbers.
        low = _gather(data, offsets + 10, 8).copy().view(">u8").ravel()
        below = (
            np.ones(count, dtype=bool) if len(names_below) > 8
            else low < np.uint64(int.from_bytes(names_below, "big"))
        )
        at = np.flatnonzero(below)
        if head.names is not None:
            for index in at.tolist():
                sampled[index] = head.names[index]
        else:
            name_ends = (checked.name_ends - offsets)[at].tolist()
            name_from = (checked.name_ends - checked.name_lengths - offsets)[at].tolist()
            for index, start, end in zip(at.tolist(), name_from, name_ends, strict=True):
                sampled[index] = raws[index][start:end].decode("ascii")
    starts, ends = checked.starts, checked.ends
    return tuple(zip(
        map(add, trace_ids, span_ids), parents, starts.tolist(), ends.tolist(), kind_list,
        map(itemgetter(10), infos), sampled, map(getitem, infos, kind_list),
        map(itemgetter(6), infos), map(itemgetter(7), infos), map(itemgetter(8), infos),
        map(itemgetter(9), infos),
        strict=True,
    ))


def _message_rows(
    spans: list[Any], *, names_below: bytes | None, window: SpanWindow,
    max_stack_frames: int, max_span_frames: int, stacks: dict[str, Any],
) -> tuple[tuple[Any, ...], list[tuple[int, str]]]:
    """The rows of a scope's spans (shadow Span messages) and its rejected spans."""
    columns = span_columns(spans)
    trace_ids: list[Any] = columns.trace_ids
    span_ids: list[Any] = columns.span_ids
    parents: list[Any] = columns.parents
    starts: list[Any] = columns.starts
    ends: list[Any] = columns.ends
    names: list[Any] = columns.names
    rejected = bad_spans(spans, columns, window=window)
    if rejected:
        good = [True] * len(spans)
        for index, _ in rejected:
            good[index] = False
        spans = list(compress(spans, good))
        trace_ids, span_ids, parents, starts, ends, names = (
            list(compress(column, good))
            for column in (trace_ids, span_ids, parents, starts, ends, names)
        )
    kinds = list(map(_KIND, spans))
    span_errors = list(map(_ERRORS.__getitem__, map(_STATUS, spans)))
    span_infos = list(map(_INFOS.__getitem__, map(tuple, map(_ATTRIBUTES, spans))))
    libraries = list(map(itemgetter(5), span_infos))
    if max_stack_frames > 0 and max_span_frames > 0:
        events = list(map(_EVENTS, spans))
        for index in compress(range(len(events)), events):
            frames = _exception_frames(
                [_decoded(Span.Event, raw) for raw in events[index]],
                stacks, max_stack_frames, max_span_frames,
            )
            if frames:
                own = libraries[index]
                libraries[index] = frames if own is None else (*own, *frames)
    links = list(map(_LINKS, spans))
    for raw_links in compress(links, links):
        for raw in raw_links:
            _decoded(Span.Link, raw)
    if names_below is None:
        sampled: list[str | None] = [None] * len(spans)
    else:
        sampled = [
            name if trace_id[8:] < names_below else None
            for trace_id, name in zip(trace_ids, names, strict=True)
        ]
    peers = [
        info[0] if kind in (_SERVER_KIND, _CONSUMER_KIND) else info[1]
        for info, kind in zip(span_infos, kinds, strict=True)
    ]
    rows = tuple(zip(
        map(add, trace_ids, span_ids), parents, starts, ends, kinds, span_errors,
        sampled, peers, map(itemgetter(2), span_infos),
        map(itemgetter(3), span_infos), map(itemgetter(4), span_infos), libraries,
        strict=True,
    ))
    return rows, rejected


def spans_from_protobuf(
    body: bytes,
    *,
    name_sample_rate: float = 1.0,
    window: SpanWindow = _ALL_TIMES,
    max_stack_frames: int = STACK_FRAMES_DEFAULT,
    max_span_frames: int = SPAN_FRAMES_DEFAULT,
) -> SpanBatch:
    """As `spans_from_request(ExportTraceServiceRequest.FromString(body), …)`."""
    try:
        request = _ShadowRequest.FromString(body)
    except (DecodeError, RecursionError) as exc:
        raise OtlpDecodeError(
            f"the body is not a protobuf ExportTraceServiceRequest: {exc}"
        ) from exc
    names_below = sample_threshold(name_sample_rate)
    stacks: dict[str, tuple[tuple[str, str], ...]] = {}
    seen = bad = 0
    found: list[str] = []
    # Each resource: its problem, or None and its scopes with their spans' raw bytes.
    kept = [
        (resource_problem(resource_spans.resource.attributes), resource_spans,
         [(scope_spans.scope, list(scope_spans.spans))
          for scope_spans in resource_spans.scope_spans])
        for resource_spans in request.resource_spans
    ]
    # Every usable scope's spans read at once in the usual layout (numpy's cost is per
    # call, and an export has many small scopes); when some span is not, scope by scope.
    every = [
        raw for problem, _, scope_list in kept if problem is None
        for _, raws in scope_list for raw in raws
    ]
    rows_all = None if not every else _layout_rows(
        every, names_below=names_below, window=window,
        max_stack_frames=max_stack_frames, max_span_frames=max_span_frames,
    )
    at = 0
    resources: list[ResourceSpans] = []
    for r_index, (problem, resource_spans, scope_list) in enumerate(kept):
        if problem is not None:
            spans_here = sum(len(raws) for _, raws in scope_list)
            seen += spans_here
            bad += spans_here
            if len(found) < 20:
                found.append(f"resourceSpans[{r_index}]: {problem}")
            continue
        attributes = {
            kv.key: any_value_text(kv.value).replace("\x00", "\ufffd")
            for kv in resource_spans.resource.attributes
        }
        scopes: list[ScopeSpans] = []
        for s_index, (scope, raws) in enumerate(scope_list):
            seen += len(raws)
            if rows_all is not None:
                rows: Any = rows_all[at:at + len(raws)]
                at += len(raws)
            else:
                rows = None if not raws else _layout_rows(
                    raws, names_below=names_below, window=window,
                    max_stack_frames=max_stack_frames, max_span_frames=max_span_frames,
                )
            if rows is None:
                rows, rejected = _message_rows(
                    [_decoded(_ShadowSpan, raw) for raw in raws], names_below=names_below,
                    window=window, max_stack_frames=max_stack_frames,
                    max_span_frames=max_span_frames, stacks=stacks,
                )
                bad += len(rejected)
                for _, problem in rejected[: max(0, 20 - len(found))]:
                    found.append(f"resourceSpans[{r_index}].scopeSpans[{s_index}]: {problem}")
            scopes.append(ScopeSpans(
                name=scope.name.replace("\x00", "\ufffd"),
                version=scope.version.replace("\x00", "\ufffd"),
                spans=rows,
            ))
        resources.append(ResourceSpans(attributes=attributes, scopes=tuple(scopes)))
    return SpanBatch(
        resources=tuple(resources), total_spans=seen, rejected_spans=bad,
        problems=tuple(found[:20]),
    )


def spans_usable_protobuf(body: bytes, *, window: SpanWindow = _ALL_TIMES) -> int | None:
    """The number of spans of a body when every span and resource is usable and every span
    is in the usual layout (the receiver's check of a good export, with no Python work per
    span); None when the caller must count span by span (`count_problems`). The caller
    has decoded the body with the real schema already (which checks its strings)."""
    try:
        request = _ShadowRequest.FromString(body)
    except (DecodeError, RecursionError):
        return None
    every: list[bytes] = []
    for resource_spans in request.resource_spans:
        if resource_problem(resource_spans.resource.attributes) is not None:
            return None
        for scope_spans in resource_spans.scope_spans:
            every.extend(scope_spans.spans)
    # Checked at once: numpy's cost is per call, and an export has many small scopes.
    if every:
        checked = _layout_checked(every, window)
        if checked is None or not _ids_usable(checked) or int(checked.kinds.max()) > _KIND_MAX:
            return None
        # What follows the head is looked up as the worker does: a tail that repeats a head
        # field (protobuf keeps the last one) is read span by span, and may be rejected.
        if None in _tail_infos(every, checked, STACK_FRAMES_DEFAULT, SPAN_FRAMES_DEFAULT):
            return None
    return len(every)
