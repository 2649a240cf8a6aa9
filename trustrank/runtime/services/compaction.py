"""Folding the partial rows of finished call edge and library buckets into one row each.

Trace loads append one row per (caller, callee, bucket) and per (service, bucket, library)
instead of updating a shared one (see models.CallEdgeBucket); readers add a bucket's rows
up, so folding them changes no answer, only how many rows there are to add. Each fold is
one statement: the rows it deletes (DELETE … RETURNING) are exactly the rows whose sums it
inserts, so a load appending to the same bucket meanwhile, or a second compaction, can
neither be lost nor counted twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

# Buckets this old no longer receive rows from loads keeping up; younger ones are left be.
COMPACT_AFTER = timedelta(minutes=5)
# How far back each periodic compaction looks: rows arriving later for older buckets (a
# replayed backlog) stay partial, which readers handle anyway.
COMPACT_SPAN = timedelta(hours=6)

_EDGES_FOLD = """
WITH folded AS (
    DELETE FROM runtime_calledgebucket b
     USING (SELECT caller_id, callee_id, bucket_start
              FROM runtime_calledgebucket
             WHERE bucket_start >= %(since)s AND bucket_start < %(before)s
             GROUP BY caller_id, callee_id, bucket_start
            HAVING count(*) > 1) d
     WHERE b.caller_id = d.caller_id AND b.callee_id = d.callee_id
       AND b.bucket_start = d.bucket_start
    RETURNING b.environment_id, b.caller_id, b.callee_id, b.bucket_start, b.calls, b.errors,
              b.tls_calls, b.mtls_calls, b.hist, b.last_seen
), hist AS (
    SELECT f.caller_id, f.callee_id, f.bucket_start,
           array_agg(h.total ORDER BY h.i) AS hist
      FROM (SELECT caller_id, callee_id, bucket_start, i, sum(v)::bigint AS total
              FROM folded, unnest(folded.hist) WITH ORDINALITY AS u(v, i)
             GROUP BY caller_id, callee_id, bucket_start, i) h
      JOIN (SELECT DISTINCT caller_id, callee_id, bucket_start FROM folded) f
        ON f.caller_id = h.caller_id AND f.callee_id = h.callee_id
       AND f.bucket_start = h.bucket_start
     GROUP BY f.caller_id, f.callee_id, f.bucket_start
)
INSERT INTO runtime_calledgebucket (environment_id, caller_id, callee_id, bucket_start, calls,
                                    errors, tls_calls, mtls_calls, hist, last_seen)
SELECT min(f.environment_id), f.caller_id, f.callee_id, f.bucket_start, sum(f.calls),
       sum(f.errors), sum(f.tls_calls), sum(f.mtls_calls),
       COALESCE(min(h.hist), '{}'), max(f.last_seen)
  FROM folded f
  LEFT JOIN hist h ON h.caller_id = f.caller_id AND h.callee_id = f.callee_id
                  AND h.bucket_start = f.bucket_start
 GROUP BY f.caller_id, f.callee_id, f.bucket_start
"""

_LIBRARIES_FOLD = """
WITH folded AS (
    DELETE FROM runtime_librarybucket b
     USING (SELECT service_id, bucket_start, kind, name, version
              FROM runtime_librarybucket
             WHERE bucket_start >= %(since)s AND bucket_start < %(before)s
             GROUP BY service_id, bucket_start, kind, name, version
            HAVING count(*) > 1) d
     WHERE b.service_id = d.service_id AND b.bucket_start = d.bucket_start
       AND b.kind = d.kind AND b.name = d.name AND b.version = d.version
    RETURNING b.service_id, b.bucket_start, b.kind, b.name, b.version, b.spans
)
INSERT INTO runtime_librarybucket (service_id, bucket_start, kind, name, version, spans)
SELECT service_id, bucket_start, kind, name, version, sum(spans)
  FROM folded
 GROUP BY service_id, bucket_start, kind, name, version
"""


def call_graph_compact(
    *, before: datetime | None = None, since: datetime | None = None
) -> dict[str, int]:
    """Fold the partial rows of buckets starting in [since, before) (by default: finished
    more than COMPACT_AFTER ago, within COMPACT_SPAN); returns the rows written."""
    now = timezone.now()
    before = before or now - COMPACT_AFTER
    since = since or before - COMPACT_SPAN
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_EDGES_FOLD, {"since": since, "before": before})
        edges = cursor.rowcount
        cursor.execute(_LIBRARIES_FOLD, {"since": since, "before": before})
        libraries = cursor.rowcount
    return {"edge_buckets_folded": max(edges, 0), "library_buckets_folded": max(libraries, 0)}
