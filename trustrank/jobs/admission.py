"""Back-pressure: how deep the queues are, and whether a team may queue one more job."""

from __future__ import annotations

import math
import time
from typing import Any

from django.conf import settings

from trustrank.jobs.errors import JobsBusy
from trustrank.jobs.models import JobStatus
from trustrank.jobs.registry import job_kind, job_kinds


def retry_after_seconds(*, queue_depth: int) -> int:
    """Design formula 6: delay = base · (1 + 0.02 q)², rounded up to whole seconds."""
    delay = settings.TRUSTRANK_BACKOFF_BASE_SECONDS * (1 + 0.02 * queue_depth) ** 2
    return max(1, math.ceil(delay))


def jobs_queued_count() -> int:
    """Queued jobs of every kind (replay runs and exports count as much as uploads)."""
    return sum(
        kind.model.objects.filter(status=JobStatus.QUEUED).count() for kind in job_kinds()
    )


# Every receiver asks on every upload; the depth is a COUNT, so each process re-reads it at
# most once per TRUSTRANK_INGEST_OVERLOAD_CACHE_SECONDS instead of once per request (an
# OpenTelemetry exporter may send twenty a second).
_overload_cache: dict[str, Any] = {"at": -math.inf, "value": None}


def jobs_overloaded() -> int | None:
    """Retry-After seconds when the queues are past their soft limit, else None."""
    now = time.monotonic()
    if now - _overload_cache["at"] < settings.TRUSTRANK_INGEST_OVERLOAD_CACHE_SECONDS:
        return _overload_cache["value"]
    depth = jobs_queued_count()
    value = None
    if depth >= settings.TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT:
        value = retry_after_seconds(queue_depth=depth)
    _overload_cache.update(at=now, value=value)
    return value


def jobs_overload_cache_clear() -> None:
    _overload_cache.update(at=-math.inf, value=None)


def job_admit(*, kind: str, team_id: int) -> None:
    """Raise JobsBusy when the team already has its limit of queued jobs of this kind
    (TRUSTRANK_JOBS_QUEUED_MAX_PER_TEAM) or the queues are past their soft limit."""
    spec = job_kind(kind)
    limit = settings.TRUSTRANK_JOBS_QUEUED_MAX_PER_TEAM.get(kind, spec.queued_max_per_team)
    if limit is not None:
        queued = spec.model.objects.filter(team_id=team_id, status=JobStatus.QUEUED).count()
        if queued >= limit:
            raise JobsBusy(
                f"this team already has {queued} queued {kind.replace('_', ' ')} jobs "
                f"(at most {limit}); try again when some have run",
                retry_after=retry_after_seconds(queue_depth=queued),
            )
    retry = jobs_overloaded()
    if retry is not None:
        raise JobsBusy("the job queue is full; try again later", retry_after=retry)
