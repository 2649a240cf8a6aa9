"""OTLP/JSON metrics requests read into the same columns as protobuf (see below)."""

from __future__ import annotations

import base64
import binascii
from array import array
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.metrics.v1 import metrics_pb2

from trustrank.parsers.otlp_metrics_model import (
    FLAG_NO_RECORDED_VALUE,
    Metric,
    NumberPoints,
    OtlpLimits,
    OtlpMetricsError,
    ResourceMetrics,
)
from trustrank.parsers.otlp_metrics_points import (
    metric_read,
    points_checked,
    temporality_of,
)
from trustrank.parsers.otlp_metrics_shadow import (
    Labeler,
    ShadowMetric,
    Tally,
    Where,
)
from trustrank.parsers.series import Labels


def _hex_to_b64(value: object) -> object:
    if isinstance(value, str) and value:
        try:
            return base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            # Not hex: leave it, ParseDict accepts base64 as the proto3 mapping says.
            return value
    return value


# --- OTLP/JSON ---------------------------------------------------------------------------
#
# protobuf's json_format parses about 6,000 dcgm points a second (pure Python), so gauges
# and sums are read straight from the decoded JSON into the same columns; the rarer
# histogram, exponential histogram and summary metrics go through json_format one metric
# at a time and then down the protobuf path. Field names are lowerCamelCase as OTLP/JSON
# requires, with the proto field names accepted too (a proto3 JSON parser must).


class _Bad(Exception):
    """A JSON point that cannot be read; counted as rejected, not raised."""


def _field(item: dict[str, Any], camel: str, snake: str) -> Any:
    value = item.get(camel)
    return item.get(snake) if value is None else value


def _json_list(item: Any, camel: str, snake: str, where: str) -> list[Any]:
    if not isinstance(item, dict):
        raise OtlpMetricsError(f"{where} must be a JSON object")
    value = _field(item, camel, snake)
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpMetricsError(f"{where}.{camel} must be a JSON array")
    return value


def _json_any_str(value: Any) -> str:
    if not isinstance(value, dict):
        raise _Bad("an attribute value is not an AnyValue object")
    if "stringValue" in value:
        text = value["stringValue"]
        if not isinstance(text, str):
            raise _Bad("stringValue is not a string")
        return text
    for key, item in value.items():
        if key in ("boolValue", "bool_value"):
            return "true" if item is True else "false"
        if key in ("intValue", "int_value"):
            return str(int(item))
        if key in ("doubleValue", "double_value"):
            return repr(float(item))
        if key in ("bytesValue", "bytes_value", "string_value"):
            return str(item)
        if key in ("arrayValue", "array_value", "kvlistValue", "kvlist_value"):
            return orjson.dumps(item).decode()
    return ""


def _json_labels(
    attributes: Any, labeler: Labeler, cache: dict[bytes, Any]
) -> tuple[Labels, str | None]:
    if not attributes:
        attributes = []
    elif not isinstance(attributes, list):
        raise _Bad("attributes is not an array")
    # Keyed on the attributes' JSON text: one C call, where building the pairs to look
    # them up would cost about four times as much per point.
    key = orjson.dumps(attributes)
    got = cache.get(key)
    if got is None:
        pairs = tuple((kv["key"], _json_any_str(kv.get("value"))) for kv in attributes)
        if any(not isinstance(name, str) for name, _ in pairs):
            raise _Bad("an attribute key is not a string")
        got = cache[key] = labeler.check(pairs)
    return got  # type: ignore[no-any-return]


def _json_number_points(
    points: Any, *, labeler: Labeler, tally: Tally, where: Where, window: tuple[int, int],
    cache: dict[bytes, Any],
) -> NumberPoints:
    columns = NumberPoints([], array("Q"), array("Q"), array("d"))
    if not isinstance(points, list):
        tally.reject(where, "dataPoints is not an array")
        return columns
    for point in points:
        try:
            if not isinstance(point, dict):
                raise _Bad("a data point is not an object")
            at = int(_field(point, "timeUnixNano", "time_unix_nano") or 0)
            start = int(_field(point, "startTimeUnixNano", "start_time_unix_nano") or 0)
            flags = int(point.get("flags") or 0)
            double = _field(point, "asDouble", "as_double")
            if double is not None:
                value = float(double)
            else:
                integer = _field(point, "asInt", "as_int")
                if integer is None:
                    if flags & FLAG_NO_RECORDED_VALUE:
                        tally.stale += 1
                        continue
                    raise _Bad("a data point has no value")
                value = float(int(integer))
            labels, problem = _json_labels(point.get("attributes"), labeler, cache)
            if not (0 <= at < 2**64 and 0 <= start < 2**64):
                raise _Bad("a timestamp is out of range")
        except (_Bad, TypeError, ValueError, KeyError, OverflowError) as exc:
            tally.reject(where, f"a data point cannot be read: {exc}")
            continue
        if flags & FLAG_NO_RECORDED_VALUE:
            tally.stale += 1
            continue
        if problem is not None:
            tally.reject(where, problem)
            continue
        columns.labels.append(labels)
        columns.start_ns.append(start)
        columns.time_ns.append(at)
        columns.values.append(value)
    return points_checked(columns, tally=tally, where=where, window=window)


