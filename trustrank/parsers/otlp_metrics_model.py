"""What an OTLP metrics request reads as (`ParsedMetrics`, `Metric`, the point types,
`MetricsCheck`) and how it becomes `Series`; the reading itself is in `otlp_metrics`."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from trustrank.parsers.errors import ParserError
from trustrank.parsers.series import Labels, MetricKind, Series

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

_NS_PER_MS = 1_000_000
FLAG_NO_RECORDED_VALUE = 1
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


def labels_with(extra: dict[str, str], labels: Labels, *more: tuple[str, str]) -> Labels:
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
                name=metric.name, labels=labels_with(extra, labels), kind=kind,
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
                name=metric.name, labels=labels_with(extra, summary.labels,
                                   ("quantile", _le(quantile))),
                kind=MetricKind.SUMMARY, timestamps_ms=(ms,), values=(value,), unit=metric.unit,
            )
        for suffix, total in (("_count", float(summary.count)), ("_sum", summary.sum)):
            yield Series(
                name=metric.name + suffix, labels=labels_with(extra, summary.labels),
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
            name=f"{metric.name}_bucket", labels=labels_with(extra, labels, ("le", le)),
            kind=MetricKind.HISTOGRAM, timestamps_ms=(ms,), values=(float(cumulative),),
            unit=metric.unit,
        )
    yield Series(
        name=f"{metric.name}_count", labels=labels_with(extra, labels),
        kind=MetricKind.HISTOGRAM, timestamps_ms=(ms,), values=(float(count),),
        unit=metric.unit,
    )
    if total is not None:
        yield Series(
            name=f"{metric.name}_sum", labels=labels_with(extra, labels),
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
