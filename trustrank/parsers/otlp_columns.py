"""An OTLP metrics request as columns, for storage: the worker's side of the receiver's
`otlp_metrics_check`.

`otlp_metrics_columns(body=…)` reads a protobuf `ExportMetricsServiceRequest` whose every
data point is a good gauge or sum point in one of the two layouts every mainstream encoder
writes ([start][time][double] or [time][double], then attributes) as whole-request
columns: per point its metric, its label set, its time and its value, with the metric
names, kinds and units and the distinct label sets beside them. It does per metric only
what the protobuf walk needs and per point only C-level work (one join of the fixed
prefixes, numpy columns, a dictionary look-up of the attribute bytes), where
`otlp_metrics_parse` builds a `Metric` and a label list per metric. Anything else (another
metric type, an integer value, exemplars, a point that would be rejected or is stale, JSON)
answers None: the caller parses in full, and the points stored are the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from trustrank.parsers.otlp_metrics import (
    _LEAD,
    _LONG_POINT,
    _PREFIX_18,
    _PREFIX_27,
    _REST_18,
    _REST_27,
    _SHORT_POINT,
    _TEMPORALITY,
    OtlpLimits,
    OtlpMetricsError,
    _any_str,
    _Labeler,
    _rest_entry,
    _ShadowRequest,
    _window,
)
from trustrank.parsers.series import Labels, MetricKind

# Attribute bytes -> decoded labels, kept across requests by a worker (a Collector sends
# the same label sets scrape after scrape). Bounded: about 2 KB an entry.
_LABELS_CACHE: dict[OtlpLimits, dict[bytes, Labels]] = {}
_LABELS_CACHE_MAX = 100_000


@dataclass(frozen=True, slots=True)
class MetricColumns:
    """Point i is a point of metric `point_metric[i]` with the label set
    `labels[point_labels[i]]` (the point's own attributes, before the resource's), time
    `time_ns[i]` and value `values[i]`. Metric j is `names[j]` of kind `kinds[j]` and unit
    `units[j]`, in the resource `resources[metric_resource[j]]` (its attributes)."""

    resources: tuple[dict[str, str], ...]
    names: tuple[str, ...]
    kinds: tuple[MetricKind, ...]
    units: tuple[str, ...]
    metric_resource: np.ndarray[Any, Any]
    point_metric: np.ndarray[Any, Any]
    labels: tuple[Labels, ...]
    point_labels: np.ndarray[Any, Any]
    time_ns: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]

    @property
    def points(self) -> int:
        return len(self.values)


def _kind(kind: str, data: Any) -> MetricKind:
    """As `Metric.kind` for gauges and sums."""
    if kind == "gauge":
        return MetricKind.GAUGE
    if _TEMPORALITY.get(data.aggregation_temporality, "") == "delta":
        return MetricKind.DELTA
    return MetricKind.COUNTER if data.is_monotonic else MetricKind.GAUGE


def _layout(
    raws: list[bytes], width: int, window: tuple[int, int]
) -> tuple[np.ndarray[Any, Any], list[bytes]] | None:
    """The (time, value) columns and the attribute bytes of points all in the layout
    `width` (27: start, time, double; 18: time, double) with times in the window and
    finite values; None when any is not."""
    count = len(raws)
    prefix, rest = (_PREFIX_27, _REST_27) if width == 27 else (_PREFIX_18, _REST_18)
    prefixes = b"".join(map(prefix, raws))
    if len(prefixes) != width * count:
        return None
    tags = (b"\x11", b"\x19", b"\x21") if width == 27 else (b"\x19", b"\x21")
    for offset, tag in zip((0, 9, 18), tags, strict=False):
        if prefixes[offset::width] != tag * count:
            return None
    columns = np.frombuffer(prefixes, dtype=_LONG_POINT if width == 27 else _SHORT_POINT)
    times = columns["time"]
    if int(times.min()) < window[0] or int(times.max()) > window[1]:
        return None
    if not np.isfinite(columns["value"]).all():
        return None
    return columns, list(map(rest, raws))


def otlp_metrics_columns(
    *, body: bytes, now_ns: int | None = None, limits: OtlpLimits | None = None
) -> MetricColumns | None:
    """The request as columns, or None when it is not all good gauge and sum points in
    the usual layouts (parse it with `otlp_metrics_parse` then). Raises
    `OtlpMetricsError` when the body is no protobuf request at all."""
    limits = limits or OtlpLimits()
    window = _window(now_ns, limits)
    try:
        request: Any = _ShadowRequest.FromString(body)
    except (DecodeError, RecursionError) as exc:
        raise OtlpMetricsError(
            f"body is not a protobuf ExportMetricsServiceRequest: {exc}"
        ) from exc
    max_name = limits.max_name_length
    raws: list[bytes] = []
    resources: list[dict[str, str]] = []
    names: list[str] = []
    kinds: list[MetricKind] = []
    units: list[str] = []
    metric_resource: list[int] = []
    counts: list[int] = []
    for resource_metrics in request.resource_metrics:
        at = len(resources)
        before = len(names)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind is None:
                    continue
                name = metric.name
                if (kind != "gauge" and kind != "sum") or not 0 < len(name) <= max_name or (
                    "\x00" in name
                ):
                    return None
                data = metric.gauge if kind == "gauge" else metric.sum
                points = data.data_points
                if not points:
                    continue
                raws.extend(points)
                counts.append(len(points))
                names.append(name)
                kinds.append(_kind(kind, data))
                units.append(metric.unit)
        if len(names) > before:
            resources.append({
                kv.key: _any_str(kv.value) for kv in resource_metrics.resource.attributes
            })
            metric_resource.extend([at] * (len(names) - before))
    count = len(raws)
    times = np.empty(count, dtype=np.uint64)
    values = np.empty(count, dtype=np.float64)
    point_labels = np.empty(count, dtype=np.int32)
    distinct: dict[bytes, int] = {}
    if count:
        try:
            leads = np.frombuffer(bytes(map(_LEAD, raws)), dtype=np.uint8)
        except IndexError:
            return None  # an empty point: no value
        longs = leads == 0x11
        long_count = int(longs.sum())
        if long_count + int((leads == 0x19).sum()) != count:
            return None
        if long_count in (0, count):
            groups = [(raws, 27 if long_count else 18, slice(None))]
        else:
            long_at, short_at = np.flatnonzero(longs), np.flatnonzero(~longs)
            groups = [([raws[i] for i in long_at.tolist()], 27, long_at),
                      ([raws[i] for i in short_at.tolist()], 18, short_at)]
        for group, width, spots in groups:
            laid = _layout(group, width, window)
            if laid is None:
                return None
            columns, rests = laid
            times[spots] = columns["time"]
            values[spots] = columns["value"]
            for rest in set(rests) - distinct.keys():
                distinct[rest] = len(distinct)
            point_labels[spots] = np.fromiter(map(distinct.__getitem__, rests),
                                              dtype=np.int32, count=len(rests))
    cache = _LABELS_CACHE.setdefault(limits, {})
    labeler = _Labeler(limits)
    decoded: list[Labels] = []
    for rest in distinct:
        labels = cache.get(rest)
        if labels is None:
            entry = _rest_entry(rest, labeler)
            if entry.__class__ is not tuple:
                return None
            if len(cache) >= _LABELS_CACHE_MAX:
                cache.clear()
            labels = cache[rest] = entry  # type: ignore[assignment]
        decoded.append(labels)
    return MetricColumns(
        resources=tuple(resources), names=tuple(names), kinds=tuple(kinds),
        units=tuple(units), metric_resource=np.array(metric_resource, dtype=np.int32),
        point_metric=np.repeat(np.arange(len(names), dtype=np.int32),
                               np.array(counts, dtype=np.int64)),
        labels=tuple(decoded), point_labels=point_labels, time_ns=times, values=values,
    )

