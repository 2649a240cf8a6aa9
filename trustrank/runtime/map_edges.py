"""The service map's busiest calls, kept until a call edge row is written.

At 500,000 call edges the map's aggregate (every edge's sums over the window, then the
busiest `GRAPH_MAX_EDGES`) is half a second of PostgreSQL for every view of the page,
though it changes only when traces arrive. It is kept in the shared cache under the
environment, the window's start rounded up to a bucket's start (buckets start on multiples
of the bucket length, so the rows a window reads are the same through the bucket) and the
latest `written_at` of the environment's rows (an index's last entry), and one web worker
at a time computes it (`single_flight`).

A row committed after a later one was written (a load's transaction held open) does not
move the latest `written_at`: `TRUSTRANK_SERVICE_MAP_KEEP_SECONDS` bounds how long a kept
map can miss it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Max

from trustrank.lib.single_flight import cache_get_or_compute_once
from trustrank.runtime.models import CallEdgeBucket, Environment


def window_start(since: datetime | None) -> datetime | None:
    """`since` rounded up to the next bucket start (itself when it is one)."""
    if since is None:
        return None
    size = settings.TRUSTRANK_TRACE_BUCKET_SECONDS
    stamp = since.timestamp()
    ahead = -stamp % size
    return since if ahead == 0 else datetime.fromtimestamp(stamp + ahead, tz=since.tzinfo)


def busiest_edges(*, environment: Environment, since: datetime | None, limit: int,
                  compute: Callable[[datetime | None], list[dict[str, Any]]],
                  ) -> list[dict[str, Any]]:
    """The `limit` busiest calls of the environment since `since`: `compute(start)` (the
    window from `window_start(since)`), kept as the module says."""
    start = window_start(since)
    latest = CallEdgeBucket.objects.filter(environment=environment).aggregate(
        at=Max("written_at"))["at"]
    key = (f"service-map-edges:{environment.pk}:{limit}:"
           f"{start.timestamp() if start else 'all'}:{latest.timestamp() if latest else '-'}")
    return cache_get_or_compute_once(  # type: ignore[no-any-return]
        key, lambda: compute(start), timeout=settings.TRUSTRANK_SERVICE_MAP_KEEP_SECONDS,
        wait=settings.TRUSTRANK_SERVICE_MAP_KEEP_SECONDS,
    )
