"""OTLP metrics (`ExportMetricsServiceRequest`, protobuf or OTLP/JSON) -> plain data.

Shape (see docs/cluster.md): `ParsedMetrics.resources` holds one `ResourceMetrics` per
resource (its attributes as strings: `k8s.cluster.name`, `k8s.pod.name`, `service.name`…)
with its `Metric`s. A gauge or sum keeps its points *columnar* in `NumberPoints` (parallel
arrays of start/time nanoseconds and float values, plus one interned `Labels` tuple per
point) because that is where the volume is: a dcgm-exporter scrape of 1,000 nodes is
320,000 number points. Histogram, exponential histogram and summary points are few and
stay one frozen dataclass each.

Why the decoding is not the obvious `ExportMetricsServiceRequest.FromString` walk: reading
the nine label attributes of a dcgm point through the protobuf message API costs about
1.6 µs per point, so a scrape would parse at about 170,000 points/s. Instead the request is
decoded with a *shadow* copy of the metrics schema in which number data points and all
point attributes are plain `bytes`. A number point as every mainstream encoder writes it
(fields in number order: start, time, value, then attributes and flags) is read with one
`struct` unpack, and its attribute bytes are the key of a cache of decoded label sets, so
each distinct label set is decoded once per request; when a whole metric's points share
the layout and known label sets, they are decoded together with a few C-level calls. A
point in any other layout (integer values, exemplars, other field orders) goes the
general way through the message API; the result is the same.

OTLP/JSON gauges and sums are read from the decoded JSON into the same columns (protobuf's
json_format would manage about 6,000 points/s); other metric types go through json_format.

Unusable points are counted, never fatal for the request (OTLP partial success): a time
that is zero, older than `max_past_s` or later than `max_future_s` from now; a NaN or
infinite value (storage keeps min/max/sum per minute, which one NaN would poison); a metric
name that is empty, longer than `max_name_length` or holds a NUL; a label key or value
that is too long, holds a NUL or is not UTF-8. Points flagged "no recorded value" (the
Collector's staleness marker) are dropped silently and counted apart, as they are not
errors. A body that does not decode at all raises `OtlpMetricsError`.
"""

from __future__ import annotations

import base64
import binascii
import gc
import math
import struct
import time
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from math import isfinite
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from trustrank.parsers.errors import ParserError
from trustrank.parsers.series import Labels, MetricKind, Series

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

_NS_PER_MS = 1_000_000
_FLAG_NO_RECORDED_VALUE = 1
_DAY_S = 86_400


class OtlpMetricsError(ParserError):
    """The body is not an ExportMetricsServiceRequest in the declared encoding."""


@dataclass(frozen=True, slots=True)
class OtlpLimits:
    """What makes a point unusable. Defaults: 14 days back (the series retention default,
    older data would be dropped at once), 10 minutes ahead (clock skew), names up to 255
    characters (Prometheus and OTLP tooling in practice), label values up to 4 KiB."""

    max_past_s: int = 14 * _DAY_S
    max_future_s: int = 600
    max_name_length: int = 255
    max_label_length: int = 4096


class NumberPoints(NamedTuple):
    """Columnar gauge or sum points: entry i of every column is point i. (A NamedTuple,
    not a frozen dataclass, here and in `Metric`: a dcgm scrape makes 40,000 of each and
    a frozen dataclass costs about 2 µs to build, a NamedTuple a tenth of that.)"""

    labels: list[Labels]
    start_ns: array[int]
    time_ns: array[int]
    values: array[float]

    @property
    def size(self) -> int:
        return len(self.values)


@dataclass(frozen=True, slots=True)
class HistogramPoint:
    """Explicit-bucket histogram: `bucket_counts` has one more entry than `bounds` (the
    last bucket is (bounds[-1], +Inf]); counts are per bucket, not cumulative."""

    labels: Labels
    start_ns: int
    time_ns: int
    count: int
    sum: float | None
    min: float | None
    max: float | None
    bounds: tuple[float, ...]
    bucket_counts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ExponentialHistogramPoint:
    """Base-2 exponential histogram (bucket i covers (base^(offset+i), base^(offset+i+1)],
    base = 2^(2^-scale))."""

    labels: Labels
    start_ns: int
    time_ns: int
    count: int
    sum: float | None
    min: float | None
    max: float | None
    scale: int
    zero_count: int
    zero_threshold: float
    positive_offset: int
    positive_counts: tuple[int, ...]
    negative_offset: int
    negative_counts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SummaryPoint:
    labels: Labels
    start_ns: int
    time_ns: int
    count: int
    sum: float
    quantiles: tuple[tuple[float, float], ...]  # (quantile, value)


