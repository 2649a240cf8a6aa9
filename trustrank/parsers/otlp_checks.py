"""OTLP trace bodies: the checks the receiver and the worker share (no protobuf decoding).

What makes a span or a resource unusable (`span_problem`, `resource_problem`), the accepted
time window, and `count_problems`, the receiver's count of usable and rejected spans of a
decoded request.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter, le
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

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


_TRACE_ID = attrgetter("trace_id")
_SPAN_ID = attrgetter("span_id")
_PARENT_ID = attrgetter("parent_span_id")
_START = attrgetter("start_time_unix_nano")
_END = attrgetter("end_time_unix_nano")
_NAME = attrgetter("name")


@dataclass(frozen=True, slots=True)
class SpanColumns:
    """The fields every check reads, one list per field, in span order."""

    trace_ids: list[bytes]
    span_ids: list[bytes]
    parents: list[bytes]
    starts: list[int]
    ends: list[int]
    names: list[str]


def span_columns(spans: Any) -> SpanColumns:
    """Read a repeated Span field column by column (a C-level `map` per field, no Python
    loop body per span)."""
    return SpanColumns(
        list(map(_TRACE_ID, spans)), list(map(_SPAN_ID, spans)), list(map(_PARENT_ID, spans)),
        list(map(_START, spans)), list(map(_END, spans)), list(map(_NAME, spans)),
    )


def bad_spans(
    spans: Any, columns: SpanColumns, *, window: SpanWindow = _ALL_TIMES
) -> list[tuple[int, str]]:
    """(index, problem) of each unusable span, as `span_problem` says. Whole-column checks
    first: a batch of good spans (the usual case) costs no Python work per span."""
    if not columns.starts:
        return []
    lo, hi = window.not_before_ns, window.not_after_ns
    if (
        set(map(len, columns.trace_ids)) == {16}
        and set(map(len, columns.span_ids)) == {8}
        and set(map(len, columns.parents)) <= {0, 8}
        and min(columns.starts) >= max(lo, 1)
        and max(columns.ends) <= hi
        and all(map(le, columns.starts, columns.ends))
        and _ZERO_TRACE not in columns.trace_ids
        and _ZERO_SPAN not in columns.span_ids
        and max(map(len, columns.names)) <= SPAN_NAME_MAX
        and "\x00" not in "".join(columns.names)
    ):
        return []
    found = []
    for index, span in enumerate(spans):
        problem = span_problem(span, window=window)
        if problem is not None:
            found.append((index, problem))
    return found


def count_problems(
    request: ExportTraceServiceRequest, *, window: SpanWindow = _ALL_TIMES
) -> tuple[int, int, list[str]]:
    """(spans, rejected spans, the first 20 problems) of a decoded request."""
    total = rejected = 0
    problems: list[str] = []
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
            bad = bad_spans(spans, span_columns(spans), window=window)
            rejected += len(bad)
            for index, problem in bad[: max(0, 20 - len(problems))]:
                problems.append(
                    f"resourceSpans[{r_index}].scopeSpans[{s_index}].spans[{index}]: {problem}"
                )
    return total, rejected, problems
