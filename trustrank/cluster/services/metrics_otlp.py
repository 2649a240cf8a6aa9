"""OTLP metrics to per-minute storage, one request or many at once.

`OtlpPoints` gathers the points of one cluster as three columns (series id, time, value)
while requests are added, resolving each point's series id as it goes; `store()` then
folds them all into minutes and appends one chunk per (name, minute) (`metrics`). A
worker that loads several queued requests of a cluster in one transaction (see
`ingest.loaders.cluster`) so pays the fixed cost of a load once, and the scrapes of one
minute meet in numpy.

A request of good gauge and sum points comes as whole-request columns
(`parsers.otlp_columns`): a series id is then the point's label set (merged with its
resource's attributes once per distinct pair) and its metric's name, both resolved per
distinct value, never per point. Anything else comes parsed in full (`add`): gauges and
sums by their point labels, histograms as their classic bucket series.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import numpy as np
from django.utils import timezone

from trustrank.cluster.models import Cluster
from trustrank.cluster.services.metrics import MetricsLoaded, items_series_ids, minutes_store
from trustrank.cluster.services.metrics_ids import NAME_BITS, SeriesIds, sorted_unique
from trustrank.parsers.otlp_columns import RawColumns, rest_labels
from trustrank.parsers.otlp_metrics_model import (
    RESOURCE_LABELS,
    OtlpMetricsError,
    ParsedMetrics,
    ResourceMetrics,
    labels_with,
)
from trustrank.parsers.series import Labels

_NS_PER_MS = 1_000_000


def _merged(key: tuple[Labels, bytes]) -> Labels:
    """A series' labels: the resource's attributes copied, then the point's own."""
    extra, rest = key
    labels = rest_labels(rest)
    if labels is None:
        # The receiver (or the worker's read of the body) found them good already.
        raise OtlpMetricsError("a data point's attributes do not decode to a label set")
    return labels_with(dict(extra), labels)


class OtlpPoints:
    """The points of one cluster from one or more OTLP requests, as columns."""

    def __init__(self, *, cluster: Cluster) -> None:
        self.cluster = cluster
        self.latest: datetime | None = None
        self._ids: SeriesIds | None = None
        self._series: list[np.ndarray[Any, Any]] = []
        self._ts_ms: list[np.ndarray[Any, Any]] = []
        self._values: list[np.ndarray[Any, Any]] = []
        self.points = 0

    def _resolver(self, now: datetime) -> SeriesIds:
        if self._ids is None:
            self._ids = SeriesIds(cluster_id=self.cluster.pk, now=now)
        if self.latest is None or now > self.latest:
            self.latest = now
        return self._ids

    def _append(self, series: np.ndarray[Any, Any], ts_ms: np.ndarray[Any, Any],
                values: np.ndarray[Any, Any]) -> MetricsLoaded:
        self._series.append(series)
        self._ts_ms.append(ts_ms)
        self._values.append(values)
        self.points += len(series)
        distinct = len(sorted_unique(series))
        return MetricsLoaded(series=distinct, new_series=0, points=len(series), minutes=0)

    def add_columns(self, columns: RawColumns, *, now: datetime) -> MetricsLoaded:
        """Append one request's points (a whole request of this cluster). `minutes` and
        `new_series` of the result are 0: `store` writes them."""
        ids = self._resolver(now)
        if not columns.points:
            return MetricsLoaded(0, 0, 0, 0)
        n_rests = len(columns.rests)
        point_metric = np.repeat(np.arange(len(columns.metric_points), dtype=np.int64),
                                 columns.metric_points)
        point_resource = columns.metric_resource[point_metric].astype(np.int64)
        # A series' labels are its point's attribute bytes with its resource's attributes:
        # resolved per distinct (resource attributes, attribute bytes), by the bytes as
        # they came while the worker has met them before.
        pairs, inverse = np.unique(point_resource * n_rests + columns.point_labels,
                                   return_inverse=True)
        extras = [tuple((k, attributes[k]) for k in RESOURCE_LABELS if k in attributes)
                  for attributes in columns.resources]
        keys = [(extras[pair // n_rests], columns.rests[pair % n_rests])
                for pair in pairs.tolist()]
        labels_ids = np.array(ids.labels_ids_raw(keys, labels_of=_merged), dtype=np.int64)
        used = sorted_unique(columns.metric_name[columns.metric_points > 0].astype(np.int64))
        name_ids = np.zeros(len(columns.names), dtype=np.int64)
        name_ids[used] = ids.name_ids([(columns.names[at], columns.kinds[at], columns.units[at])
                                       for at in used.tolist()])
        series = (labels_ids[inverse] << NAME_BITS
                  | name_ids[columns.metric_name[point_metric]])
        return self._append(series, (columns.time_ns // _NS_PER_MS).astype(np.int64),
                            columns.values)

    def add(self, resources: Iterable[ResourceMetrics], *, now: datetime) -> MetricsLoaded:
        """Append one request's points from its full parse (its resources of this
        cluster)."""
        ids = self._resolver(now)
        items = list(ParsedMetrics(resources=tuple(resources), total_points=0,
                                   rejected_points=0, stale_points=0).series())
        items = [item for item in items if item.timestamps_ms]
        if not items:
            return MetricsLoaded(0, 0, 0, 0)
        per_item = items_series_ids(ids=ids, items=items)
        lengths = np.array([len(item.timestamps_ms) for item in items], dtype=np.int64)
        series = np.repeat(per_item, lengths)
        ts = np.fromiter((t for item in items for t in item.timestamps_ms), dtype=np.int64,
                         count=len(series))
        values = np.fromiter((v for item in items for v in item.values), dtype=np.float64,
                             count=len(series))
        return self._append(series, ts, values)

    def store(self) -> MetricsLoaded:
        """Fold every added point into its minute; returns the new series and the
        (series, minute) entries written. Run it inside the transaction that added the
        points."""
        if self._ids is None or not self._series:
            return MetricsLoaded(0, 0, 0, 0)
        series = np.concatenate(self._series)
        ts = np.concatenate(self._ts_ms)
        values = np.concatenate(self._values)
        self._series, self._ts_ms, self._values = [], [], []
        minutes = minutes_store(cluster=self.cluster, series_ids=series, ts=ts, val=values,
                                now=self.latest or timezone.now(), ids=self._ids)
        new_series = self._ids.finish()
        dropped, self._ids.dropped = self._ids.dropped, 0
        return MetricsLoaded(series=0, new_series=new_series, points=len(series) - dropped,
                             minutes=minutes, rejected=dropped)


def parsed_metrics_store(
    *, cluster: Cluster, resources: Iterable[ResourceMetrics], now: datetime | None = None
) -> MetricsLoaded:
    """Store one request's OTLP resources (of `cluster`) as per-minute points."""
    points = OtlpPoints(cluster=cluster)
    loaded = points.add(resources, now=now or timezone.now())
    if not loaded.points:
        return MetricsLoaded(0, 0, 0, 0)
    stored = points.store()
    return MetricsLoaded(series=loaded.series, new_series=stored.new_series,
                         points=stored.points, minutes=stored.minutes,
                         rejected=stored.rejected)