class Metric(NamedTuple):
    """One metric of one scope. `type` is gauge, sum, histogram, exponential_histogram or
    summary; `temporality` is cumulative or delta for sums and histograms, else ""."""

    name: str
    unit: str
    description: str
    type: str
    temporality: str
    monotonic: bool
    scope_name: str
    numbers: NumberPoints | None = None
    histograms: tuple[HistogramPoint, ...] = ()
    exponential_histograms: tuple[ExponentialHistogramPoint, ...] = ()
    summaries: tuple[SummaryPoint, ...] = ()

    @property
    def kind(self) -> MetricKind:
        if self.type == "gauge":
            return MetricKind.GAUGE
        if self.type == "sum":
            if self.temporality == "delta":
                return MetricKind.DELTA
            # A cumulative non-monotonic sum (an UpDownCounter) behaves like a gauge.
            return MetricKind.COUNTER if self.monotonic else MetricKind.GAUGE
        if self.type == "summary":
            return MetricKind.SUMMARY
        return MetricKind.HISTOGRAM

    @property
    def point_count(self) -> int:
        numbers = self.numbers.size if self.numbers is not None else 0
        return (
            numbers + len(self.histograms) + len(self.exponential_histograms)
            + len(self.summaries)
        )


@dataclass(frozen=True, slots=True)
class ResourceMetrics:
    attributes: dict[str, str]
    metrics: tuple[Metric, ...]

    @property
    def cluster(self) -> str:
        return self.attributes.get("k8s.cluster.name", "")


# Resource attributes that `ParsedMetrics.series` copies onto each series' labels: the ones
# that link a series to a cluster object or a traced service.
RESOURCE_LABELS = (
    "k8s.cluster.name", "k8s.namespace.name", "k8s.pod.name", "k8s.node.name",
    "k8s.container.name", "service.name", "service.instance.id",
)


@dataclass(frozen=True, slots=True)
class ParsedMetrics:
    resources: tuple[ResourceMetrics, ...]
    total_points: int
    rejected_points: int
    stale_points: int
    problems: tuple[str, ...] = field(default=())

    @property
    def accepted_points(self) -> int:
        return self.total_points - self.rejected_points - self.stale_points

    def message(self) -> str:
        """The partial-success error message, or "" when nothing was rejected."""
        return _partial_message(self.rejected_points, self.total_points, self.problems)

    def series(self, *, resource_labels: Iterable[str] = RESOURCE_LABELS) -> Iterator[Series]:
        """Gauges and sums as one `Series` per label set; explicit histograms as classic
        `<name>_bucket{le=…}` (cumulative), `<name>_sum` and `<name>_count` series, the
        shape a Prometheus scrape of the same histogram has; exponential histograms the
        same, their buckets' upper bounds as `le`; summaries as `<name>{quantile=…}`,
        `<name>_sum` and `<name>_count`, as Prometheus exposes them. Point labels win
        over copied resource attributes."""
        wanted = tuple(resource_labels)
        for resource in self.resources:
            extra = {k: resource.attributes[k] for k in wanted if k in resource.attributes}
            for metric in resource.metrics:
                yield from _metric_series(metric, extra)


