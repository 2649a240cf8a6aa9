"""Metric storage: parsed points in, per-minute chunks out, day partitions, retention.

Every point is folded into its series' minute (min, max, sum, count, last). Histograms
arrive as the classic `_bucket{le=…}`/`_sum`/`_count` series (every parser flattens them
so), so buckets merge per minute like any other series: cumulative ones keep their last
value, delta ones add up in `sum`.

The minutes of one metric name in one minute are stored together, as one *chunk*: a row of
the day-partitioned table `cluster_metricchunk` (cluster, name, minute, number of series)
whose `data` is the packed array of the series' minutes (`CHUNK`: label-set id, min, max,
sum, count, last value, time of the last value; big-endian, as PostgreSQL's own binary
sends write them, so migration 0007 could build it in SQL), compressed by zstd. A load
groups its points in numpy and appends one chunk per (name, minute) it touched, never
updating a stored one: a
row per series and minute instead cost PostgreSQL about 4 µs a point to insert and index,
and a dcgm scrape has 320,000. Readers (`metrics_read`) combine the chunks of a minute,
and `metrics_minutes_compact` folds a finished day's chunks into one per (name, minute).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import cramjam
import numpy as np
import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from trustrank.cluster.models import Cluster
from trustrank.cluster.services.metrics_ids import (
    NAME_BITS,
    NAME_MASK,
    SeriesIds,
    sorted_unique,
)
from trustrank.parsers.series import Labels, Series
from trustrank.parsers.series_checks import STORABLE_MS

TABLE = "cluster_metricchunk"
_MINUTE_MS = 60_000
_DAY_MS = 86_400_000
_EPOCH = date(1970, 1, 1)

CHUNK = np.dtype([("labels_id", ">i8"), ("min", ">f8"), ("max", ">f8"), ("sum", ">f8"),
                  ("count", ">i4"), ("last", ">f8"), ("last_ms", ">i8")])

# A chunk's `data` is the packed array compressed by zstd (level 1: about 300 MB/s): a
# tenth or less of the bytes to write, TOAST and keep for fourteen days. Chunks that
# migration 0007 built in SQL are the packed array as it is; a frame's magic number cannot
# start one (it would be a label-set id above 2^61).
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def chunk_pack(records: np.ndarray[Any, Any]) -> bytes:
    return bytes(cramjam.zstd.compress(records.tobytes(), level=1))


def chunk_records(data: bytes) -> np.ndarray[Any, Any]:
    """The `CHUNK` entries of a stored chunk."""
    if data.startswith(_ZSTD_MAGIC):
        data = bytes(cramjam.zstd.decompress(data))
    return np.frombuffer(data, dtype=CHUNK)


@dataclass(frozen=True)
class MetricsLoaded:
    series: int
    new_series: int
    points: int
    minutes: int
    rejected: int = 0  # points storage could not hold, dropped

    def as_dict(self) -> dict[str, int]:
        counts = {"series": self.series, "new_series": self.new_series,
                  "points": self.points, "minutes": self.minutes}
        if self.rejected:
            counts["rejected"] = self.rejected
        return counts


def partition_name(day: date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


def minutes_partition_ensure(*, days: Iterable[date]) -> None:
    """Create the day partitions the points need. Concurrent loads serialise on an
    advisory lock so two never race on CREATE TABLE of the same day.

    Which partitions exist is read from the catalog on every load (one cheap query), not
    remembered by the process: retention on another worker host may have dropped a day
    this process once created, and a remembered day would make the load fail."""
    wanted = {partition_name(day): day for day in set(days)}
    if not wanted:
        return
    with connection.cursor() as cur:
        cur.execute(
            "SELECT name FROM unnest(%s::text[]) AS name WHERE to_regclass(name) IS NULL",
            [sorted(wanted)],
        )
        missing = sorted(wanted[row[0]] for row in cur.fetchall())
    if not missing:
        return
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [TABLE])
        for day in missing:
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF {TABLE} "
                "FOR VALUES FROM (%s) TO (%s)",
                [start, start + timedelta(days=1)],
            )
            # The packed arrays are numbers that hardly compress: TOAST's compression
            # would spend its time trying (EXTERNAL stores them out of line as they are).
            cur.execute(f"ALTER TABLE {partition_name(day)} ALTER COLUMN data SET STORAGE "
                        "EXTERNAL")


def minute_partitions() -> list[tuple[str, date]]:
    """Existing day partitions, oldest first."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass ORDER BY c.relname",
            [TABLE],
        )
        names = [row[0] for row in cur.fetchall()]
    found = []
    for name in names:
        try:
            day = datetime.strptime(name.rsplit("_p", 1)[1], "%Y%m%d").date()  # noqa: DTZ007
        except (IndexError, ValueError):
            continue
        found.append((name, day))
    return found