def _json_metric(
    metric: Any, *, scope_name: str, labeler: Labeler, tally: Tally, where: Where,
    window: tuple[int, int], limits: OtlpLimits, cache: dict[bytes, Any],
) -> Metric | None:
    if not isinstance(metric, dict):
        raise OtlpMetricsError("a metric must be a JSON object")
    gauge, total = metric.get("gauge"), metric.get("sum")
    if not isinstance(gauge, dict) and not isinstance(total, dict):
        return _json_other_metric(
            metric, scope_name=scope_name, labeler=labeler, tally=tally, where=where,
            window=window, limits=limits,
        )
    data: dict[str, Any] = gauge if isinstance(gauge, dict) else total  # type: ignore[assignment]
    points = _field(data, "dataPoints", "data_points") or []
    count = len(points) if isinstance(points, list) else 1
    tally.total += count
    name = metric.get("name")
    if (
        not isinstance(name, str) or not name or len(name) > limits.max_name_length
        or "\x00" in name
    ):
        tally.reject(where, "metric name is empty, too long or holds NUL", count)
        return None
    where = (where[0], where[1], where[2], name)
    unit, description = metric.get("unit") or "", metric.get("description") or ""
    if not isinstance(unit, str) or not isinstance(description, str):
        tally.reject(where, "unit and description must be strings", count)
        return None
    numbers = _json_number_points(
        points, labeler=labeler, tally=tally, where=where, window=window, cache=cache,
    )
    if isinstance(gauge, dict):
        return Metric(name, unit, description, "gauge", "", False, scope_name, numbers)
    temporality = _field(data, "aggregationTemporality", "aggregation_temporality")
    temporality = {
        "AGGREGATION_TEMPORALITY_DELTA": 1, "AGGREGATION_TEMPORALITY_CUMULATIVE": 2,
    }.get(temporality, temporality)
    return Metric(
        name, unit, description, "sum",
        temporality_of(temporality) if isinstance(temporality, int) else "",
        _field(data, "isMonotonic", "is_monotonic") is True, scope_name, numbers,
    )


def _json_ids_to_b64(metric: dict[str, Any]) -> None:
    """OTLP/JSON writes exemplar trace and span ids as hex; proto3 JSON expects base64."""
    for kind in ("histogram", "exponentialHistogram", "exponential_histogram"):
        data = metric.get(kind)
        if not isinstance(data, dict):
            continue
        for point in _field(data, "dataPoints", "data_points") or ():
            for exemplar in (point.get("exemplars") or ()) if isinstance(point, dict) else ():
                if isinstance(exemplar, dict):
                    for key in ("traceId", "spanId", "trace_id", "span_id"):
                        if key in exemplar:
                            exemplar[key] = _hex_to_b64(exemplar[key])


def _json_other_metric(
    metric: dict[str, Any], *, scope_name: str, labeler: Labeler, tally: Tally,
    where: Where, window: tuple[int, int], limits: OtlpLimits,
) -> Metric | None:
    try:
        _json_ids_to_b64(metric)
        message = json_format.ParseDict(metric, metrics_pb2.Metric(), ignore_unknown_fields=True)
        shadow = ShadowMetric.FromString(message.SerializeToString())
    except (json_format.ParseError, ValueError, TypeError, AttributeError, DecodeError,
            binascii.Error, RecursionError) as exc:
        raise OtlpMetricsError(f"not an OTLP/JSON metric: {exc}") from exc
    return metric_read(
        shadow, scope_name=scope_name, labeler=labeler, tally=tally, where=where,
        window=window, limits=limits,
    )


def json_resources(
    body: bytes, *, labeler: Labeler, tally: Tally, window: tuple[int, int],
    limits: OtlpLimits,
) -> list[ResourceMetrics]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OtlpMetricsError(f"body is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise OtlpMetricsError("body must be a JSON object (an ExportMetricsServiceRequest)")
    cache: dict[bytes, Any] = {}
    resources = []
    for r_index, resource_metrics in enumerate(
        _json_list(document, "resourceMetrics", "resource_metrics", "body")
    ):
        where = f"resourceMetrics[{r_index}]"
        resource = (resource_metrics or {}).get("resource") if isinstance(
            resource_metrics, dict) else None
        try:
            attributes = {
                kv["key"]: _json_any_str(kv.get("value"))
                for kv in _json_list(resource or {}, "attributes", "attributes", where)
            }
        except (_Bad, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise OtlpMetricsError(f"{where}.resource.attributes: {exc}") from exc
        metrics: list[Metric] = []
        for s_index, scope_metrics in enumerate(
            _json_list(resource_metrics, "scopeMetrics", "scope_metrics", where)
        ):
            scope = scope_metrics.get("scope") if isinstance(scope_metrics, dict) else None
            scope_name = scope.get("name") if isinstance(scope, dict) else ""
            for m_index, metric in enumerate(
                _json_list(scope_metrics, "metrics", "metrics", f"{where}.scopeMetrics")
            ):
                parsed = _json_metric(
                    metric, scope_name=scope_name if isinstance(scope_name, str) else "",
                    labeler=labeler, tally=tally, where=(r_index, s_index, m_index, ""),
                    window=window, limits=limits, cache=cache,
                )
                if parsed is not None:
                    metrics.append(parsed)
        resources.append(ResourceMetrics(attributes=attributes, metrics=tuple(metrics)))
    return resources
