"""Reading stored metrics: the chunks of a window, combined per series and minute.

A minute of a series may sit in several chunks (one per load that had points of it, until
the day is compacted): they combine as min of mins, max of maxes, sums, and the last value
of the latest time (of equal times, the larger value). Chunks are read by metric name, so
a reader asks for the names it needs (the diagnoses' 20 of a dcgm scrape's 40) and never
decodes the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import psycopg
from django.db import connection

from trustrank.cluster.models import Cluster, MetricLabels, MetricName
from trustrank.cluster.services.metrics import CHUNK, TABLE, Minutes, chunk_records
from trustrank.cluster.services.metrics_ids import NAME_BITS, NAME_MASK
from trustrank.parsers.series import MetricKind, Series

_Row = tuple[int, int, bytes]  # name id, minute (since the epoch), packed CHUNK array


def chunks_combine(
    rows: Sequence[_Row], *, series: np.ndarray[Any, Any] | None = None
) -> tuple[Minutes, int]:
    """Chunks (any order) combined into one entry per (name, minute, label set), sorted
    so; with `series` (sorted ids), only those series. Also the number of (name, minute)
    runs that came in more than one chunk."""
    parts, names, minutes, sizes = [], [], [], []
    for name_id, minute, data in rows:
        part = chunk_records(data)
        if series is not None:
            wanted = (part["labels_id"].astype(np.int64) << NAME_BITS) | name_id
            part = part[np.isin(wanted, series, assume_unique=False)]
        parts.append(part)
        names.append(name_id)
        minutes.append(minute)
        sizes.append(len(part))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Minutes(empty, empty, np.zeros(0, dtype=CHUNK), np.zeros(1, dtype=np.int64)), 0
    records = np.concatenate(parts)
    lengths = np.array(sizes, dtype=np.int64)
    name_col = np.repeat(np.array(names, dtype=np.int64), lengths)
    minute_col = np.repeat(np.array(minutes, dtype=np.int64), lengths)
    pairs = np.array(names, dtype=np.int64) << 32 | np.array(minutes, dtype=np.int64)
    runs = int((np.unique(pairs, return_counts=True)[1] > 1).sum())
    labels = records["labels_id"].astype(np.int64)
    order = np.lexsort((labels, minute_col, name_col))
    records, labels = records[order], labels[order]
    name_col, minute_col = name_col[order], minute_col[order]
    new_chunk = (name_col[1:] != name_col[:-1]) | (minute_col[1:] != minute_col[:-1])
    new_group = new_chunk | (labels[1:] != labels[:-1])
    if not new_group.all():
        starts = np.flatnonzero(np.r_[True, new_group])
        counts = np.diff(np.r_[starts, len(records)])
        combined = np.empty(len(starts), dtype=CHUNK)
        combined["labels_id"] = records["labels_id"][starts]
        combined["min"] = np.minimum.reduceat(records["min"].astype(np.float64), starts)
        combined["max"] = np.maximum.reduceat(records["max"].astype(np.float64), starts)
        combined["sum"] = np.add.reduceat(records["sum"].astype(np.float64), starts)
        combined["count"] = np.add.reduceat(records["count"].astype(np.int64), starts)
        last_ms = records["last_ms"].astype(np.int64)
        latest = np.maximum.reduceat(last_ms, starts)
        at_last = last_ms == np.repeat(latest, counts)
        combined["last"] = np.maximum.reduceat(
            np.where(at_last, records["last"].astype(np.float64), -np.inf), starts)
        combined["last_ms"] = latest
        records, name_col, minute_col = combined, name_col[starts], minute_col[starts]
        new_chunk = (name_col[1:] != name_col[:-1]) | (minute_col[1:] != minute_col[:-1])
    chunks = np.r_[np.flatnonzero(np.r_[True, new_chunk]), len(records)]
    return Minutes(name_id=name_col, minute=minute_col, records=records, chunks=chunks), runs


def minutes_read(
    *, cluster_id: int, since: datetime, name_ids: Iterable[int] | None = None,
    series: Iterable[int] | None = None,
) -> Minutes:
    """The combined minutes from `since` (its minute) of the cluster's series: those of
    the names `name_ids`, or of the series ids `series`, or every one."""
    wanted = None
    params: list[Any] = [cluster_id, since.replace(second=0, microsecond=0)]
    where = ""
    if series is not None:
        wanted = np.unique(np.fromiter(series, dtype=np.int64))
        name_ids = np.unique(wanted & NAME_MASK).tolist()
    if name_ids is not None:
        where = " AND name_id = ANY(%s)"
        params.append(list(name_ids))
    connection.ensure_connection()
    # psycopg's own cursor, for binary results: bytea as text would be hex.
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(f"SELECT name_id, minute, data FROM {TABLE} "  # noqa: S608 (constant SQL)
                    f"WHERE cluster_id = %s AND minute >= %s{where}", params, binary=True)
        rows = [(int(name_id), int(at.timestamp()) // 60, bytes(data))
                for name_id, at, data in cur.fetchall()]
    return chunks_combine(rows, series=wanted)[0]


# Kinds whose per-minute value is the last one (cumulative counters and histogram
# buckets); gauges read as the minute's mean.
_LAST_KINDS = {MetricKind.COUNTER, MetricKind.HISTOGRAM, MetricKind.SUMMARY}


@dataclass(frozen=True)
class MinuteRow:
    """One series' minute as readers see it (all its loads combined)."""

    name: str
    labels_id: int
    pod: str
    node: str
    gpu: str
    minute: datetime
    min: float
    max: float
    sum: float
    count: int
    last: float
    last_ms: int


