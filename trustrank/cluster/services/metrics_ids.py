"""Series ids: a metric name (`MetricName`) and a label set (`MetricLabels`) of a cluster.

A series id is `labels id << 32 | name id`: nothing is stored per series but the name's
id in its label set's `names`, so a large cluster's first scrape (1,000 nodes × 8 GPUs ×
40 dcgm metrics = 320,000 series) makes 8,000 label-set rows and 40 name rows instead of
320,000 series rows. `SeriesIds` resolves a load's label sets and names to ids, creating
the missing ones, and records the (label set, name) pairs new to the cluster; a worker
keeps what it learnt (bounded) for its next loads, once committed.

Every load that creates label sets or names of a cluster takes the cluster's
transaction lock (`_LOCK`, with the cluster's id) before it looks them up: loads of one
cluster never race to insert the same key, and the ids are drawn from the sequences and
the rows COPYed without ON CONFLICT (speculative insertion cost half as much again).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import orjson
import psycopg
from django.db import connection, transaction

from trustrank.parsers.series import Labels, MetricKind

NAME_BITS = 32
NAME_MASK = (1 << NAME_BITS) - 1
_LOCK = 0x6D6D

# Labels that link a label set to cluster objects (dcgm-exporter, kube-state-metrics,
# vLLM, and the OTLP resource attributes the loaders copy onto point labels).
_LINKS: dict[str, tuple[str, ...]] = {
    "namespace": ("namespace", "k8s.namespace.name", "exported_namespace"),
    "pod": ("pod", "k8s.pod.name", "exported_pod"),
    "container": ("container", "k8s.container.name", "exported_container"),
    "node": ("Hostname", "k8s.node.name", "node"),
    "gpu": ("gpu",),
    "gpu_uuid": ("UUID", "uuid"),
}
_MAX = {"namespace": 253, "pod": 253, "container": 253, "node": 253, "gpu": 64, "gpu_uuid": 128}
_LINK_ORDER = tuple((names, _MAX[column]) for column, names in _LINKS.items())


def sorted_unique(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The distinct values, sorted. numpy's own `unique` hashes when it need not return
    an inverse, about sixty times slower than its (vectorised) sort for a million int64."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]]


def labels_key(labels: Labels) -> uuid.UUID:
    """MD5 of k\x1dv joined by \x1e, in label order: the label set's key in its cluster
    (migration 0007 computes the same in SQL)."""
    text = "\x1e".join(map("\x1d".join, labels)).encode()
    return uuid.UUID(bytes=hashlib.md5(text, usedforsecurity=False).digest())


def series_id(*, labels_id: int, name_id: int) -> int:
    return labels_id << NAME_BITS | name_id


def link_values(labels: Sequence[tuple[str, str]]) -> list[str]:
    """The link columns in `_LINKS` order: for each, the first of its label names that
    has a value."""
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


# The id of a label set or name storage cannot hold: a series id made with it is negative,
# and `metrics.minutes_store` drops (and counts) its points.
UNSTORABLE = -1


def storable(text: str) -> bool:
    """Whether PostgreSQL text (and jsonb) can hold `text`: no NUL, and UTF-8 (a parser
    that decoded bad bytes with `surrogateescape` leaves lone surrogates)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _labels_storable(item: Labels) -> bool:
    return all(storable(key) and storable(value) for key, value in item)


