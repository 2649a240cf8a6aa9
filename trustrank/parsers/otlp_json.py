"""OTLP JSON trace bodies -> a decoded ExportTraceServiceRequest.

The OTLP JSON mapping differs from the proto3 JSON mapping in one way that matters: trace,
span and parent span ids are hex strings, not base64. Enum values may be integers or names
and 64-bit integers strings or numbers; protobuf's `ParseDict` already accepts both.
Unknown fields are ignored, as the specification asks.
"""

from __future__ import annotations

import base64

import orjson
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans as ResourceSpansMessage

from trustrank.parsers.otlp_checks import (
    _ALL_TIMES,
    Decoded,
    OtlpDecodeError,
    SpanWindow,
    count_problems,
)


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


def decode_json(body: bytes, *, count: bool = True, window: SpanWindow = _ALL_TIMES) -> Decoded:
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
        _, late_rejected, late_problems = count_problems(request, window=window)
    return Decoded(
        request=request,
        total_spans=total,
        rejected_spans=rejected + late_rejected,
        problems=tuple(problems + late_problems),
    )