def _partial_message(rejected: int, total: int, problems: tuple[str, ...]) -> str:
    if not rejected:
        return ""
    shown = "; ".join(problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return f"{rejected} of {total} data points rejected: {shown}{more}"


@dataclass(frozen=True, slots=True)
class MetricsCheck:
    """What a receiver answers with, from `otlp_metrics_check`: the counts and problems
    `otlp_metrics_parse` would give, and the cluster names (`k8s.cluster.name`, "" when
    absent) of the resources that hold metrics, each once, in request order."""

    total_points: int
    rejected_points: int
    stale_points: int
    problems: tuple[str, ...]
    clusters: tuple[str, ...]

    @property
    def accepted_points(self) -> int:
        return self.total_points - self.rejected_points - self.stale_points

    def message(self) -> str:
        """The partial-success error message, or "" when nothing was rejected."""
        return _partial_message(self.rejected_points, self.total_points, self.problems)


def _with(extra: dict[str, str], labels: Labels, *more: tuple[str, str]) -> Labels:
    if not extra and not more:
        return labels
    merged = dict(extra)
    merged.update(labels)
    merged.update(more)
    return tuple(sorted(merged.items()))


def _metric_series(metric: Metric, extra: dict[str, str]) -> Iterator[Series]:
    kind = metric.kind
    if metric.numbers is not None:
        grouped: dict[Labels, tuple[list[int], list[float]]] = {}
        numbers = metric.numbers
        for labels, time_ns, value in zip(
            numbers.labels, numbers.time_ns, numbers.values, strict=True
        ):
            entry = grouped.get(labels)
            if entry is None:
                entry = grouped[labels] = ([], [])
            entry[0].append(time_ns // _NS_PER_MS)
            entry[1].append(value)
        for labels, (times, values) in grouped.items():
            yield Series(
                name=metric.name, labels=_with(extra, labels), kind=kind,
                timestamps_ms=tuple(times), values=tuple(values), unit=metric.unit,
                help=metric.description,
            )
    for point in metric.histograms:
        bounds = [*map(_le, point.bounds), "+Inf"]
        yield from _classic_histogram(metric, extra, point.labels, point.time_ns,
                                      zip(bounds, point.bucket_counts, strict=False),
                                      point.count, point.sum)
    for expo in metric.exponential_histograms:
        yield from _classic_histogram(metric, extra, expo.labels, expo.time_ns,
                                      _exponential_buckets(expo), expo.count, expo.sum)
    for summary in metric.summaries:
        ms = summary.time_ns // _NS_PER_MS
        for quantile, value in summary.quantiles:
            yield Series(
                name=metric.name, labels=_with(extra, summary.labels, ("quantile", _le(quantile))),
                kind=MetricKind.SUMMARY, timestamps_ms=(ms,), values=(value,), unit=metric.unit,
            )
        for suffix, total in (("_count", float(summary.count)), ("_sum", summary.sum)):
            yield Series(
                name=metric.name + suffix, labels=_with(extra, summary.labels),
                kind=MetricKind.SUMMARY, timestamps_ms=(ms,), values=(total,), unit=metric.unit,
            )


def _classic_histogram(
    metric: Metric, extra: dict[str, str], labels: Labels, time_ns: int,
    buckets: Iterable[tuple[str, int]], count: int, total: float | None,
) -> Iterator[Series]:
    """`<name>_bucket{le=…}` (cumulative), `<name>_count` and `<name>_sum` series of one
    histogram point, from its (upper bound, count in that bucket) pairs in bound order."""
    ms = time_ns // _NS_PER_MS
    cumulative = 0
    for le, in_bucket in buckets:
        cumulative += in_bucket
        yield Series(
            name=f"{metric.name}_bucket", labels=_with(extra, labels, ("le", le)),
            kind=MetricKind.HISTOGRAM, timestamps_ms=(ms,), values=(float(cumulative),),
            unit=metric.unit,
        )
    yield Series(
        name=f"{metric.name}_count", labels=_with(extra, labels),
        kind=MetricKind.HISTOGRAM, timestamps_ms=(ms,), values=(float(count),),
        unit=metric.unit,
    )
    if total is not None:
        yield Series(
            name=f"{metric.name}_sum", labels=_with(extra, labels),
            kind=MetricKind.HISTOGRAM, timestamps_ms=(ms,), values=(total,),
            unit=metric.unit,
        )


def _exponential_buckets(point: ExponentialHistogramPoint) -> list[tuple[str, int]]:
    """An exponential histogram's buckets as classic (upper bound, count) pairs in value
    order: the negative buckets (bucket j holds [-base^(offset+j+1), -base^(offset+j))),
    the zero bucket (up to the zero threshold), the positive buckets (bucket i holds
    (base^(offset+i), base^(offset+i+1)]), then +Inf; base = 2^(2^-scale)."""
    base = 2.0 ** (2.0 ** -point.scale)
    buckets = [(_le(-(base ** (point.negative_offset + j))), count)
               for j, count in reversed(list(enumerate(point.negative_counts)))]
    buckets.append((_le(point.zero_threshold), point.zero_count))
    buckets += [(_le(base ** (point.positive_offset + i + 1)), count)
                for i, count in enumerate(point.positive_counts)]
    buckets.append(("+Inf", 0))
    return buckets


def _le(bound: float) -> str:
    # Prometheus spells bucket bounds as Go's strconv does; integral bounds as "1.0"
    # differ from the "1" some exporters write, so integers drop the ".0".
    return str(int(bound)) if bound.is_integer() else repr(bound)


# --- the shadow schema -----------------------------------------------------------------

_SHADOW_PACKAGE = "trustrank.shadow.otlp.metrics"
_DATA_POINT_MESSAGES = {
    "NumberDataPoint", "HistogramDataPoint", "ExponentialHistogramDataPoint",
    "SummaryDataPoint",
}


def _shadow_classes() -> tuple[type[Message], type[Message], type[Message]]:
    """A copy of metrics.proto under another package where number data points (in Gauge
    and Sum) and every data point's attributes are `bytes` (same wire type, so any valid
    request decodes) plus a request message with the same field number."""
    proto = descriptor_pb2.FileDescriptorProto()
    metrics_pb2.DESCRIPTOR.CopyToProto(proto)
    old = "." + proto.package + "."
    new = "." + _SHADOW_PACKAGE + "."
    proto.name = "trustrank/shadow/otlp_metrics.proto"
    proto.package = _SHADOW_PACKAGE
    as_bytes = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES

    def rewrite(message: descriptor_pb2.DescriptorProto) -> None:
        for item in message.field:
            if item.type_name.startswith(old):
                item.type_name = new + item.type_name[len(old):]
            raw_points = message.name in ("Gauge", "Sum") and item.name == "data_points"
            raw_attributes = message.name in _DATA_POINT_MESSAGES and item.name == "attributes"
            if raw_points or raw_attributes:
                item.type = as_bytes
                item.ClearField("type_name")
        for nested in message.nested_type:
            rewrite(nested)

    for message in proto.message_type:
        rewrite(message)
    request = proto.message_type.add(name="Request")
    request.field.add(
        name="resource_metrics", number=1,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=new + "ResourceMetrics",
    )
    pool = descriptor_pool.DescriptorPool()
    # The shadow file imports common.proto and resource.proto; give the private pool them.
    for dependency in metrics_pb2.DESCRIPTOR.dependencies:
        dependency_proto = descriptor_pb2.FileDescriptorProto()
        dependency.CopyToProto(dependency_proto)
        pool.Add(dependency_proto)
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName(_SHADOW_PACKAGE + ".Request")),
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName(_SHADOW_PACKAGE + ".NumberDataPoint")
        ),
        message_factory.GetMessageClass(pool.FindMessageTypeByName(_SHADOW_PACKAGE + ".Metric")),
    )


