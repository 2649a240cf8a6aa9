"""Metric storage: parsed series in, per-minute points out, day partitions, retention.

Every point is folded into its series' minute (min, max, sum, count, last). Histograms
arrive as the classic `_bucket{le=…}`/`_sum`/`_count` series (every parser flattens them
so), so buckets merge per minute like any other series: cumulative ones keep their last
value, delta ones add up in `sum`. Points are grouped in numpy and appended by binary
COPY as partial minute rows (one per series and minute of a load), never one ORM save
per point and never an update: readers combine a minute's rows, and finished days are
compacted to one row per minute.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from trustrank.cluster.models import Cluster
from trustrank.parsers.series import Labels, MetricKind, Series

TABLE = "cluster_metricminute"
_MINUTE_MS = 60_000
_DAY_MS = 86_400_000



class SeriesIds:
    """The series ids a worker has looked up or created, by (cluster id, labels), then
    name. Series are created once and never change their id, so a worker keeps them;
    bounded (`limit` series) so a churning cluster cannot grow it without limit. Filled
    only after commit: a rolled-back insert leaves no stale id.

    Label set first, because points come label set by label set (a dcgm GPU's 40 metrics
    share one): a loader hashes a label set once per request and resource, and each point
    then costs one look-up by name, whose hash Python keeps."""

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.by_labels: dict[tuple[int, Labels], dict[str, int]] = {}

    def names(self, cluster_id: int, labels: Labels) -> dict[str, int]:
        """name -> id for the label set (an empty dict when none is known; read only)."""
        return self.by_labels.get((cluster_id, labels)) or {}

    def get(self, cluster_id: int, name: str, labels: Labels) -> int | None:
        names = self.by_labels.get((cluster_id, labels))
        return None if names is None else names.get(name)

    def remember_on_commit(
        self, cluster_id: int, found: Sequence[tuple[str, Labels, int]]
    ) -> None:
        """Keep (name, labels, id) once the current transaction commits."""

        def remember() -> None:
            if self.size + len(found) > self.limit:
                self.by_labels.clear()
                self.size = 0
            for name, labels, series_id in found:
                names = self.by_labels.setdefault((cluster_id, labels), {})
                self.size += name not in names
                names[name] = series_id

        transaction.on_commit(remember)


_SERIES_IDS = SeriesIds(limit=2_000_000)
_PARTITIONS: set[date] = set()
# Every load that creates series of a cluster takes this transaction lock, with the
# cluster's id, before it writes: loads of one cluster then never race to insert the same
# series. (The two-number form, apart from the partitions' one-number lock.) Minutes need
# no lock: they are appended, never merged in place.
_MERGE_LOCK = 0x6D6D

# Labels that link a series to cluster objects (dcgm-exporter, kube-state-metrics, vLLM,
# and the OTLP resource attributes `ParsedMetrics.series()` copies).
_LINKS: dict[str, tuple[str, ...]] = {
    "namespace": ("namespace", "k8s.namespace.name", "exported_namespace"),
    "pod": ("pod", "k8s.pod.name", "exported_pod"),
    "container": ("container", "k8s.container.name", "exported_container"),
    "node": ("Hostname", "k8s.node.name", "node"),
    "gpu": ("gpu",),
    "gpu_uuid": ("UUID", "uuid"),
}
_MAX = {"namespace": 253, "pod": 253, "container": 253, "node": 253, "gpu": 64, "gpu_uuid": 128}


def series_key(*, name: str, labels: Sequence[tuple[str, str]]) -> str:
    """MD5 of name\x1f k\x1dv \x1e k\x1dv …: the series' unique key in its cluster."""
    text = name + "\x1f" + "\x1e".join(map("\x1d".join, labels))
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def series_keys(idents: Iterable[tuple[str, Labels]]) -> list[str]:
    """`series_key` of many (name, labels): the labels' part is built once per label set
    (the 40 series of a dcgm GPU share one)."""
    texts: dict[Labels, bytes] = {}
    keys = []
    md5 = hashlib.md5
    for name, labels in idents:
        text = texts.get(labels)
        if text is None:
            text = texts[labels] = "\x1e".join(map("\x1d".join, labels)).encode()
        keys.append(md5(name.encode() + b"\x1f" + text, usedforsecurity=False).hexdigest())
    return keys


@dataclass(frozen=True)
class MetricsLoaded:
    series: int
    new_series: int
    points: int
    minutes: int

    def as_dict(self) -> dict[str, int]:
        return {"series": self.series, "new_series": self.new_series, "points": self.points,
                "minutes": self.minutes}