def metrics_retention_apply(*, now: datetime | None = None) -> list[str]:
    """Drop whole day partitions older than TRUSTRANK_CLUSTER_RETENTION_DAYS; returns
    their names. Label sets and names stay (they are small and come back with the next
    scrape)."""
    now = now or timezone.now()
    cutoff = (now - timedelta(days=settings.TRUSTRANK_CLUSTER_RETENTION_DAYS)).date()
    dropped = []
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [TABLE])
        for name, day in minute_partitions():
            # A partition holds [day, day + 1): drop it once all of it is past the cutoff.
            if day < cutoff:
                cur.execute(f"DROP TABLE IF EXISTS {name}")
                dropped.append(name)
    return dropped


# --- grouping points into chunks -------------------------------------------------------


@dataclass(frozen=True)
class Minutes:
    """Series minutes as columns, sorted by name, minute, then label set within each
    (name, minute): `chunks` are the boundaries of the (name, minute) runs."""

    name_id: np.ndarray[Any, Any]
    minute: np.ndarray[Any, Any]
    records: np.ndarray[Any, Any]  # CHUNK
    chunks: np.ndarray[Any, Any]  # start of each (name, minute) run, then len(records)


def minutes_group(
    *, series_ids: np.ndarray[Any, Any], ts: np.ndarray[Any, Any], val: np.ndarray[Any, Any]
) -> Minutes:
    """Points (series id, milliseconds, value) folded into their series' minutes. The
    last value of a minute is the one with the latest time; of equal times, the larger
    (points of one minute have no order of arrival)."""
    count = len(series_ids)
    minute = ts // _MINUTE_MS
    name_col, labels_col = series_ids & NAME_MASK, series_ids >> NAME_BITS
    names = sorted_unique(name_col)
    name_rank = np.searchsorted(names, name_col) if len(names) > 1 else np.zeros(
        count, dtype=np.int64)
    first = int(minute.min()) if count else 0
    minute_rank = minute - first
    widths = [max(1, int(v).bit_length()) for v in (
        len(names) - 1, int(minute_rank.max(initial=0)), int(labels_col.max(initial=0)),
        count - 1)]
    if sum(widths) <= 63:
        # One vectorised sort of (name, minute, label set, position) packed in an int64,
        # several times faster than argsort or a lexsort pass per column.
        _, minute_bits, labels_bits, index_bits = widths
        packed = ((((name_rank << minute_bits) | minute_rank) << labels_bits | labels_col)
                  << index_bits) | np.arange(count, dtype=np.int64)
        packed.sort()
        order = packed & ((1 << index_bits) - 1)
        key = packed >> index_bits
        new_group = key[1:] != key[:-1]
        new_chunk = (key[1:] >> labels_bits) != (key[:-1] >> labels_bits)
    else:
        order = np.lexsort((labels_col, minute_rank, name_rank))
        s_name, s_minute, s_labels = name_rank[order], minute_rank[order], labels_col[order]
        new_chunk = (s_name[1:] != s_name[:-1]) | (s_minute[1:] != s_minute[:-1])
        new_group = new_chunk | (s_labels[1:] != s_labels[:-1])
    starts = np.flatnonzero(np.r_[True, new_group])
    chunk_starts = np.flatnonzero(np.r_[True, new_chunk[starts[1:] - 1]])
    sid, s_ts, s_val = series_ids[order], ts[order], val[order]
    counts = np.diff(np.r_[starts, count])
    records = np.empty(len(starts), dtype=CHUNK)
    group_sid = sid[starts]
    records["labels_id"] = group_sid >> NAME_BITS
    records["min"] = np.minimum.reduceat(s_val, starts)
    records["max"] = np.maximum.reduceat(s_val, starts)
    records["sum"] = np.add.reduceat(s_val, starts)
    records["count"] = counts
    last_ms = np.maximum.reduceat(s_ts, starts)
    at_last = s_ts == np.repeat(last_ms, counts)
    records["last"] = np.maximum.reduceat(np.where(at_last, s_val, -np.inf), starts)
    records["last_ms"] = last_ms
    return Minutes(
        name_id=group_sid & NAME_MASK, minute=minute[order][starts], records=records,
        chunks=np.r_[chunk_starts, len(starts)],
    )