_ShadowRequest, _ShadowNumberPoint, _ShadowMetric = _shadow_classes()

# Number point prefixes as encoders write them: [start 0x11][time 0x19][double 0x21].
_START_TIME_VALUE = struct.Struct("<xQxQxd")
_TIME_VALUE = struct.Struct("<xQxd")


def _any_str(value: AnyValue) -> str:
    text: str = value.string_value
    if text:
        # Nearly every label is a non-empty string: skip the oneof lookup for it.
        return text
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        return repr(value.double_value)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind is None:
        return ""
    # Arrays and maps: JSON, so the text stays unambiguous and searchable.
    return orjson.dumps(json_format.MessageToDict(value)).decode()


def _plain_string_pair(item: bytes) -> tuple[str, str] | None:
    """The usual KeyValue, {key: short string, value: {string_value: short string}},
    read without building messages; None for anything else (the caller decodes it)."""
    if item[:1] != b"\x0a" or len(item) < 6:
        return None
    key_length = item[1]
    at = 2 + key_length
    if key_length > 127 or item[at:at + 1] != b"\x12" or item[at + 2:at + 3] != b"\x0a":
        return None
    any_length, text_length = item[at + 1], item[at + 3]
    if any_length > 127 or text_length > 127 or any_length != text_length + 2:
        return None
    if at + 4 + text_length != len(item):
        return None
    try:
        return item[2:at].decode(), item[at + 4:].decode()
    except UnicodeDecodeError:
        return None


