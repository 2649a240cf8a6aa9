"""The plain series shape every metrics parser can produce.

A `Series` is one metric name with one label set and its samples in time order; it is what
Prometheus remote write carries natively, what a text scrape yields (one sample each), and
what `otlp_metrics.ParsedMetrics.series()` flattens OTLP gauges and sums into. Storage can
key a series on `(name, labels)`; `labels` is sorted by name so equal label sets compare
and hash equal whatever order they arrived in.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

# Sorted (name, value) pairs; hashable, so usable as a dict key and interned by parsers.
Labels = tuple[tuple[str, str], ...]


class MetricKind(StrEnum):
    """What the samples of a series mean; decides how storage rolls them up."""

    GAUGE = "gauge"
    COUNTER = "counter"  # cumulative, monotonic: rate() applies
    DELTA = "delta"  # a delta sum: each sample is the increase since the previous one
    HISTOGRAM = "histogram"  # classic `_bucket{le=…}` / `_sum` / `_count` samples
    SUMMARY = "summary"
    INFO = "info"
    STATESET = "stateset"
    UNKNOWN = "unknown"


class Series(NamedTuple):
    """One series: samples as parallel tuples, timestamps in milliseconds since the epoch.
    (Immutable like the frozen dataclasses elsewhere, but a NamedTuple: remote write and
    text scrapes build one per series, and a frozen dataclass costs ten times as much to
    construct.)"""

    name: str
    labels: Labels
    kind: MetricKind
    timestamps_ms: tuple[int, ...]
    values: tuple[float, ...]
    unit: str = ""
    help: str = ""

    def label(self, name: str, default: str = "") -> str:
        for key, value in self.labels:
            if key == name:
                return value
        return default


def labels_from(mapping: dict[str, str]) -> Labels:
    return tuple(sorted(mapping.items()))