def partition_name(day: date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


def minutes_partition_ensure(*, days: Iterable[date]) -> None:
    """Create the day partitions the points need. Concurrent loads serialise on an
    advisory lock so two never race on CREATE TABLE of the same day."""
    missing = sorted(set(days) - _PARTITIONS)
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
    transaction.on_commit(lambda: _PARTITIONS.update(missing))


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
    their names. Series rows stay (they are small and come back with the next scrape)."""
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
                _PARTITIONS.discard(day)
    return dropped


_LINK_ORDER = tuple((names, _MAX[column]) for column, names in _LINKS.items())


def _link_values(labels: Sequence[tuple[str, str]]) -> list[str]:
    """The link columns in `_LINKS` order: for each, the first of its label names that
    has a value (plain loops: this runs once per new series, 320,000 for a large
    cluster's first scrape)."""
    mapping = dict(labels)
    found = []
    for names, limit in _LINK_ORDER:
        value = ""
        for label in names:
            value = mapping.get(label, "")
            if value:
                break
        found.append(value[:limit])
    return found


_SERIES_COLUMNS = ("key", "name", "kind", "unit", "labels", "namespace", "pod", "container",
                   "node", "gpu", "gpu_uuid")
# New series go straight into the table by COPY, with ids drawn from its sequence first,
# under the cluster's load lock (`_MERGE_LOCK`, which every writer of series takes before
# it looks): after the look-up of the keys, nobody else can insert one of them. That
# needs no session table, INSERT … SELECT or RETURNING (about the same backend time as
# those, measured); ON CONFLICT's speculative insertion cost half as much again.
# The keys go as one comma-separated text (hex digests hold no comma): psycopg's dumping
# of a list runs a regex per element, a second for a scrape's 320,000 new series.
_SERIES_FOUND = """
SELECT key, id FROM cluster_metricseries
WHERE cluster_id = %s AND key = ANY(string_to_array(%s, ','))
"""
_SERIES_IDS_DRAW = """
SELECT nextval(pg_get_serial_sequence('cluster_metricseries', 'id'))
FROM generate_series(1, %s)
"""
_SERIES_COPY = (
    f"COPY cluster_metricseries (id, cluster_id, first_seen, {', '.join(_SERIES_COLUMNS)}) "
    "FROM STDIN"
)


# COPY's text format: backslash, tab, newline and carriage return escaped, field by
# field. (A NUL, which PostgreSQL text cannot hold, would fail the COPY: the parsers
# refuse NUL names and labels.)
def _copy_text_escape(text: str) -> str:
    # Four replaces (memchr-fast when the character is absent, as it nearly always is):
    # str.translate with a multi-character mapping goes character by character.
    return (text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


def _series_rows(
    keys: Iterable[str], *, ids: Iterable[int], head: str, unknown: dict[str, int],
    items: Sequence[Series],
) -> str:
    """The COPY text of the new series (`head`: the cluster and time columns): one
    buffer, escaped by C-level replaces, rather than a write_row per series (a large
    cluster's first scrape has 320,000). The labels (JSON and link columns) are escaped
    once per label set and names once per name: the 40 series of a dcgm GPU share their
    labels, 8,000 GPUs share each name."""
    by_labels: dict[Labels, str] = {}
    by_name: dict[tuple[str, str, str], str] = {}
    rows = []
    for key, series_id in zip(keys, ids, strict=True):
        item = items[unknown[key]]
        labels = by_labels.get(item.labels)
        if labels is None:
            labels = by_labels[item.labels] = "\t".join(map(_copy_text_escape, (
                orjson.dumps(dict(item.labels)).decode(), *_link_values(item.labels))))
        named = by_name.get((item.name, item.kind, item.unit))
        if named is None:
            named = by_name[(item.name, item.kind, item.unit)] = "\t".join(map(
                _copy_text_escape, (item.name[:255], str(item.kind)[:16], item.unit[:64])))
        rows.append(f"{series_id}\t{head}\t{key}\t{named}\t{labels}")
    return "\n".join(rows) + "\n"


def _series_upsert(
    *, cluster: Cluster, unknown: dict[str, int], items: Sequence[Series], now: datetime
) -> tuple[dict[str, int], int]:
    """Ids of the series keyed in `unknown`, creating those that do not exist. On
    psycopg's own cursor: Django's client-side binding rewrites every placeholder of a
    bulk statement with a regex, which cost more than the insert itself."""
    import psycopg

    with transaction.atomic():
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_MERGE_LOCK, cluster.pk])
            # Only series that exist already (another worker made them, or a cache was
            # cleared) are found, by the unique (cluster, key) index; a join against the
            # cluster's series instead read every series of the cluster on each load.
            cur.execute(_SERIES_FOUND, [cluster.pk, ",".join(unknown)])
            found = {key: int(series_id) for key, series_id in cur.fetchall()}
            missing = [key for key in unknown if key not in found]
            if missing:
                cur.execute(_SERIES_IDS_DRAW, [len(missing)])
                ids = [int(row[0]) for row in cur.fetchall()]
                head = f"{cluster.pk}\t{now.isoformat()}"
                with cur.copy(_SERIES_COPY) as copy:
                    copy.write(_series_rows(missing, ids=ids, head=head, unknown=unknown,
                                            items=items))
                found.update(zip(missing, ids, strict=True))
    return found, len(missing)


def _series_ids(
    *, cluster: Cluster, items: Sequence[Series], now: datetime
) -> tuple[np.ndarray[Any, Any], int]:
    """The ids of the series (in order), creating the missing ones."""
    ids = np.empty(len(items), dtype=np.int64)
    unknown: dict[str, int] = {}
    for position, item in enumerate(items):
        known = _SERIES_IDS.get(cluster.pk, item.name, item.labels)
        if known is None:
            unknown[series_key(name=item.name, labels=item.labels)] = position
        else:
            ids[position] = known
    if not unknown:
        return ids, 0
    found, created = _series_upsert(cluster=cluster, unknown=unknown, items=items, now=now)
    new: list[tuple[str, Labels, int]] = []
    for key, position in unknown.items():
        ids[position] = found[key]
        item = items[position]
        new.append((item.name, item.labels, found[key]))
    _SERIES_IDS.remember_on_commit(cluster.pk, new)
    return ids, created


# Minute rows are partial: each load appends the (series, minute) rows of its own points
# by one binary COPY per day partition (no tuple routing), built by numpy as one buffer,
# and never updates a stored row. Readers combine a minute's rows (`_MINUTE_COMBINED`)
# and `metrics_minutes_compact` folds a finished day into one row per minute. Merging
# into stored minutes instead (INSERT … ON CONFLICT DO UPDATE) cost about 15 µs a row of
# the backend's CPU, a non-HOT update of a full page, against about 4 µs to append one.
_COPY_ROW = np.dtype([
    ("fields", ">i2"),
    ("l1", ">i4"), ("series_id", ">i8"), ("l2", ">i4"), ("minute", ">i8"),
    ("l3", ">i4"), ("min", ">f8"), ("l4", ">i4"), ("max", ">f8"),
    ("l5", ">i4"), ("sum", ">f8"), ("l6", ">i4"), ("count", ">i4"),
    ("l7", ">i4"), ("last", ">f8"), ("l8", ">i4"), ("last_ms", ">i8"),
])
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8
_COPY_TRAILER = b"\xff\xff"
# timestamptz in binary COPY: microseconds since 2000-01-01 UTC.
_PG_EPOCH_MINUTE = 10_957 * (_DAY_MS // _MINUTE_MS)
_COPY_FIELDS = ("series_id", "minute", "min", "max", "sum", "count", "last", "last_ms")


# Rows per COPY write: a batch of a million points would otherwise build its whole binary
# buffer (70 bytes a row) two or three times over in memory.
_COPY_CHUNK = 65_536


def _copy_chunks(columns: dict[str, np.ndarray[Any, Any]]) -> Iterator[bytes]:
    """The binary COPY stream of the rows, in pieces of `_COPY_CHUNK` rows."""
    yield _COPY_HEADER
    total = len(columns["series_id"])
    for start in range(0, total, _COPY_CHUNK):
        part = {name: column[start:start + _COPY_CHUNK] for name, column in columns.items()}
        rows = np.empty(len(part["series_id"]), dtype=_COPY_ROW)
        rows["fields"] = 8
        for index, name in enumerate(_COPY_FIELDS, start=1):
            rows[f"l{index}"] = 4 if name == "count" else 8
            rows[name] = part[name]
        rows["minute"] = (part["minute"] - _PG_EPOCH_MINUTE) * 60_000_000
        yield rows.tobytes()
    yield _COPY_TRAILER


def _minutes_append(*, columns: dict[str, np.ndarray[Any, Any]]) -> None:
    """COPY the rows into their day partitions (created already)."""
    day_of = columns["minute"] // (_DAY_MS // _MINUTE_MS)
    epoch = date(1970, 1, 1)
    with transaction.atomic():
        connection.ensure_connection()
        with connection.connection.cursor() as cur:
            days = np.unique(day_of)
            for day_number in days:
                rows = columns if len(days) == 1 else {
                    name: column[day_of == day_number] for name, column in columns.items()}
                part = partition_name(epoch + timedelta(days=int(day_number)))
                with cur.copy(f"COPY {part} ({', '.join(_COPY_FIELDS)}) FROM STDIN "
                              "(FORMAT BINARY)") as copy:
                    for chunk in _copy_chunks(rows):
                        copy.write(chunk)


# A minute's partial rows combined, for one series (`s.id` of the enclosing query, as a
# LATERAL subquery: one index range scan per series). The last value is the one with the
# latest time; of equal times, the larger value (rows of one minute have no load order).
_MINUTE_COMBINED = f"""
SELECT minute, min(min) AS min, max(max) AS max, sum(sum) AS sum, sum(count) AS count,
       (array_agg(last ORDER BY last_ms DESC, last DESC))[1] AS last, max(last_ms) AS last_ms
FROM {TABLE} WHERE series_id = s.id AND minute >= %s GROUP BY minute
"""  # noqa: S608 (a constant name)


def minutes_combined_sql(*, where: str) -> str:
    """SQL for the combined minutes (series columns `name`, `pod`, `node`, `gpu`, then
    `minute`, `min`, `max`, `sum`, `count`, `last`, `last_ms`) of the series matching
    `where` (a constant condition on `s`, the series). Parameters: the first minute,
    then those of `where`. What readers outside this module (pages, tests) use instead
    of the raw partial rows."""
    return (
        "SELECT s.name, s.pod, s.node, s.gpu, m.minute, m.min, m.max, m.sum, m.count, "  # noqa: S608
        f"m.last, m.last_ms FROM cluster_metricseries s CROSS JOIN LATERAL ("
        f"{_MINUTE_COMBINED}) m WHERE {where}"
    )


# Compaction, per finished day: a partition whose rows were folded carries this comment;
# points arriving later for that day add partial rows again, which readers combine.
_COMPACTED = "compacted"
_COMPACT = """
CREATE TEMP TABLE cluster_minute_compact ON COMMIT DROP AS
SELECT series_id, minute, min(min) AS min, max(max) AS max, sum(sum) AS sum,
       sum(count)::int4 AS count, (array_agg(last ORDER BY last_ms DESC, last DESC))[1] AS last,
       max(last_ms) AS last_ms
FROM {part} GROUP BY series_id, minute HAVING count(*) > 1
"""


def metrics_minutes_compact(*, day: date) -> int:
    """Fold the day partition's partial rows into one row per (series, minute); returns
    the number of minutes that had more than one row. Loads are held off the partition
    while it runs (readers are not)."""
    part = partition_name(day)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"LOCK TABLE {part} IN SHARE ROW EXCLUSIVE MODE")
        cur.execute(_COMPACT.format(part=part))
        cur.execute("SELECT count(*) FROM cluster_minute_compact")
        folded = int(cur.fetchone()[0])
        if folded:
            cur.execute(f"DELETE FROM {part} p USING cluster_minute_compact c "  # noqa: S608
                        "WHERE p.series_id = c.series_id AND p.minute = c.minute")
            cur.execute(f"INSERT INTO {part} ({', '.join(_COPY_FIELDS)}) "  # noqa: S608
                        f"SELECT {', '.join(_COPY_FIELDS)} FROM cluster_minute_compact")
        # Dropped here too: a caller's outer transaction would keep it to its own commit.
        cur.execute("DROP TABLE cluster_minute_compact")
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
    ts = np.fromiter((t for part in parts_ts for t in part), dtype=np.int64,
                     count=len(positions))
    val = np.fromiter((v for part in parts_val for v in part), dtype=np.float64,
                      count=len(positions))
    return _points_store(cluster=cluster, items=items, index=positions, ts=ts, val=val,
                         now=now)


def _points_store(
    *, cluster: Cluster, items: Sequence[Series], index: np.ndarray[Any, Any],
    ts: np.ndarray[Any, Any], val: np.ndarray[Any, Any], now: datetime,
) -> MetricsLoaded:
    """Points as columns (series position in `items`, milliseconds, value) to minutes."""
    id_of_index, new_series = _series_ids(cluster=cluster, items=items, now=now)
    minutes = minutes_store(cluster=cluster, series_ids=id_of_index[index], ts=ts, val=val,
                            now=now)
    return MetricsLoaded(
        series=len(items), new_series=new_series, points=len(index), minutes=minutes
    )


def minutes_store(
    *, cluster: Cluster, series_ids: np.ndarray[Any, Any], ts: np.ndarray[Any, Any],
    val: np.ndarray[Any, Any], now: datetime,
) -> int:
    """Points as columns (series id, milliseconds, value) folded into their minutes, in
    one COPY per day however many requests they came from; returns the number of
    (series, minute) rows written (partial rows: readers combine them with those of
    other loads)."""
    sid = series_ids
    minute = ts // _MINUTE_MS

    # Group points by (series, minute): sort by series, minute, time; reduce each run.
    order = np.lexsort((ts, minute, sid))
    sid, minute, ts, val = sid[order], minute[order], ts[order], val[order]
    starts = np.flatnonzero(np.r_[True, (sid[1:] != sid[:-1]) | (minute[1:] != minute[:-1])])
    ends = np.r_[starts[1:], len(sid)] - 1
    g_sid, g_minute = sid[starts], minute[starts]
    g_min = np.minimum.reduceat(val, starts)
    g_max = np.maximum.reduceat(val, starts)
    g_sum = np.add.reduceat(val, starts)
    g_count = np.diff(np.r_[starts, len(sid)])
    g_last, g_last_ms = val[ends], ts[ends]

    epoch = date(1970, 1, 1)
    days = {epoch + timedelta(days=int(d)) for d in np.unique(g_minute * _MINUTE_MS // _DAY_MS)}
    minutes_partition_ensure(days=days)
    _minutes_append(columns={
        "series_id": g_sid, "minute": g_minute, "min": g_min, "max": g_max, "sum": g_sum,
        "count": g_count, "last": g_last, "last_ms": g_last_ms,
    })
    # Every load of a cluster would otherwise update its one row: concurrent workers would
    # queue on that row lock. A minute's precision is enough for "metrics last seen".
    Cluster.objects.filter(pk=cluster.pk).filter(
        Q(metrics_at__isnull=True) | Q(metrics_at__lt=now - timedelta(minutes=1))
    ).update(metrics_at=now)
    return len(g_sid)


# Kinds whose per-minute value is the last one (cumulative counters and histogram
# buckets); gauges read as the minute's mean.
_LAST_KINDS = {MetricKind.COUNTER, MetricKind.HISTOGRAM, MetricKind.SUMMARY}


def series_window(
    *, cluster: Cluster, since: datetime, names: Iterable[str] | None = None,
    prefixes: Iterable[str] = (), series_ids: Iterable[int] | None = None,
) -> list[Series]:
    """Stored series as parser `Series` (one sample per minute, at the minute's last
    timestamp), for the diagnoses' input builders and the charts."""
    where = ["s.cluster_id = %s"]
    params: list[Any] = [since.replace(second=0, microsecond=0), cluster.pk]
    name_filters = []
    if names is not None:
        name_filters.append("s.name = ANY(%s)")
        params.append(list(names))
    for prefix in prefixes:
        name_filters.append("s.name LIKE %s")
        params.append(prefix.replace("%", r"\%").replace("_", r"\_") + "%")
    if name_filters:
        where.append("(" + " OR ".join(name_filters) + ")")
    if series_ids is not None:
        where.append("s.id = ANY(%s)")
        params.append(list(series_ids))
    # Only constant SQL fragments are joined; values are bound parameters.
    sql = (
        "SELECT s.id, s.name, s.labels, s.kind, s.unit, "  # noqa: S608
        "array_agg(m.last_ms ORDER BY m.minute), "
        "array_agg(m.last ORDER BY m.minute), array_agg(m.sum / m.count ORDER BY m.minute) "
        f"FROM cluster_metricseries s CROSS JOIN LATERAL ({_MINUTE_COMBINED}) m "
        f"WHERE {' AND '.join(where)} GROUP BY s.id ORDER BY s.name, s.id"
    )
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    found = []
    for _, name, raw_labels, kind, unit, times, lasts, means in rows:
        # Django's psycopg setup hands jsonb to raw cursors as text.
        labels = orjson.loads(raw_labels) if isinstance(raw_labels, str | bytes) else raw_labels
        kind_enum = MetricKind(kind) if kind in MetricKind._value2member_map_ else (
            MetricKind.UNKNOWN)
        values = lasts if kind_enum in _LAST_KINDS or name.endswith(
            ("_bucket", "_sum", "_count", "_total")) else means
        found.append(Series(
            name=name, labels=tuple(sorted(labels.items())), kind=kind_enum,
            timestamps_ms=tuple(int(t) for t in times), values=tuple(float(v) for v in values),
            unit=unit,
        ))
    return found
