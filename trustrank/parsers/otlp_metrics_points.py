"""Data points of one OTLP metric read from the shadow schema (`otlp_metrics`): number points
by `struct` in the usual layouts and through the message API otherwise, histogram,
exponential histogram and summary points one by one."""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Iterable
from itertools import pairwise
from math import isfinite
from operator import itemgetter
from typing import Any

from google.protobuf.message import DecodeError

from trustrank.parsers.otlp_metrics_model import (
    FLAG_NO_RECORDED_VALUE,
    ExponentialHistogramPoint,
    HistogramPoint,
    Metric,
    NumberPoints,
    OtlpLimits,
    SummaryPoint,
)
from trustrank.parsers.otlp_metrics_shadow import (
    Labeler,
    ShadowNumberPoint,
    Tally,
    Unusual,
    Where,
)
from trustrank.parsers.series import Labels

# Number point prefixes as encoders write them: [start 0x11][time 0x19][double 0x21].
_START_TIME_VALUE = struct.Struct("<xQxQxd")
_TIME_VALUE = struct.Struct("<xQxd")


def number_points_read(
    raw_points: Iterable[bytes], labeler: Labeler, tally: Tally, where: Where,
    window: tuple[int, int],
) -> NumberPoints:
    """Positional arguments and the loop kept flat on purpose: this runs once per point."""
    raws = list(raw_points)
    bulk = _bulk_number_points(raws, labeler.rest_cache, labeler.runs)
    if bulk is not None:
        times = bulk.time_ns
        if min(times) >= window[0] and max(times) <= window[1] and isfinite(sum(bulk.values)):
            return bulk
        return _filter_points(bulk, tally=tally, where=where, window=window)
    labels_col: list[Labels] = []
    start_col: array[int] = array("Q")
    time_col: array[int] = array("Q")
    value_col: array[float] = array("d")
    add_labels, add_start, add_time, add_value = (
        labels_col.append, start_col.append, time_col.append, value_col.append,
    )
    rest_cache = labeler.rest_cache
    entry: Any
    unpack_start_double = _START_TIME_VALUE.unpack_from
    unpack_double = _TIME_VALUE.unpack_from
    for raw in raws:
        # The two usual layouts with a double value: [start][time][value]… or
        # [time][value]…; what follows (attributes, flags) keys the label cache.
        if (
            raw[:1] == b"\x11" and raw[9:10] == b"\x19" and raw[18:19] == b"\x21"
            and len(raw) >= 27
        ):
            start, at, value = unpack_start_double(raw)
            rest = raw[27:]
        elif raw[:1] == b"\x19" and raw[9:10] == b"\x21" and len(raw) >= 18:
            start = 0
            at, value = unpack_double(raw)
            rest = raw[18:]
        else:
            rest = None
        if rest is not None:
            entry = rest_cache.get(rest)
            if entry is None:
                entry = labeler.unusual.get(rest)
                if entry is None:
                    entry = rest_entry(rest, labeler)
                    if entry.__class__ is tuple:
                        rest_cache[rest] = entry
                    else:
                        labeler.unusual[rest] = entry
            if entry.__class__ is tuple:
                add_labels(entry)  # type: ignore[arg-type]
                add_start(start)
                add_time(at)
                add_value(value)
                continue
        _general_point(raw, entry if rest is not None else None, labeler, tally, where,
                       labels_col, start_col, time_col, value_col)
    return points_checked(
        NumberPoints(labels_col, start_col, time_col, value_col),
        tally=tally, where=where, window=window,
    )


# Whole-metric decoding: when every point of a metric has the same prefix layout and
# every label set is already cached, the columns come from a handful of C-level calls
# (a join of the prefixes, one struct unpack, slices) instead of a Python loop per point.
# dcgm-exporter metrics have one point per GPU and a resource repeats the same label sets
# in each of its metrics, so after a resource's first metric nearly all go this way.
PREFIX_27 = itemgetter(slice(None, 27))
REST_27 = itemgetter(slice(27, None))
PREFIX_18 = itemgetter(slice(None, 18))
REST_18 = itemgetter(slice(18, None))
_BULK: dict[tuple[int, int], tuple[struct.Struct, bytes, bytes, bytes]] = {}