def _name_ids(
    *, cluster: Cluster, names: Iterable[str] | None, prefixes: Iterable[str]
) -> dict[int, tuple[str, str, str]]:
    rows = MetricName.objects.filter(cluster=cluster)
    wanted = list(names) if names is not None else None
    starts = tuple(prefixes)
    found = {}
    for name_id, name, kind, unit in rows.values_list("id", "name", "kind", "unit"):
        if (wanted is None and not starts) or (wanted is not None and name in wanted) or (
                starts and name.startswith(starts)):
            found[name_id] = (name, kind, unit)
    return found


def minute_rows(
    *, cluster: Cluster, since: datetime, names: Iterable[str] | None = None
) -> list[MinuteRow]:
    """Every combined minute of the cluster's series (of `names`) from `since`, by name,
    label set and minute: what pages and tests read instead of the chunks."""
    named = _name_ids(cluster=cluster, names=names, prefixes=())
    if not named:
        return []
    read = minutes_read(cluster_id=cluster.pk, since=since, name_ids=named)
    links = dict(
        (pk, (pod, node, gpu)) for pk, pod, node, gpu in MetricLabels.objects.filter(
            id__in=np.unique(read.records["labels_id"]).tolist()
        ).values_list("id", "pod", "node", "gpu"))
    records = read.records
    order = np.lexsort((read.minute, records["labels_id"], read.name_id))
    found = []
    for at in order.tolist():
        record = records[at]
        pod, node, gpu = links[int(record["labels_id"])]
        found.append(MinuteRow(
            name=named[int(read.name_id[at])][0], labels_id=int(record["labels_id"]),
            pod=pod, node=node, gpu=gpu,
            minute=datetime.fromtimestamp(int(read.minute[at]) * 60, tz=UTC),
            min=float(record["min"]), max=float(record["max"]), sum=float(record["sum"]),
            count=int(record["count"]), last=float(record["last"]),
            last_ms=int(record["last_ms"]),
        ))
    return found


def series_window(
    *, cluster: Cluster, since: datetime, names: Iterable[str] | None = None,
    prefixes: Iterable[str] = (), series_ids: Iterable[int] | None = None,
) -> list[Series]:
    """Stored series as parser `Series` (one sample per minute, at the minute's last
    timestamp), for the diagnoses' input builders and the charts; by name, then id."""
    prefixes = tuple(prefixes)
    wanted = None if series_ids is None else list(series_ids)
    if wanted is not None:
        named = {k: v for k, v in _name_ids(cluster=cluster, names=None, prefixes=()).items()
                 if k in {s & NAME_MASK for s in wanted}}
        if names is not None or prefixes:
            chosen = _name_ids(cluster=cluster, names=names, prefixes=prefixes)
            named = {k: v for k, v in named.items() if k in chosen}
    else:
        named = _name_ids(cluster=cluster, names=names if names is not None else (
            () if prefixes else None), prefixes=prefixes)
    if not named:
        return []
    read = minutes_read(cluster_id=cluster.pk, since=since, name_ids=named.keys(),
                        series=wanted)
    records = read.records
    labels_col = records["labels_id"].astype(np.int64)
    order = np.lexsort((read.minute, labels_col, read.name_id))
    if not len(order):
        return []
    s_name, s_labels = read.name_id[order], labels_col[order]
    starts = np.flatnonzero(np.r_[True, (s_name[1:] != s_name[:-1])
                                  | (s_labels[1:] != s_labels[:-1])])
    ends = np.r_[starts[1:], len(order)]
    labels_of = {
        pk: tuple(sorted((orjson.loads(raw) if isinstance(raw, str | bytes) else raw).items()))
        for pk, raw in MetricLabels.objects.filter(
            id__in=np.unique(s_labels).tolist()).values_list("id", "labels")
    }
    times = records["last_ms"].astype(np.int64)[order]
    lasts = records["last"].astype(np.float64)[order]
    means = (records["sum"].astype(np.float64) / records["count"].astype(np.float64))[order]
    found = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        name, kind, unit = named[int(s_name[start])]
        kind_enum = MetricKind(kind) if kind in MetricKind._value2member_map_ else (
            MetricKind.UNKNOWN)
        last = kind_enum in _LAST_KINDS or name.endswith(("_bucket", "_sum", "_count", "_total"))
        found.append(Series(
            name=name, labels=labels_of[int(s_labels[start])], kind=kind_enum,
            timestamps_ms=tuple(times[start:end].tolist()),
            values=tuple((lasts if last else means)[start:end].tolist()), unit=unit,
        ))
    found.sort(key=lambda item: item.name)
    return found