# COPY's text format: backslash, tab, newline and carriage return escaped. (A NUL, which
# PostgreSQL text cannot hold, would fail the COPY: the parsers refuse NUL labels, and
# `SeriesIds` gives any that come anyway the id UNSTORABLE instead of a row.)
def _escape(text: str) -> str:
    return (text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


_LABELS_COPY = (
    "COPY cluster_metriclabels (id, cluster_id, first_seen, key, labels, names, namespace, "
    "pod, container, node, gpu, gpu_uuid) FROM STDIN"
)
_NAMES_COPY = "COPY cluster_metricname (id, cluster_id, first_seen, name, kind, unit) FROM STDIN"
_DRAW = "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)"
# A label set's names grow by the pairs a load saw first (rare after a cluster's first
# scrape); the union keeps the array sorted and each id once, so a repeated load is a
# no-op.
_NAMES_ADD = """
UPDATE cluster_metriclabels l
SET names = (SELECT array_agg(DISTINCT n ORDER BY n) FROM unnest(l.names || v.names) n)
FROM (SELECT id, array_agg(name_id) AS names
      FROM unnest(%s::int8[], %s::int8[]) AS t(id, name_id) GROUP BY id) v
WHERE l.id = v.id
"""


class _Cache:
    """What a worker learnt of the clusters' ids, bounded (`limit` entries). The series
    of a cluster are a sorted array: a load's ids are checked against it with one
    `searchsorted`, not a set look-up per series."""

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self.labels: dict[tuple[int, Labels], int] = {}
        # (cluster, (resource attributes, a point's attribute bytes)) -> label-set id.
        self.raw: dict[tuple[int, tuple[Labels, bytes]], int] = {}
        self.names: dict[tuple[int, str], int] = {}
        self.series: dict[int, np.ndarray[Any, Any]] = {}
        self.size = 0

    def clear(self) -> None:
        self.labels.clear()
        self.raw.clear()
        self.names.clear()
        self.series.clear()
        self.size = 0

    def keep(self, *, cluster_id: int, labels: dict[Labels, int], names: dict[str, int],
             series: np.ndarray[Any, Any], raw: dict[tuple[Labels, bytes], int]) -> None:
        before = len(self.labels) + len(self.names) + len(self.raw)
        self.raw.update(((cluster_id, key), labels_id) for key, labels_id in raw.items())
        known = self.series.get(cluster_id)
        added = series
        if len(added):
            merged = sorted_unique(added if known is None else np.r_[known, added])
            self.size += len(merged) - (0 if known is None else len(known))
            self.series[cluster_id] = merged
        self.labels.update(((cluster_id, item), labels_id) for item, labels_id in labels.items())
        self.names.update(((cluster_id, name), name_id) for name, name_id in names.items())
        self.size += len(self.labels) + len(self.names) + len(self.raw) - before
        if self.size > self.limit:
            self.clear()

    def missing(self, cluster_id: int, series: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The ids among `series` (sorted, unique) not known for the cluster."""
        known = self.series.get(cluster_id)
        return series if known is None else series[~_among(known, series)]


_CACHE = _Cache(limit=4_000_000)


class SeriesIds:
    """A load's ids for one cluster, inside the load's transaction. `labels_ids` and
    `name_ids` find or create; `observe` notes the series a load wrote; `finish` writes
    the new label sets (with their names), names and pairs, and has the worker's cache
    learn them once the transaction commits. Returns from `finish` the number of series
    new to the cluster."""

    def __init__(self, *, cluster_id: int, now: datetime) -> None:
        self.cluster_id = cluster_id
        self.now = now
        self.labels: dict[Labels, int] = {}
        self.raw: dict[tuple[Labels, bytes], int] = {}
        self.names: dict[str, int] = {}
        self._new_labels: dict[int, tuple[uuid.UUID, Labels]] = {}
        self._new_names: dict[int, tuple[str, MetricKind | str, str]] = {}
        # Series found stored this load, and series seen first by this load: sorted ids.
        self._known = np.zeros(0, dtype=np.int64)
        self._pairs = np.zeros(0, dtype=np.int64)
        self._loaded: set[int] = set()  # label sets whose stored names were read
        self._locked = False
        # Points `metrics.minutes_store` dropped as unstorable, for the load's counts.
        self.dropped = 0

    # -- resolving -------------------------------------------------------------------

    def _lock(self, cur: psycopg.Cursor[Any]) -> None:
        if not self._locked:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK, self.cluster_id])
            self._locked = True

    def _cursor(self) -> psycopg.Cursor[Any]:
        # psycopg's own cursor: Django's client-side binding rewrites a statement's
        # placeholders with a regex, slow for arrays of thousands.
        connection.ensure_connection()
        return psycopg.Cursor(connection.connection)

    def labels_ids(self, items: Sequence[Labels]) -> list[int]:
        """The ids of the label sets, creating the missing ones."""
        found = self.labels
        missing = [item for item in dict.fromkeys(items)
                   if item not in found and not self._cached_labels(item)]
        # Only new label sets can fail to store: the parsers check them, this is the
        # last line (a payload stored before a parser check existed).
        for item in missing:
            if not _labels_storable(item):
                found[item] = UNSTORABLE
        missing = [item for item in missing if item not in found]
        if missing:
            keys = {labels_key(item): item for item in missing}
            with self._cursor() as cur:
                self._lock(cur)
                cur.execute("SELECT key, id, names FROM cluster_metriclabels "
                            "WHERE cluster_id = %s AND key = ANY(%s)",
                            [self.cluster_id, list(keys)])
                stored: list[int] = []
                for key, labels_id, names in cur.fetchall():
                    found[keys.pop(key)] = labels_id
                    self._loaded.add(labels_id)
                    stored.extend(labels_id << NAME_BITS | n for n in names)
                self._know(stored)
                if keys:
                    cur.execute(_DRAW, ["cluster_metriclabels", len(keys)])
                    for (labels_id,), (key, item) in zip(cur.fetchall(), keys.items(),
                                                         strict=True):
                        found[item] = labels_id
                        self._new_labels[labels_id] = (key, item)
        return [found[item] for item in items]

    def labels_ids_raw(
        self, keys: Sequence[tuple[Labels, bytes]],
        *, labels_of: Callable[[tuple[Labels, bytes]], Labels],
    ) -> list[int]:
        """The ids of label sets given as (resource attributes, a point's attribute
        bytes): looked up by those while met before, else `labels_of` the key resolved by
        `labels_ids`."""
        raw, cached, cluster_id = self.raw, _CACHE.raw, self.cluster_id
        missing = []
        for key in keys:
            if key not in raw:
                labels_id = cached.get((cluster_id, key))
                if labels_id is None:
                    missing.append(key)
                else:
                    raw[key] = labels_id
        if missing:
            missing = list(dict.fromkeys(missing))
            resolved = self.labels_ids([labels_of(key) for key in missing])
            raw.update(zip(missing, resolved, strict=True))
        return [raw[key] for key in keys]

    def _cached_labels(self, item: Labels) -> bool:
        labels_id = _CACHE.labels.get((self.cluster_id, item))
        if labels_id is None:
            return False
        self.labels[item] = labels_id
        return True

    def name_ids(self, items: Sequence[tuple[str, MetricKind | str, str]]) -> list[int]:
        """The ids of the names ((name, kind, unit): a new name keeps the kind and unit
        it is first seen with), creating the missing ones."""
        found = self.names
        for name, _, _ in items:
            if name not in found:
                cached = _CACHE.names.get((self.cluster_id, name))
                if cached is not None:
                    found[name] = cached
        missing = {}
        for name, kind, unit in items:
            if name not in found:
                if storable(name):
                    missing[name] = (name, kind, _clean(unit))
                else:
                    found[name] = UNSTORABLE
        if missing:
            with self._cursor() as cur:
                self._lock(cur)
                cur.execute("SELECT name, id FROM cluster_metricname "
                            "WHERE cluster_id = %s AND name = ANY(%s)",
                            [self.cluster_id, list(missing)])
                for name, name_id in cur.fetchall():
                    found[name] = name_id
                    del missing[name]
                if missing:
                    cur.execute(_DRAW, ["cluster_metricname", len(missing)])
                    for (name_id,), (name, meta) in zip(cur.fetchall(), missing.items(),
                                                        strict=True):
                        found[name] = name_id
                        self._new_names[name_id] = meta
        return [found[name] for name, _, _ in items]

    def _know(self, series: Sequence[int]) -> None:
        if series:
            self._known = sorted_unique(np.r_[self._known, np.array(series, dtype=np.int64)])

    def observe(self, series: np.ndarray[Any, Any]) -> None:
        """Note the series a load stores (`series`: their ids, sorted and unique)."""
        fresh = _CACHE.missing(self.cluster_id, series)
        fresh = fresh[~_among(self._known, fresh) & ~_among(self._pairs, fresh)]
        if not len(fresh):
            return
        unread = (set(sorted_unique(fresh >> NAME_BITS).tolist()) - self._loaded
                  - self._new_labels.keys())
        if unread:
            # Label sets known from the cache but not all their names: read them once.
            with self._cursor() as cur:
                cur.execute("SELECT id, names FROM cluster_metriclabels WHERE id = ANY(%s)",
                            [sorted(unread)])
                self._know([labels_id << NAME_BITS | n
                            for labels_id, names in cur.fetchall() for n in names])
            self._loaded |= unread
            fresh = fresh[~_among(self._known, fresh)]
        self._pairs = sorted_unique(np.r_[self._pairs, fresh])

    # -- writing -----------------------------------------------------------------------

    def finish(self) -> int:
        """Write what this load created; returns the number of new series."""
        pairs = self._pairs
        owners, names_of = pairs >> NAME_BITS, pairs & NAME_MASK
        bounds = np.r_[0, np.flatnonzero(owners[1:] != owners[:-1]) + 1, len(pairs)]
        # label set id -> (first, end) of its new names in `pairs` (sorted by label set).
        runs = dict(zip(owners[bounds[:-1]].tolist(),
                        zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True),
                        strict=True)) if len(pairs) else {}
        if self._new_names or self._new_labels or len(pairs):
            with self._cursor() as cur:
                self._lock(cur)
                head = f"{self.cluster_id}\t{self.now.isoformat()}"
                if self._new_names:
                    with cur.copy(_NAMES_COPY) as copy:
                        copy.write("".join(
                            f"{name_id}\t{head}\t{_escape(name[:255])}\t"
                            f"{_escape(str(kind)[:16])}\t{_escape(unit[:64])}\n"
                            for name_id, (name, kind, unit) in self._new_names.items()))
                if self._new_labels:
                    with cur.copy(_LABELS_COPY) as copy:
                        copy.write(self._labels_rows(head, runs, names_of))
                if runs:
                    # Label sets stored before, with names new to them.
                    keep = ~np.isin(owners, np.fromiter(self._new_labels, dtype=np.int64))
                    if keep.any():
                        cur.execute(_NAMES_ADD, [owners[keep].tolist(),
                                                 names_of[keep].tolist()])
        cluster_id, seen = self.cluster_id, sorted_unique(np.r_[self._known, pairs])
        labels, names, raw = dict(self.labels), dict(self.names), dict(self.raw)
        transaction.on_commit(lambda: _CACHE.keep(
            cluster_id=cluster_id, labels=labels, names=names, series=seen, raw=raw))
        created = len(pairs)
        self._new_labels, self._new_names = {}, {}
        self._pairs, self._known = np.zeros(0, dtype=np.int64), seen
        return created

    def _labels_rows(self, head: str, runs: dict[int, tuple[int, int]],
                     names_of: np.ndarray[Any, Any]) -> str:
        """COPY text of the new label sets, with the names each was seen with. Label
        sets sharing their names (a dcgm GPU's 40) share the array's text."""
        arrays: dict[bytes, str] = {}
        rows = []
        for labels_id, (key, item) in self._new_labels.items():
            start, end = runs.get(labels_id, (0, 0))
            chunk = names_of[start:end]
            raw = chunk.tobytes()
            text = arrays.get(raw)
            if text is None:
                text = arrays[raw] = "{" + ",".join(map(str, chunk.tolist())) + "}"
            labels = orjson.dumps(dict(item)).decode()
            fields = [labels, text, *link_values(item)]
            # JSON writes a backslash for any quote, backslash or control character in a
            # label, so a label set without one in its JSON needs no escaping at all.
            if "\\" in labels:
                fields = [_escape(field) for field in fields]
            rows.append(f"{labels_id}\t{head}\t{key}\t" + "\t".join(fields) + "\n")
        return "".join(rows)


def _clean(text: str) -> str:
    """A unit as storage can hold it (it only describes the name)."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def _among(known: np.ndarray[Any, Any], values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Which of `values` are in `known` (sorted)."""
    if not len(known) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(known, values), len(known) - 1)
    return known[at] == values