def _bulk_layout(width: int, count: int) -> tuple[struct.Struct, bytes, bytes, bytes]:
    layout = _BULK.get((width, count))
    if layout is None:
        if width == 27:
            layout = (struct.Struct("<" + "xQxQxd" * count), b"\x11" * count, b"\x19" * count,
                      b"\x21" * count)
        else:
            layout = (struct.Struct("<" + "xQxd" * count), b"\x19" * count, b"\x21" * count, b"")
        if len(_BULK) < 256:
            _BULK[(width, count)] = layout
    return layout


def _bulk_labels(
    rests: tuple[bytes, ...], cache: dict[bytes, Labels], runs: dict[bytes, Any]
) -> list[Labels] | None:
    """Label sets for a metric's attribute bytes. A resource repeats the same sequence
    of label sets metric after metric, so the sequence is remembered by its first entry
    and checked by comparing the bytes (memcmp), not hashing each again."""
    run = runs.get(rests[0])
    if run is not None and run[0] == rests:
        return list(run[1])
    labels = list(map(cache.get, rests))
    if None in labels:
        return None
    runs[rests[0]] = (rests, labels)
    return labels  # type: ignore[return-value]


def _bulk_number_points(
    raws: list[bytes], cache: dict[bytes, Labels], runs: dict[bytes, Any]
) -> NumberPoints | None:
    count = len(raws)
    if not count or count > 4096:
        return None
    lead = raws[0][:1]
    if lead == b"\x11":
        prefixes = b"".join(map(PREFIX_27, raws))
        if len(prefixes) != 27 * count:
            return None
        unpack, first, second, third = _bulk_layout(27, count)
        if (
            prefixes[0::27] != first or prefixes[9::27] != second
            or prefixes[18::27] != third
        ):
            return None
        labels = _bulk_labels(tuple(map(REST_27, raws)), cache, runs)
        if labels is None:
            return None
        flat = unpack.unpack(prefixes)
        return NumberPoints(
            labels, array("Q", flat[0::3]), array("Q", flat[1::3]), array("d", flat[2::3])  # type: ignore[arg-type]
        )
    if lead == b"\x19":
        prefixes = b"".join(map(PREFIX_18, raws))
        if len(prefixes) != 18 * count:
            return None
        unpack, first, second, _ = _bulk_layout(18, count)
        if prefixes[0::18] != first or prefixes[9::18] != second:
            return None
        labels = _bulk_labels(tuple(map(REST_18, raws)), cache, runs)
        if labels is None:
            return None
        flat = unpack.unpack(prefixes)
        return NumberPoints(
            labels, array("Q", bytes(8 * count)), array("Q", flat[0::2]),  # type: ignore[arg-type]
            array("d", flat[1::2]),
        )
    return None


def _general_point(
    raw: bytes, entry: Any, labeler: Labeler, tally: Tally, where: Where,
    labels_col: list[Labels], start_col: array[int], time_col: array[int],
    value_col: array[float],
) -> None:
    """Every point the fast layout does not cover: integer values, other field orders,
    exemplars, flags, bad labels."""
    if entry is not None and not entry.slow:
        if entry.stale:
            tally.stale += 1
        elif entry.problem is not None:
            tally.reject(where, entry.problem)
        return
    try:
        point: Any = ShadowNumberPoint.FromString(raw)
    except DecodeError:
        tally.reject(where, "a data point is not a valid NumberDataPoint")
        return
    if point.flags & FLAG_NO_RECORDED_VALUE:
        tally.stale += 1
        return
    which = point.WhichOneof("value")
    if which is None:
        tally.reject(where, "a data point has no value")
        return
    labels, problem = labeler.from_raw(tuple(point.attributes))
    if problem is not None:
        tally.reject(where, problem)
        return
    labels_col.append(labels)
    start_col.append(point.start_time_unix_nano)
    time_col.append(point.time_unix_nano)
    value_col.append(float(point.as_int) if which == "as_int" else point.as_double)