class _Labeler:
    """Decodes attribute bytes to `Labels` with its verdict. Two caches: whole attribute
    sets (one decode per distinct label set in the request) and single KeyValues (a GPU
    model, a namespace or a driver version recurs across thousands of label sets)."""

    def __init__(self, limits: OtlpLimits) -> None:
        self.limits = limits
        self.cache: dict[tuple[bytes, ...], tuple[Labels, str | None]] = {}
        self.pairs: dict[bytes, tuple[tuple[str, str], str | None]] = {}
        # Number points, keyed on the raw bytes after the fixed prefix (whole attribute
        # and flag fields).
        self.rest_cache: dict[bytes, Labels] = {}
        self.unusual: dict[bytes, _Unusual] = {}
        self.runs: dict[bytes, Any] = {}

    def check(self, pairs: Iterable[tuple[str, str]]) -> tuple[Labels, str | None]:
        labels = tuple(sorted(pairs))
        for key, value in labels:
            problem = self._pair_problem(key, value)
            if problem is not None:
                return labels, problem
        return labels, None

    def _pair_problem(self, key: str, value: str) -> str | None:
        limit = self.limits.max_label_length
        if not key or len(key) > limit or len(value) > limit:
            return f"label {key[:40]!r} is empty or longer than {limit}"
        if "\x00" in key or "\x00" in value:
            return f"label {key[:40]!r} holds a NUL byte"
        return None

    def _pair(self, item: bytes) -> tuple[tuple[str, str], str | None]:
        got = self.pairs.get(item)
        if got is None:
            pair = _plain_string_pair(item)
            if pair is not None:
                got = (pair, self._pair_problem(*pair))
                self.pairs[item] = got
                return got
            try:
                kv = KeyValue.FromString(item)
                pair = (kv.key, _any_str(kv.value))
                got = (pair, self._pair_problem(*pair))
            except DecodeError:
                got = (("", ""), "an attribute is not a valid KeyValue (or not UTF-8)")
            self.pairs[item] = got
        return got

    def from_raw(self, raw: tuple[bytes, ...]) -> tuple[Labels, str | None]:
        got = self.cache.get(raw)
        if got is None:
            checked = [self._pair(item) for item in raw]
            problems = [problem for _, problem in checked if problem is not None]
            labels = tuple(sorted(pair for pair, _ in checked))
            got = self.cache[raw] = (labels, problems[0] if problems else None)
        return got


# (resource index, scope index, metric index, metric name), formatted only on a rejection:
# a dcgm scrape has 40,000 metrics, so a string per metric is measurable.
_Where = tuple[int, int, int, str]


@dataclass
class _Tally:
    total: int = 0
    rejected: int = 0
    stale: int = 0
    problems: list[str] = field(default_factory=list)

    def reject(self, where: _Where, problem: str, count: int = 1) -> None:
        self.rejected += count
        if len(self.problems) < 20:
            r_index, s_index, m_index, name = where
            self.problems.append(
                f"resourceMetrics[{r_index}].scopeMetrics[{s_index}].metrics[{m_index}] "
                f"({name[:60]!r}): {problem}"
            )