def chunks_append(*, cluster_id: int, minutes: Minutes) -> int:
    """Append one chunk per (name, minute) run by binary COPY into the day partitions
    (created here when missing); returns the number of chunks."""
    bounds = minutes.chunks
    if len(bounds) < 2:
        return 0
    heads = bounds[:-1]
    days = {_EPOCH + timedelta(days=int(d))
            for d in np.unique(minutes.minute[heads] * _MINUTE_MS // _DAY_MS)}
    minutes_partition_ensure(days=days)
    by_day: dict[date, list[tuple[int, int, int]]] = {}
    for run, (start, end) in enumerate(zip(heads.tolist(), bounds[1:].tolist(), strict=True)):
        minute = int(minutes.minute[start])
        by_day.setdefault(_EPOCH + timedelta(days=minute * _MINUTE_MS // _DAY_MS), []).append(
            (run, start, end))
    raw = minutes.records
    with transaction.atomic():
        connection.ensure_connection()
        with connection.connection.cursor() as cur:
            for day, runs in sorted(by_day.items()):
                with cur.copy(f"COPY {partition_name(day)} (cluster_id, name_id, minute, "
                              "series, data) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["int8", "int8", "timestamptz", "int4", "bytea"])
                    for _, start, end in runs:
                        minute = int(minutes.minute[start])
                        copy.write_row((
                            cluster_id, int(minutes.name_id[start]),
                            datetime.fromtimestamp(minute * 60, tz=UTC), end - start,
                            chunk_pack(raw[start:end]),
                        ))
    return len(heads)


def minutes_store(
    *, cluster: Cluster, series_ids: np.ndarray[Any, Any], ts: np.ndarray[Any, Any],
    val: np.ndarray[Any, Any], now: datetime, ids: SeriesIds,
) -> int:
    """Points as columns (series id, milliseconds, value) folded into their minutes and
    appended as chunks, however many requests they came from; returns the number of
    (series, minute) entries written (partial: readers combine them with other loads').
    `ids` (which resolved the series ids) learns which series were stored."""
    # The last line behind the parsers' checks: a point of an unstorable label set or
    # name (a negative id, see `metrics_ids.UNSTORABLE`), with a time no day partition
    # can hold, or NaN (it would poison min, max and sum) is dropped and counted, not
    # left to fail the load.
    usable = ((series_ids >= 0) & (ts >= STORABLE_MS[0]) & (ts <= STORABLE_MS[1])
              & ~np.isnan(val))
    if not usable.all():
        ids.dropped += int(len(usable) - usable.sum())
        series_ids, ts, val = series_ids[usable], ts[usable], val[usable]
    if not len(series_ids):
        return 0
    grouped = minutes_group(series_ids=series_ids, ts=ts, val=val)
    ids.observe(sorted_unique(grouped.records["labels_id"].astype(np.int64) << NAME_BITS
                              | grouped.name_id))
    chunks_append(cluster_id=cluster.pk, minutes=grouped)
    # Every load of a cluster would otherwise update its one row: concurrent workers would
    # queue on that row lock. A minute's precision is enough for "metrics last seen".
    Cluster.objects.filter(pk=cluster.pk).filter(
        Q(metrics_at__isnull=True) | Q(metrics_at__lt=now - timedelta(minutes=1))
    ).update(metrics_at=now)
    return len(grouped.records)


def series_store(
    *, cluster: Cluster, series: Iterable[Series], now: datetime | None = None
) -> MetricsLoaded:
    """Store parsed series (any of the three metric parsers) as per-minute points.
    Run it inside the job's transaction: a load is then all or nothing, and a job run
    again after a crash cannot count its points twice."""
    now = now or timezone.now()
    items: list[Series] = []
    index_of: dict[tuple[str, Labels], int] = {}
    parts_idx: list[int] = []
    parts_ts: list[tuple[int, ...]] = []
    parts_val: list[tuple[float, ...]] = []
    for item in series:
        if not item.timestamps_ms:
            continue
        ident = (item.name, item.labels)
        index = index_of.get(ident)
        if index is None:
            index = index_of[ident] = len(items)
            items.append(item)
        parts_idx.append(index)
        parts_ts.append(item.timestamps_ms)
        parts_val.append(item.values)
    if not items:
        return MetricsLoaded(0, 0, 0, 0)
    positions = np.repeat(np.array(parts_idx, dtype=np.int64),
                          np.array([len(p) for p in parts_ts], dtype=np.int64))
    try:
        ts = np.fromiter((t for part in parts_ts for t in part), dtype=np.int64,
                         count=len(positions))
    except OverflowError:
        # A time past int64 (2^70 ms): mark it out of range; minutes_store drops it.
        ts = np.fromiter((t if STORABLE_MS[0] <= t <= STORABLE_MS[1] else -1
                          for part in parts_ts for t in part), dtype=np.int64,
                         count=len(positions))
    val = np.fromiter((v for part in parts_val for v in part), dtype=np.float64,
                      count=len(positions))
    ids = SeriesIds(cluster_id=cluster.pk, now=now)
    per_item = items_series_ids(ids=ids, items=items)
    minutes = minutes_store(cluster=cluster, series_ids=per_item[positions], ts=ts, val=val,
                            now=now, ids=ids)
    new_series = ids.finish()
    return MetricsLoaded(series=len(items), new_series=new_series,
                         points=len(positions) - ids.dropped, minutes=minutes,
                         rejected=ids.dropped)


def items_series_ids(*, ids: SeriesIds, items: Sequence[Series]) -> np.ndarray[Any, Any]:
    """The series id of each item (creating label sets and names as needed)."""
    labels = np.array(ids.labels_ids([item.labels for item in items]), dtype=np.int64)
    names = np.array(ids.name_ids([(item.name, item.kind, item.unit) for item in items]),
                     dtype=np.int64)
    return labels << NAME_BITS | names


# --- compaction --------------------------------------------------------------------------

# A partition whose chunks were folded carries this comment; points arriving later for
# that day add chunks again, which readers combine.
_COMPACTED = "compacted"


def metrics_minutes_compact(*, day: date) -> int:
    """Fold the day partition's chunks into one per (cluster, name, minute); returns the
    number of (name, minute) runs that had more than one chunk. Loads are held off the
    partition while it runs (readers are not)."""
    from trustrank.cluster.services.metrics_read import chunks_combine

    part = partition_name(day)
    folded = 0
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"LOCK TABLE {part} IN SHARE ROW EXCLUSIVE MODE")
        cur.execute(f"SELECT DISTINCT cluster_id, name_id FROM {part} "  # noqa: S608
                    "GROUP BY cluster_id, name_id, minute HAVING count(*) > 1")
        pairs = cur.fetchall()
        for cluster_id, name_id in pairs:
            connection.ensure_connection()
            with psycopg.Cursor(connection.connection) as raw:
                raw.execute(f"SELECT minute, data FROM {part} "  # noqa: S608
                            "WHERE cluster_id = %s AND name_id = %s ORDER BY minute",
                            [cluster_id, name_id], binary=True)
                rows = raw.fetchall()
            minutes, runs = chunks_combine(
                [(name_id, int(at.timestamp()) // 60, bytes(data)) for at, data in rows])
            folded += runs
            cur.execute(f"DELETE FROM {part} WHERE cluster_id = %s AND name_id = %s",  # noqa: S608
                        [cluster_id, name_id])
            chunks_append(cluster_id=cluster_id, minutes=minutes)
        cur.execute(f"COMMENT ON TABLE {part} IS '{_COMPACTED}'")
    return folded


def metrics_minutes_compact_due(*, now: datetime | None = None) -> list[str]:
    """Compact every finished day partition not compacted yet (the periodic retention
    task runs it); returns their names."""
    today = (now or timezone.now()).astimezone(UTC).date()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass "
            "AND coalesce(obj_description(c.oid, 'pg_class'), '') <> %s",
            [TABLE, _COMPACTED],
        )
        pending = {row[0] for row in cur.fetchall()}
    done = []
    for name, day in minute_partitions():
        if name in pending and day < today:
            metrics_minutes_compact(day=day)
            done.append(name)
    return done

