"""An OTLP metrics request as columns: the receiver's check and the worker's input.

`otlp_metrics_raw_columns(body=…)` reads a protobuf `ExportMetricsServiceRequest` whose every
data point is a good gauge or sum point in one of the two layouts every mainstream encoder
writes ([start][time][double] or [time][double], then attributes) as whole-request
columns: per point its metric, its attribute bytes, its time and its value, with the
metric names, kinds and units beside them. It does per metric only what the protobuf walk
needs and per point only C-level work (one join of the fixed prefixes, numpy columns, a
dictionary look-up of the attribute bytes); each distinct attribute set is decoded once
to check it, and remembered as good across requests. Anything else (another metric type,
an integer value, exemplars, a point that would be rejected or is stale) answers None:
the caller parses in full (`otlp_metrics_parse`), which gives the same points.

A receiver answers a request's partial success from these columns (all its points are
good) and stores them beside the raw body, packed (`columns_pack`), so that the worker
need not decompress and read the request a second time: `columns_unpack` gives it the
columns the raw body would, and `rest_labels` the label set of attribute bytes it has not
met before. The raw body stays the source of truth; a worker that finds no packed
columns, or a version it does not know, reads the body.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, methodcaller
from typing import Any

import cramjam
import numpy as np
import orjson

from trustrank.parsers.otlp_metrics import (
    CLEAN_RESTS,
    CLEAN_RESTS_MAX,
    LEAD,
    LONG_POINT,
    SHORT_POINT,
    _shadow_request,
    _window,
    otlp_metrics_parse,
    resource_labels_problem,
)
from trustrank.parsers.otlp_metrics_model import PROTOBUF, MetricsCheck, OtlpLimits
from trustrank.parsers.otlp_metrics_points import (
    PREFIX_18,
    PREFIX_27,
    REST_18,
    REST_27,
    TEMPORALITY,
    rest_entry,
)
from trustrank.parsers.otlp_metrics_shadow import Labeler, any_str
from trustrank.parsers.series import Labels, MetricKind

# Attribute bytes -> decoded labels, kept across requests by a worker (a Collector sends
# the same label sets scrape after scrape). Bounded: about 2 KB an entry.
_LABELS_CACHE: dict[OtlpLimits, dict[bytes, Labels]] = {}
_LABELS_CACHE_MAX = 100_000
# One labeler per limits, kept across requests: its cache of single KeyValues decodes a
# GPU model, a namespace or a driver version once for thousands of label sets. Replaced
# when its caches grow past the bound.
_LABELERS: dict[OtlpLimits, Labeler] = {}
_LABELER_MAX = 200_000


def _labeler(limits: OtlpLimits) -> Labeler:
    labeler = _LABELERS.get(limits)
    if labeler is None or len(labeler.pairs) + len(labeler.cache) > _LABELER_MAX:
        labeler = _LABELERS[limits] = Labeler(limits)
    return labeler


@dataclass(frozen=True, slots=True)
class RawColumns:
    """The points of metric j are the next `metric_points[j]` points, in order; metric j
    is named `names[metric_name[j]]` and sits in the resource
    `resources[metric_resource[j]]` (its attributes). Point i has the attribute bytes
    `rests[point_labels[i]]` (the point's own, before the resource's), time `time_ns[i]`
    and value `values[i]`. Each name has the kind and unit of its first metric (storage
    keeps a name's first kind and unit anyway). `clusters`: the `k8s.cluster.name` of
    every resource holding gauges or sums, each once, as `MetricsCheck.clusters`."""

    resources: tuple[dict[str, str], ...]
    names: tuple[str, ...]
    kinds: tuple[MetricKind, ...]
    units: tuple[str, ...]
    metric_name: np.ndarray[Any, Any]
    metric_resource: np.ndarray[Any, Any]
    metric_points: np.ndarray[Any, Any]
    rests: tuple[bytes, ...]
    point_labels: np.ndarray[Any, Any]
    time_ns: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]
    clusters: tuple[str, ...]

    @property
    def points(self) -> int:
        return len(self.values)


_DATA = methodcaller("WhichOneof", "data")
_NAME = attrgetter("name")
_POINTS = attrgetter("data_points")
_NUMBERS = frozenset({"gauge", "sum", None})


def _kind(kind: str, data: Any) -> MetricKind:
    """As `Metric.kind` for gauges and sums."""
    if kind == "gauge":
        return MetricKind.GAUGE
    if TEMPORALITY.get(data.aggregation_temporality, "") == "delta":
        return MetricKind.DELTA
    return MetricKind.COUNTER if data.is_monotonic else MetricKind.GAUGE


def _layout(
    raws: list[bytes], width: int, window: tuple[int, int]
) -> tuple[np.ndarray[Any, Any], list[bytes]] | None:
    """The (time, value) columns and the attribute bytes of points all in the layout
    `width` (27: start, time, double; 18: time, double) with times in the window and
    finite values; None when any is not."""
    count = len(raws)
    prefix, rest = (PREFIX_27, REST_27) if width == 27 else (PREFIX_18, REST_18)
    prefixes = b"".join(map(prefix, raws))
    if len(prefixes) != width * count:
        return None
    tags = (b"\x11", b"\x19", b"\x21") if width == 27 else (b"\x19", b"\x21")
    for offset, tag in zip((0, 9, 18), tags, strict=False):
        if prefixes[offset::width] != tag * count:
            return None
    columns = np.frombuffer(prefixes, dtype=LONG_POINT if width == 27 else SHORT_POINT)
    times = columns["time"]
    if int(times.min()) < window[0] or int(times.max()) > window[1]:
        return None
    if not np.isfinite(columns["value"]).all():
        return None
    return columns, list(map(rest, raws))


def otlp_metrics_raw_columns(
    *, body: bytes, now_ns: int | None = None, limits: OtlpLimits | None = None
) -> RawColumns | None:
    """The request as columns, or None when it is not all good gauge and sum points in
    the usual layouts. Raises `OtlpMetricsError` when the body is no protobuf request."""
    limits = limits or OtlpLimits()
    window = _window(now_ns, limits)
    request = _shadow_request(body)
    max_name = limits.max_name_length
    raws: list[bytes] = []
    resources: list[dict[str, str]] = []
    clusters: dict[str, None] = {}
    # Per distinct name (a dcgm request repeats 40 names in each of its 25 resources).
    name_index: dict[str, int] = {}
    kinds: list[MetricKind] = []
    units: list[str] = []
    metric_name: list[int] = []
    metric_resource: list[int] = []
    counts: list[int] = []
    for resource_metrics in request.resource_metrics:
        before = len(metric_name)
        holds_metrics = False
        for scope_metrics in resource_metrics.scope_metrics:
            # A scope's metrics by whole-list calls (map, comprehensions) rather than a
            # loop body per metric: a dcgm request has 1,000 metrics of 8 points.
            metrics = scope_metrics.metrics
            types = list(map(_DATA, metrics))
            if not _NUMBERS.issuperset(types):
                return None  # histograms, summaries: the full parse
            if None in types:
                present = [(m, t) for m, t in zip(metrics, types, strict=True) if t]
                metrics, types = [m for m, _ in present], [t for _, t in present]
            if not metrics:
                continue
            holds_metrics = True
            datas = [m.gauge if t == "gauge" else m.sum for m, t in zip(metrics, types,
                                                                          strict=True)]
            for metric, name, data in zip(metrics, map(_NAME, metrics), datas, strict=True):
                if name not in name_index:
                    if not 0 < len(name) <= max_name or "\x00" in name:
                        return None
                    name_index[name] = len(name_index)
                    gauge = metric.WhichOneof("data") == "gauge"
                    kinds.append(MetricKind.GAUGE if gauge else _kind("sum", data))
                    units.append(metric.unit)
                metric_name.append(name_index[name])
            points = list(map(_POINTS, datas))
            counts.extend(map(len, points))
            raws.extend(chain.from_iterable(points))
        if holds_metrics:
            attributes = {
                kv.key: any_str(kv.value) for kv in resource_metrics.resource.attributes
            }
            if resource_labels_problem(attributes, _labeler(limits)) is not None:
                return None  # the full parse rejects its points and says why
            clusters.setdefault(attributes.get("k8s.cluster.name", ""))
            if len(metric_name) > before:
                metric_resource.extend([len(resources)] * (len(metric_name) - before))
                resources.append(attributes)
    count = len(raws)
    times = np.empty(count, dtype=np.uint64)
    values = np.empty(count, dtype=np.float64)
    point_labels = np.empty(count, dtype=np.int32)
    distinct: dict[bytes, int] = {}
    if count:
        try:
            leads = np.frombuffer(bytes(map(LEAD, raws)), dtype=np.uint8)
        except IndexError:
            return None  # an empty point: no value
        longs = leads == 0x11
        long_count = int(longs.sum())
        if long_count + int((leads == 0x19).sum()) != count:
            return None
        groups: list[tuple[list[bytes], int, Any]]
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
    known = CLEAN_RESTS.setdefault(limits, set())
    unknown = distinct.keys() - known
    if unknown:
        labeler = _labeler(limits)
        for rest in unknown:
            if rest_entry(rest, labeler).__class__ is not tuple:
                return None
        if len(known) + len(unknown) > CLEAN_RESTS_MAX:
            known.clear()
        known |= unknown
    return RawColumns(
        resources=tuple(resources), names=tuple(name_index), kinds=tuple(kinds),
        units=tuple(units), metric_name=np.array(metric_name, dtype=np.int32),
        metric_resource=np.array(metric_resource, dtype=np.int32),
        metric_points=np.array(counts, dtype=np.int64), rests=tuple(distinct),
        point_labels=point_labels, time_ns=times, values=values, clusters=tuple(clusters),
    )


def otlp_metrics_check_columns(
    *, body: bytes, encoding: str = PROTOBUF, now_ns: int | None = None,
    limits: OtlpLimits | None = None,
) -> tuple[MetricsCheck, RawColumns | None]:
    """The counts, problems and clusters `otlp_metrics_parse` would give, and the
    columns when the request is all good gauge and sum points (protobuf only). Raises
    `OtlpMetricsError` exactly when the parse would."""
    if encoding == PROTOBUF:
        raw = otlp_metrics_raw_columns(body=body, now_ns=now_ns, limits=limits)
        if raw is not None:
            return MetricsCheck(total_points=raw.points, rejected_points=0, stale_points=0,
                                problems=(), clusters=raw.clusters), raw
    parsed = otlp_metrics_parse(body=body, encoding=encoding, now_ns=now_ns, limits=limits)
    return MetricsCheck(
        total_points=parsed.total_points, rejected_points=parsed.rejected_points,
        stale_points=parsed.stale_points, problems=parsed.problems,
        clusters=tuple(dict.fromkeys(r.cluster for r in parsed.resources if r.metrics)),
    ), None


def rest_labels(rest: bytes, *, limits: OtlpLimits | None = None) -> Labels | None:
    """The label set of a point's attribute bytes (as `RawColumns.rests` holds them), or
    None when they do not decode to a good one. Remembered across requests."""
    limits = limits or OtlpLimits()
    cache = _LABELS_CACHE.setdefault(limits, {})
    labels = cache.get(rest)
    if labels is None:
        entry = rest_entry(rest, _labeler(limits))
        if entry.__class__ is not tuple:
            return None
        if len(cache) >= _LABELS_CACHE_MAX:
            cache.clear()
        labels = cache[rest] = entry  # type: ignore[assignment]
    return labels


# --- packed columns ------------------------------------------------------------------------
#
# MAGIC, then zstd of: a header (the byte lengths of the parts), the metadata as JSON
# (resources, names, kinds, units, clusters), the attribute bytes joined, and the numpy
# columns little-endian: rest ends (int64), metric name and resource (int32), metric
# points (int64), point labels (int32), times (uint64), values (float64). A dcgm request
# of 8,000 points packs to a few per cent of its raw protobuf.

_MAGIC = b"TRc2"
_HEADER = struct.Struct("<9Q")
_KINDS = {str(kind): kind for kind in MetricKind}  # a look-up, not an Enum call per metric
_ARRAYS = (("rest_ends", "<i8"), ("metric_name", "<i4"), ("metric_resource", "<i4"),
           ("metric_points", "<i8"), ("point_labels", "<i4"), ("time_ns", "<u8"),
           ("values", "<f8"))


def columns_pack(raw: RawColumns) -> bytes:
    meta = orjson.dumps({
        "resources": raw.resources, "names": raw.names, "kinds": [str(k) for k in raw.kinds],
        "units": raw.units, "clusters": raw.clusters,
    })
    rests = b"".join(raw.rests)
    rest_ends = np.cumsum(np.fromiter(map(len, raw.rests), dtype=np.int64,
                                      count=len(raw.rests)))
    arrays = [np.ascontiguousarray(column, dtype=dtype).tobytes() for column, (_, dtype) in zip(
        (rest_ends, raw.metric_name, raw.metric_resource, raw.metric_points,
         raw.point_labels, raw.time_ns, raw.values), _ARRAYS, strict=True)]
    parts = [meta, rests, *arrays]
    body = _HEADER.pack(*map(len, parts)) + b"".join(parts)
    return _MAGIC + bytes(cramjam.zstd.compress(body, level=1))


def columns_unpack(data: bytes) -> RawColumns | None:
    """The columns `columns_pack` packed; None for anything else (another version)."""
    if not data.startswith(_MAGIC):
        return None
    try:
        body = bytes(cramjam.zstd.decompress(data[len(_MAGIC):]))
        sizes = _HEADER.unpack_from(body)
        at = _HEADER.size
        parts = []
        for size in sizes:
            parts.append(memoryview(body)[at:at + size])
            at += size
        if at != len(body):
            return None
        meta = orjson.loads(parts[0])
        rest_ends, metric_name, metric_resource, metric_points, point_labels, time_ns, values = (
            np.frombuffer(part, dtype=dtype) for part, (_, dtype) in zip(
                parts[2:], _ARRAYS, strict=True))
        blob = bytes(parts[1])
        starts = np.r_[0, rest_ends[:-1]].tolist() if len(rest_ends) else []
        rests = tuple(blob[s:e] for s, e in zip(starts, rest_ends.tolist(), strict=True))
        return RawColumns(
            resources=tuple(meta["resources"]), names=tuple(meta["names"]),
            kinds=tuple(map(_KINDS.__getitem__, meta["kinds"])), units=tuple(meta["units"]),
            metric_name=metric_name, metric_resource=metric_resource,
            metric_points=metric_points, rests=rests,
            point_labels=point_labels, time_ns=time_ns, values=values,
            clusters=tuple(meta["clusters"]),
        )
    except (cramjam.DecompressionError, struct.error, ValueError, KeyError, TypeError):
        return None