def _number_points(
    raw_points: Iterable[bytes], labeler: _Labeler, tally: _Tally, where: _Where,
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
                    entry = _rest_entry(rest, labeler)
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
    return _checked(
        NumberPoints(labels_col, start_col, time_col, value_col),
        tally=tally, where=where, window=window,
    )


# Whole-metric decoding: when every point of a metric has the same prefix layout and
# every label set is already cached, the columns come from a handful of C-level calls
# (a join of the prefixes, one struct unpack, slices) instead of a Python loop per point.
# dcgm-exporter metrics have one point per GPU and a resource repeats the same label sets
# in each of its metrics, so after a resource's first metric nearly all go this way.
_PREFIX_27 = itemgetter(slice(None, 27))
_REST_27 = itemgetter(slice(27, None))
_PREFIX_18 = itemgetter(slice(None, 18))
_REST_18 = itemgetter(slice(18, None))
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
        prefixes = b"".join(map(_PREFIX_27, raws))
        if len(prefixes) != 27 * count:
            return None
        unpack, first, second, third = _bulk_layout(27, count)
        if (
            prefixes[0::27] != first or prefixes[9::27] != second
            or prefixes[18::27] != third
        ):
            return None
        labels = _bulk_labels(tuple(map(_REST_27, raws)), cache, runs)
        if labels is None:
            return None
        flat = unpack.unpack(prefixes)
        return NumberPoints(
            labels, array("Q", flat[0::3]), array("Q", flat[1::3]), array("d", flat[2::3])  # type: ignore[arg-type]
        )
    if lead == b"\x19":
        prefixes = b"".join(map(_PREFIX_18, raws))
        if len(prefixes) != 18 * count:
            return None
        unpack, first, second, _ = _bulk_layout(18, count)
        if prefixes[0::18] != first or prefixes[9::18] != second:
            return None
        labels = _bulk_labels(tuple(map(_REST_18, raws)), cache, runs)
        if labels is None:
            return None
        flat = unpack.unpack(prefixes)
        return NumberPoints(
            labels, array("Q", bytes(8 * count)), array("Q", flat[0::2]),  # type: ignore[arg-type]
            array("d", flat[1::2]),
        )
    return None


class _Unusual:
    """A label-cache entry for attribute bytes that are not simply a good label set: a
    stale flag, a problem, or bytes only the general decoder reads right."""

    __slots__ = ("labels", "problem", "slow", "stale")

    def __init__(self, *, labels: Labels = (), problem: str | None = None,
                 slow: bool = False, stale: bool = False) -> None:
        self.labels, self.problem, self.slow, self.stale = labels, problem, slow, stale


def _general_point(
    raw: bytes, entry: Any, labeler: _Labeler, tally: _Tally, where: _Where,
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
        point: Any = _ShadowNumberPoint.FromString(raw)
    except DecodeError:
        tally.reject(where, "a data point is not a valid NumberDataPoint")
        return
    if point.flags & _FLAG_NO_RECORDED_VALUE:
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


def _checked(
    points: NumberPoints, *, tally: _Tally, where: _Where, window: tuple[int, int]
) -> NumberPoints:
    # Whole-column checks first: a C-speed min/max/sum settles the usual all-good case.
    if points.values and (
        min(points.time_ns) < window[0] or max(points.time_ns) > window[1]
        or not math.isfinite(sum(points.values))
    ):
        return _filter_points(points, tally=tally, where=where, window=window)
    return points


def _rest_entry(rest: bytes, labeler: _Labeler) -> Labels | _Unusual:
    if rest and rest[0] not in (0x3A, 0x40):
        # Exemplars or unknown fields between the value and the attributes.
        return _Unusual(slow=True)
    try:
        point: Any = _ShadowNumberPoint.FromString(rest)
    except DecodeError:
        return _Unusual(problem="a data point is not a valid NumberDataPoint")
    if point.time_unix_nano or point.start_time_unix_nano or point.WhichOneof("value"):
        # A repeated scalar field after the attributes overrides the prefix (last one
        # wins in protobuf): only the general path gets that right.
        return _Unusual(slow=True)
    labels, problem = labeler.from_raw(tuple(point.attributes))
    if point.flags & _FLAG_NO_RECORDED_VALUE:
        return _Unusual(stale=True)
    if problem is not None:
        return _Unusual(labels=labels, problem=problem)
    return labels


def _filter_points(
    points: NumberPoints, *, tally: _Tally, where: _Where, window: tuple[int, int]
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


_TEMPORALITY = {1: "delta", 2: "cumulative"}


def _temporality(value: int) -> str:
    return _TEMPORALITY.get(value, "")


def _optional(point: Any, name: str) -> float | None:
    return getattr(point, name) if point.HasField(name) else None


def _histogram_points(
    metric: Any, *, labeler: _Labeler, tally: _Tally, where: _Where, window: tuple[int, int]
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
        if point.flags & _FLAG_NO_RECORDED_VALUE:
            tally.stale += 1
            continue
        kept.append(HistogramPoint(
            labels=labels, start_ns=point.start_time_unix_nano, time_ns=point.time_unix_nano,
            count=point.count, sum=_optional(point, "sum"), min=_optional(point, "min"),
            max=_optional(point, "max"), bounds=bounds, bucket_counts=counts,
        ))
    return tuple(kept)


def _exponential_points(
    metric: Any, *, labeler: _Labeler, tally: _Tally, where: _Where, window: tuple[int, int]
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
        if point.flags & _FLAG_NO_RECORDED_VALUE:
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
    metric: Any, *, labeler: _Labeler, tally: _Tally, where: _Where, window: tuple[int, int]
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
        if point.flags & _FLAG_NO_RECORDED_VALUE:
            tally.stale += 1
            continue
        kept.append(SummaryPoint(
            labels=labels, start_ns=point.start_time_unix_nano, time_ns=point.time_unix_nano,
            count=point.count, sum=point.sum,
            quantiles=tuple((q.quantile, q.value) for q in point.quantile_values),
        ))
    return tuple(kept)


def _hex_to_b64(value: object) -> object:
    if isinstance(value, str) and value:
        try:
            return base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            # Not hex: leave it, ParseDict accepts base64 as the proto3 mapping says.
            return value
    return value


def _window(now_ns: int | None, limits: OtlpLimits) -> tuple[int, int]:
    now = time.time_ns() if now_ns is None else now_ns
    return (max(1, now - limits.max_past_s * 1_000_000_000),
            now + limits.max_future_s * 1_000_000_000)


def otlp_metrics_parse(
    *, body: bytes, encoding: str = PROTOBUF, now_ns: int | None = None,
    limits: OtlpLimits | None = None,
) -> ParsedMetrics:
    """Decode an ExportMetricsServiceRequest (`encoding` is the media type without
    parameters). Raises `OtlpMetricsError` only when the body as a whole is unusable."""
    if encoding not in (PROTOBUF, JSON):
        raise OtlpMetricsError(f"unsupported encoding {encoding!r}; use {PROTOBUF} or {JSON}")
    limits = limits or OtlpLimits()
    window = _window(now_ns, limits)
    labeler = _Labeler(limits)
    tally = _Tally()
    read = _json_resources if encoding == JSON else _protobuf_resources
    # The cyclic collector runs every few hundred container allocations and, as the
    # result grows, rescans it whole: a third of the parse time for a dcgm scrape,
    # although nothing built here can form a cycle. Paused for the parse only, and left
    # alone when the caller had already paused it.
    pause = gc.isenabled()
    if pause:
        gc.disable()
    try:
        resources = read(body, labeler=labeler, tally=tally, window=window, limits=limits)
    finally:
        if pause:
            gc.enable()
    resources = [_resource_checked(resource, at, labeler=labeler, tally=tally)
                 for at, resource in enumerate(resources)]
    return ParsedMetrics(
        resources=tuple(resources), total_points=tally.total, rejected_points=tally.rejected,
        stale_points=tally.stale, problems=tuple(tally.problems),
    )


def resource_labels_problem(attributes: dict[str, str], labeler: _Labeler) -> str | None:
    """What is wrong with the resource attributes `series()` copies onto every point's
    labels (a NUL in `k8s.pod.name` would fail storage as surely as one in a point's)."""
    for key in RESOURCE_LABELS:
        value = attributes.get(key)
        if value is not None:
            problem = labeler._pair_problem(key, value)
            if problem is not None:
                return f"resource attribute {problem.removeprefix('label ')}"
    return None


def _resource_checked(
    resource: ResourceMetrics, at: int, *, labeler: _Labeler, tally: _Tally
) -> ResourceMetrics:
    """The resource, or it without its points (counted as rejected) when its copied
    attributes are unusable."""
    problem = resource_labels_problem(resource.attributes, labeler)
    if problem is None:
        return resource
    count = sum(metric.point_count for metric in resource.metrics)
    if count:
        tally.reject((at, 0, 0, ""), problem, count)
    return ResourceMetrics(attributes=resource.attributes, metrics=())


def _shadow_request(body: bytes) -> Any:
    """The body decoded with the shadow schema; `OtlpMetricsError` when it does not."""
    try:
        return _ShadowRequest.FromString(body)
    except (DecodeError, RecursionError) as exc:
        raise OtlpMetricsError(
            f"body is not a protobuf ExportMetricsServiceRequest: {exc}"
        ) from exc


def _protobuf_resources(
    body: bytes, *, labeler: _Labeler, tally: _Tally, window: tuple[int, int],
    limits: OtlpLimits,
) -> list[ResourceMetrics]:
    request = _shadow_request(body)
    resources = []
    max_name = limits.max_name_length
    for r_index, resource_metrics in enumerate(request.resource_metrics):
        attributes = {
            kv.key: _any_str(kv.value) for kv in resource_metrics.resource.attributes
        }
        metrics: list[Metric] = []
        for s_index, scope_metrics in enumerate(resource_metrics.scope_metrics):
            scope_name = scope_metrics.scope.name
            for m_index, metric in enumerate(scope_metrics.metrics):
                kind = metric.WhichOneof("data")
                name = metric.name
                if (kind == "gauge" or kind == "sum") and 0 < len(name) <= max_name and (
                    "\x00" not in name
                ):
                    # The volume case inline (40,000 metrics in a dcgm scrape).
                    data = metric.gauge if kind == "gauge" else metric.sum
                    raw_points = data.data_points
                    tally.total += len(raw_points)
                    numbers = _number_points(
                        raw_points, labeler, tally, (r_index, s_index, m_index, name), window
                    )
                    if kind == "gauge":
                        metrics.append(Metric(
                            name, metric.unit, metric.description, "gauge", "", False,
                            scope_name, numbers,
                        ))
                    else:
                        metrics.append(Metric(
                            name, metric.unit, metric.description, "sum",
                            _TEMPORALITY.get(data.aggregation_temporality, ""),
                            data.is_monotonic, scope_name, numbers,
                        ))
                    continue
                parsed = _metric(
                    metric, scope_name=scope_name, labeler=labeler, tally=tally,
                    where=(r_index, s_index, m_index, ""), window=window, limits=limits,
                )
                if parsed is not None:
                    metrics.append(parsed)
        resources.append(ResourceMetrics(attributes=attributes, metrics=tuple(metrics)))
    return resources


# --- checking a request without building its points -----------------------------------
#
# A receiver stores the body and leaves the parse to a worker, but must answer with the
# exact partial-success counts. A request whose data points are all good gauge or sum
# points in one of the two usual layouts is read as whole-request columns
# (`otlp_columns`); anything else is parsed in full, so the counts and problems are those
# of `otlp_metrics_parse` either way. The layouts and the verdicts kept across requests:

_LONG_POINT = np.dtype({"names": ["start", "time", "value"], "formats": ["<u8", "<u8", "<f8"],
                        "offsets": [1, 10, 19], "itemsize": 27})
_SHORT_POINT = np.dtype({"names": ["time", "value"], "formats": ["<u8", "<f8"],
                         "offsets": [1, 10], "itemsize": 18})
_LEAD = itemgetter(0)
# Attribute bytes found good, per limits, kept across requests: a Collector sends the same
# label sets scrape after scrape, and decoding them was a third of a check. Bounded (about
# 15 MB of dcgm label sets); only good verdicts are kept, so a hit is always exact.
_CLEAN_RESTS: dict[OtlpLimits, set[bytes]] = {}
_CLEAN_RESTS_MAX = 50_000


def otlp_metrics_check(
    *, body: bytes, encoding: str = PROTOBUF, now_ns: int | None = None,
    limits: OtlpLimits | None = None,
) -> MetricsCheck:
    """The counts, problems and clusters `otlp_metrics_parse` would give, for a receiver
    that stores the body for a worker to parse: about a fifth of the parse's time for a
    Collector's protobuf request (read as columns, `otlp_columns`), the full parse for
    anything else. Raises `OtlpMetricsError` exactly when the parse would."""
    from trustrank.parsers.otlp_columns import otlp_metrics_check_columns

    return otlp_metrics_check_columns(body=body, encoding=encoding, now_ns=now_ns,
                                      limits=limits)[0]


def _metric(
    metric: Any, *, scope_name: str, labeler: _Labeler, tally: _Tally, where: _Where,
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
        numbers = _number_points(data.data_points, labeler, tally, where, window)
        return Metric(
            name, metric.unit, metric.description, "gauge", "", False, scope_name, numbers
        )
    if kind == "sum":
        numbers = _number_points(data.data_points, labeler, tally, where, window)
        return Metric(
            name, metric.unit, metric.description, "sum",
            _temporality(data.aggregation_temporality), data.is_monotonic, scope_name, numbers,
        )
    common: dict[str, Any] = {
        "name": name, "unit": metric.unit, "description": metric.description,
        "scope_name": scope_name,
    }
    if kind == "histogram":
        return Metric(
            type="histogram",
            temporality=_temporality(metric.histogram.aggregation_temporality),
            monotonic=True, **common,
            histograms=_histogram_points(
                metric, labeler=labeler, tally=tally, where=where, window=window
            ),
        )
    if kind == "exponential_histogram":
        return Metric(
            type="exponential_histogram",
            temporality=_temporality(metric.exponential_histogram.aggregation_temporality),
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
    attributes: Any, labeler: _Labeler, cache: dict[bytes, Any]
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
    points: Any, *, labeler: _Labeler, tally: _Tally, where: _Where, window: tuple[int, int],
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
                    if flags & _FLAG_NO_RECORDED_VALUE:
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
        if flags & _FLAG_NO_RECORDED_VALUE:
            tally.stale += 1
            continue
        if problem is not None:
            tally.reject(where, problem)
            continue
        columns.labels.append(labels)
        columns.start_ns.append(start)
        columns.time_ns.append(at)
        columns.values.append(value)
    return _checked(columns, tally=tally, where=where, window=window)


def _json_metric(
    metric: Any, *, scope_name: str, labeler: _Labeler, tally: _Tally, where: _Where,
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
        _temporality(temporality) if isinstance(temporality, int) else "",
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
    metric: dict[str, Any], *, scope_name: str, labeler: _Labeler, tally: _Tally,
    where: _Where, window: tuple[int, int], limits: OtlpLimits,
) -> Metric | None:
    try:
        _json_ids_to_b64(metric)
        message = json_format.ParseDict(metric, metrics_pb2.Metric(), ignore_unknown_fields=True)
        shadow = _ShadowMetric.FromString(message.SerializeToString())
    except (json_format.ParseError, ValueError, TypeError, AttributeError, DecodeError,
            binascii.Error, RecursionError) as exc:
        raise OtlpMetricsError(f"not an OTLP/JSON metric: {exc}") from exc
    return _metric(
        shadow, scope_name=scope_name, labeler=labeler, tally=tally, where=where,
        window=window, limits=limits,
    )


def _json_resources(
    body: bytes, *, labeler: _Labeler, tally: _Tally, window: tuple[int, int],
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
