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

from collections.abc import Iterator

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from trustrank.parsers.otlp_checks import (
    _ALL_TIMES,
    ENCODINGS,
    ENVIRONMENT_MAX,
    JSON,
    PROTOBUF,
    SERVICE_NAME_MAX,
    SERVICE_NAMESPACE_MAX,
    SPAN_NAME_MAX,
    Decoded,
    OtlpDecodeError,
    SpanWindow,
    count_problems,
    media_type,
    resource_problem,
    span_problem,
)
from trustrank.parsers.otlp_json import decode_json
from trustrank.parsers.otlp_rows import (
    SPAN_FRAMES_DEFAULT,
    STACK_FRAMES_DEFAULT,
    ResourceSpans,
    ScopeSpans,
    SpanBatch,
    SpanRow,
    any_value_text,
    sample_threshold,
    spans_from_request,
)
from trustrank.parsers.otlp_span_columns import spans_from_protobuf, spans_usable_protobuf
from trustrank.parsers.otlp_wire import protobuf_split

__all__ = [
    "ENCODINGS", "ENVIRONMENT_MAX", "JSON", "PROTOBUF", "SERVICE_NAMESPACE_MAX",
    "SERVICE_NAME_MAX", "SPAN_FRAMES_DEFAULT", "SPAN_NAME_MAX", "STACK_FRAMES_DEFAULT",
    "Decoded", "OtlpDecodeError", "ResourceSpans", "ScopeSpans", "SpanBatch", "SpanRow",
    "SpanWindow", "any_value_text", "media_type", "otlp_chunks", "otlp_decode",
    "otlp_span_batches", "otlp_validate", "protobuf_split", "resource_problem",
    "response_encode", "sample_threshold", "span_problem", "spans_from_request",
    "status_encode",
]


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
    exactly as the receiver counted them. Protobuf parts are read column by column
    (`otlp_span_columns`); JSON through the decoded request."""
    if encoding == PROTOBUF:
        parts = protobuf_split(body, max_bytes=max_bytes) if len(body) > max_bytes else [body]
        for part in parts:
            yield spans_from_protobuf(
                part, name_sample_rate=name_sample_rate, window=window,
                max_stack_frames=max_stack_frames, max_span_frames=max_span_frames,
            )
        return
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
        usable = spans_usable_protobuf(body, window=window)
        if usable is not None:
            return Decoded(request=request, total_spans=usable, rejected_spans=0, problems=())
        total, rejected, problems = count_problems(request, window=window)
        return Decoded(
            request=request, total_spans=total, rejected_spans=rejected, problems=tuple(problems)
        )
    if encoding == JSON:
        return decode_json(body, count=count, window=window)
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