def points_checked(
    points: NumberPoints, *, tally: Tally, where: Where, window: tuple[int, int]
) -> NumberPoints:
    # Whole-column checks first: a C-speed min/max/sum settles the usual all-good case.
    if points.values and (
        min(points.time_ns) < window[0] or max(points.time_ns) > window[1]
        or not math.isfinite(sum(points.values))
    ):
        return _filter_points(points, tally=tally, where=where, window=window)
    return points


def rest_entry(rest: bytes, labeler: Labeler) -> Labels | Unusual:
    if rest and rest[0] not in (0x3A, 0x40):
        # Exemplars or unknown fields between the value and the attributes.
        return Unusual(slow=True)
    try:
        point: Any = ShadowNumberPoint.FromString(rest)
    except DecodeError:
        return Unusual(problem="a data point is not a valid NumberDataPoint")
    if point.time_unix_nano or point.start_time_unix_nano or point.WhichOneof("value"):
        # A repeated scalar field after the attributes overrides the prefix (last one
        # wins in protobuf): only the general path gets that right.
        return Unusual(slow=True)
    labels, problem = labeler.from_raw(tuple(point.attributes))
    if point.flags & FLAG_NO_RECORDED_VALUE:
        return Unusual(stale=True)
    if problem is not None:
        return Unusual(labels=labels, problem=problem)
    return labels


def _filter_points(
    points: NumberPoints, *, tally: Tally, where: Where, window: tuple[int, int]
) -> NumberPoints:
    keep = NumberPoints([], array("Q"), array("Q"), array("d"))
    lo, hi = window
    for labels, start, at, value in zip(
        points.labels, points.start_ns, points.time_ns, points.values, strict=True
    ):
        if not lo <= at <= hi:
            tally.reject(where, f"timestamp {at} ns is zero or outside the accepted window")
            continue
        if not math.isfinite(value):
            tally.reject(where, f"value {value} is not a finite number")
            continue
        keep.labels.append(labels)
        keep.start_ns.append(start)
        keep.time_ns.append(at)
        keep.values.append(value)
    return keep


TEMPORALITY = {1: "delta", 2: "cumulative"}


def temporality_of(value: int) -> str:
    return TEMPORALITY.get(value, "")


def _optional(point: Any, name: str) -> float | None:
    return getattr(point, name) if point.HasField(name) else None


def _histogram_points(
    metric: Any, *, labeler: Labeler, tally: Tally, where: Where, window: tuple[int, int]
) -> tuple[HistogramPoint, ...]:
    kept = []
    for point in metric.histogram.data_points:
        labels, problem = labeler.from_raw(tuple(point.attributes))
        bounds = tuple(point.explicit_bounds)
        counts = tuple(point.bucket_counts)
        total = point.sum if point.HasField("sum") else 0.0
        if problem is None and not window[0] <= point.time_unix_nano <= window[1]:
            problem = f"timestamp {point.time_unix_nano} ns is zero or outside the window"
        if problem is None and counts and len(counts) != len(bounds) + 1:
            problem = "bucket_counts must have one more entry than explicit_bounds"
        if problem is None and any(
            not math.isfinite(b) or b >= nxt for b, nxt in pairwise(bounds)
        ):
            problem = "explicit_bounds must be finite and strictly increasing"
        if problem is None and not math.isfinite(total):
            problem = "sum is not a finite number"
        if problem is not None:
            tally.reject(where, problem)
            continue
        if point.flags & FLAG_NO_RECORDED_VALUE:
            tally.stale += 1
            continue
        kept.append(HistogramPoint(
            labels=labels, start_ns=point.start_time_unix_nano, time_ns=point.time_unix_nano,
            count=point.count, sum=_optional(point, "sum"), min=_optional(point, "min"),
            max=_optional(point, "max"), bounds=bounds, bucket_counts=counts,
        ))
    return tuple(kept)


