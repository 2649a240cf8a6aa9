"""OTLP metrics (the parser's `ResourceMetrics`) to per-minute storage, one request or
many at once.

`OtlpPoints` gathers the points of one cluster as three columns (series id, time, value)
while requests are added, resolving each point's series id as it goes; `store()` then
folds them all into minutes with one COPY and one merge (`metrics.minutes_store`). A
worker that loads several queued requests of a cluster in one transaction (see
`ingest.loaders.cluster`) so pays the fixed cost of a load (temporary tables, the merge
statement, the commit) once, and the scrapes of one minute meet in numpy instead of
updating the same rows once per request.

Gauges and sums go straight from the parser's columns (C arrays, copied by `extend`);
the only Python work per point is finding its series: the point's label set is merged
with the resource attributes once per distinct label set of the resource, and the
series id is a dictionary look-up for a known series. Histograms take the `Series` path
(their classic bucket shape).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from datetime import datetime

import numpy as np
from django.utils import timezone

from trustrank.cluster.models import Cluster
from trustrank.cluster.services import metrics
from trustrank.cluster.services.metrics import MetricsLoaded, minutes_store, series_keys
from trustrank.parsers.otlp_metrics import RESOURCE_LABELS, ParsedMetrics, ResourceMetrics
from trustrank.parsers.series import Labels, MetricKind, Series

_Ident = tuple[int, str, Labels]


class OtlpPoints:
    """The points of one cluster from one or more OTLP requests, as columns."""

    def __init__(self, *, cluster: Cluster) -> None:
        self.cluster = cluster
        self.latest: datetime | None = None
        self._ids: array[int] = array("q")
        self._ts_ns: array[int] = array("Q")
        self._values: array[float] = array("d")
        # Series created in this transaction, labels -> name -> id: known to later
        # requests of the batch, and to the worker's cache once committed.
        self._created: dict[Labels, dict[str, int]] = {}

    @property
    def points(self) -> int:
        return len(self._ids)

    def add(self, resources: Iterable[ResourceMetrics], *, now: datetime) -> MetricsLoaded:
        """Append one request's points (its resources of this cluster). `minutes` of the
        result is 0: the minutes are written by `store`."""
        pk = self.cluster.pk
        known, created = metrics._SERIES_IDS.names, self._created.setdefault
        ids, ts_ns, values = self._ids, self._ts_ns, self._values
        first = len(ids)
        unknown: dict[_Ident, list[int]] = {}
        kinds: dict[_Ident, tuple[MetricKind, str]] = {}
        others: list[Series] = []
        for resource in resources:
            extra = {k: resource.attributes[k] for k in RESOURCE_LABELS if k in resource.attributes}
            # Keyed by the parser's label tuple itself (id): the parser hands the same
            # tuple object to every metric of a resource that has that label set, and
            # they all stay alive (in `resources`) for this loop. Each entry: the merged
            # labels, the ids known by name and those created in this batch by name.
            merged: dict[int, tuple[Labels, dict[str, int], dict[str, int]]] = {}
            rest = []
            for metric in resource.metrics:
                numbers = metric.numbers
                if numbers is None or not numbers.size:
                    if metric.histograms:
                        rest.append(metric)
                    continue
                name, kind = metric.name, None
                for raw in numbers.labels:
                    entry = merged.get(id(raw))
                    if entry is None:
                        labels = tuple(sorted({**extra, **dict(raw)}.items()))
                        entry = merged[id(raw)] = (labels, known(pk, labels), created(labels, {}))
                    series_id = entry[1].get(name)
                    if series_id is None:
                        series_id = entry[2].get(name)
                        if series_id is None:
                            ident = (pk, name, entry[0])
                            spots = unknown.get(ident)
                            if spots is None:
                                spots = unknown[ident] = []
                                if kind is None:
                                    kind = metric.kind
                                kinds[ident] = (kind, metric.unit)
                            spots.append(len(ids))
                            series_id = -1
                    ids.append(series_id)
                ts_ns.extend(numbers.time_ns)
                values.extend(numbers.values)
            if rest:
                others.extend(ParsedMetrics(
                    resources=(ResourceMetrics(resource.attributes, tuple(rest)),),
                    total_points=0, rejected_points=0, stale_points=0,
                ).series())
        for item in others:
            ident = (pk, item.name, item.labels)
            series_id = metrics._SERIES_IDS.get(pk, item.name, item.labels)
            if series_id is None:
                series_id = self._created.get(item.labels, {}).get(item.name)
            if series_id is None:
                spots = unknown.get(ident)
                if spots is None:
                    spots = unknown[ident] = []
                    kinds[ident] = (item.kind, item.unit)
                spots.extend(range(len(ids), len(ids) + len(item.timestamps_ms)))
                series_id = -1
            ids.extend([series_id] * len(item.timestamps_ms))
            ts_ns.extend([t * 1_000_000 for t in item.timestamps_ms])
            values.extend(item.values)
        new_series = self._create(unknown, kinds, now=now) if unknown else 0
        if self.latest is None or now > self.latest:
            self.latest = now
        points = len(ids) - first
        series = int(np.unique(np.frombuffer(ids, dtype=np.int64)[first:]).size) if points else 0
        return MetricsLoaded(series=series, new_series=new_series, points=points, minutes=0)

    def _create(
        self, unknown: dict[_Ident, list[int]], kinds: dict[_Ident, tuple[MetricKind, str]],
        *, now: datetime,
    ) -> int:
        items: list[Series] = []
        by_key: dict[str, int] = {}
        keys = series_keys((name, labels) for _, name, labels in unknown)
        for key, ident in zip(keys, unknown, strict=True):
            _, name, labels = ident
            kind, unit = kinds[ident]
            by_key[key] = len(items)
            items.append(Series(name, labels, kind, (), (), unit))
        found, created = metrics._series_upsert(
            cluster=self.cluster, unknown=by_key, items=items, now=now
        )
        ids = self._ids
        for key, ident in zip(by_key, unknown, strict=True):
            series_id = found[key]
            self._created.setdefault(ident[2], {})[ident[1]] = series_id
            for spot in unknown[ident]:
                ids[spot] = series_id
        return created

    def store(self) -> int:
        """Fold every added point into its minute; returns the (series, minute) rows
        written. Run it inside the transaction that added the points."""
        if not self._ids:
            return 0
        minutes = minutes_store(
            cluster=self.cluster,
            series_ids=np.frombuffer(self._ids, dtype=np.int64),
            ts=(np.frombuffer(self._ts_ns, dtype=np.uint64) // 1_000_000).astype(np.int64),
            val=np.frombuffer(self._values, dtype=np.float64),
            now=self.latest or timezone.now(),
        )
        metrics._SERIES_IDS.remember_on_commit(self.cluster.pk, [
            (name, labels, series_id) for labels, names in self._created.items()
            for name, series_id in names.items()
        ])
        self._ids, self._ts_ns, self._values = array("q"), array("Q"), array("d")
        self._created = {}
        return minutes


def parsed_metrics_store(
    *, cluster: Cluster, resources: Iterable[ResourceMetrics], now: datetime | None = None
) -> MetricsLoaded:
    """Store one request's OTLP resources (of `cluster`) as per-minute points."""
    points = OtlpPoints(cluster=cluster)
    loaded = points.add(resources, now=now or timezone.now())
    if not loaded.points:
        return MetricsLoaded(0, 0, 0, 0)
    return MetricsLoaded(series=loaded.series, new_series=loaded.new_series,
                         points=loaded.points, minutes=points.store())