def _exponential_points(
    metric: Any, *, labeler: Labeler, tally: Tally, where: Where, window: tuple[int, int]
) -> tuple[ExponentialHistogramPoint, ...]:
    kept = []
    for point in metric.exponential_histogram.data_points:
        labels, problem = labeler.from_raw(tuple(point.attributes))
        if problem is None and not window[0] <= point.time_unix_nano <= window[1]:
            problem = f"timestamp {point.time_unix_nano} ns is zero or outside the window"
        if problem is None and point.HasField("sum") and not math.isfinite(point.sum):
            problem = "sum is not a finite number"
        if problem is not None:
            tally.reject(where, problem)
            continue
        if point.flags & FLAG_NO_RECORDED_VALUE:
            tally.stale += 1
            continue
        kept.append(ExponentialHistogramPoint(
            labels=labels, start_ns=point.start_time_unix_nano, time_ns=point.time_unix_nano,
            count=point.count, sum=_optional(point, "sum"), min=_optional(point, "min"),
            max=_optional(point, "max"), scale=point.scale, zero_count=point.zero_count,
            zero_threshold=point.zero_threshold, positive_offset=point.positive.offset,
            positive_counts=tuple(point.positive.bucket_counts),
            negative_offset=point.negative.offset,
            negative_counts=tuple(point.negative.bucket_counts),
        ))
    return tuple(kept)


def _summary_points(
    metric: Any, *, labeler: Labeler, tally: Tally, where: Where, window: tuple[int, int]
) -> tuple[SummaryPoint, ...]:
    kept = []
    for point in metric.summary.data_points:
        labels, problem = labeler.from_raw(tuple(point.attributes))
        if problem is None and not window[0] <= point.time_unix_nano <= window[1]:
            problem = f"timestamp {point.time_unix_nano} ns is zero or outside the window"
        if problem is None and not math.isfinite(point.sum):
            problem = "sum is not a finite number"
        if problem is not None:
            tally.reject(where, problem)
            continue
        if point.flags & FLAG_NO_RECORDED_VALUE:
            tally.stale += 1
            continue
        kept.append(SummaryPoint(
            labels=labels, start_ns=point.start_time_unix_nano, time_ns=point.time_unix_nano,
            count=point.count, sum=point.sum,
            quantiles=tuple((q.quantile, q.value) for q in point.quantile_values),
        ))
    return tuple(kept)


def metric_read(
    metric: Any, *, scope_name: str, labeler: Labeler, tally: Tally, where: Where,
    window: tuple[int, int], limits: OtlpLimits,
) -> Metric | None:
    kind = metric.WhichOneof("data")
    if kind is None:
        # No data at all: nothing to keep, nothing to reject.
        return None
    data = getattr(metric, kind)
    count = len(data.data_points)
    tally.total += count
    name = metric.name
    if not name or len(name) > limits.max_name_length or "\x00" in name:
        tally.reject(where, "metric name is empty, too long or holds NUL", count)
        return None
    where = (where[0], where[1], where[2], name)
    # Gauges and sums are the volume: built positionally, no keyword dict per metric.
    if kind == "gauge":
        numbers = number_points_read(data.data_points, labeler, tally, where, window)
        return Metric(
            name, metric.unit, metric.description, "gauge", "", False, scope_name, numbers
        )
    if kind == "sum":
        numbers = number_points_read(data.data_points, labeler, tally, where, window)
        return Metric(
            name, metric.unit, metric.description, "sum",
            temporality_of(data.aggregation_temporality), data.is_monotonic, scope_name, numbers,
        )
    common: dict[str, Any] = {
        "name": name, "unit": metric.unit, "description": metric.description,
        "scope_name": scope_name,
    }
    if kind == "histogram":
        return Metric(
            type="histogram",
            temporality=temporality_of(metric.histogram.aggregation_temporality),
            monotonic=True, **common,
            histograms=_histogram_points(
                metric, labeler=labeler, tally=tally, where=where, window=window
            ),
        )
    if kind == "exponential_histogram":
        return Metric(
            type="exponential_histogram",
            temporality=temporality_of(metric.exponential_histogram.aggregation_temporality),
            monotonic=True, **common,
            exponential_histograms=_exponential_points(
                metric, labeler=labeler, tally=tally, where=where, window=window
            ),
        )
    if kind == "summary":
        return Metric(
            type="summary", temporality="cumulative", monotonic=True, **common,
            summaries=_summary_points(
                metric, labeler=labeler, tally=tally, where=where, window=window
            ),
        )
    # No data at all: nothing to keep, nothing to reject.
    return None
