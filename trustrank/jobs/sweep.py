"""The one sweep (beat, every TRUSTRANK_SWEEP_SECONDS): recover every kind of job the same way.

- A running job whose lease lapsed lost its worker: its PostgreSQL backend is ended if it is
  still at work, its kind cleans up after it, and it is queued again (or failed after
  TRUSTRANK_JOB_MAX_ATTEMPTS attempts).
- A queued job whose message is older than TRUSTRANK_JOB_REQUEUE_SECONDS lost it (a broker
  restart): it is sent again. A job's claim is a conditional UPDATE, so a second message
  is harmless.
- Batch slots left free are offered to the queued batch jobs.

One sweep at a time on the whole site (an advisory lock): a second beat started by mistake on
another host, or a sweep that outlasts its period, finds the lock held and skips. Its claims
would make an overlapping sweep harmless, but it would send every message twice.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from trustrank.jobs.claim import backend_end, batch_running
from trustrank.jobs.models import JobClass, JobStatus
from trustrank.jobs.registry import job_kinds
from trustrank.jobs.runner import job_failed_notify
from trustrank.jobs.send import batch_wake, job_send
from trustrank.lib.locks import advisory_lock_try

log = logging.getLogger(__name__)


def jobs_sweep() -> dict[str, int]:
    with advisory_lock_try("jobs:sweep") as mine:
        if not mine:
            return {"requeued": 0, "resent": 0, "gave_up": 0, "backends_ended": 0, "skipped": 1}
        return _sweep()


def _sweep() -> dict[str, int]:
    now = timezone.now()
    max_attempts = settings.TRUSTRANK_JOB_MAX_ATTEMPTS
    totals = {"requeued": 0, "resent": 0, "gave_up": 0, "backends_ended": 0, "skipped": 0}
    batch_waiting = 0
    for kind in job_kinds():
        model = kind.model
        dead = list(
            model.objects.filter(status=JobStatus.RUNNING, lease_until__lt=now)[:1000]
        )
        for job in dead:
            if backend_end(pid=job.backend_pid, started=job.backend_start):
                totals["backends_ended"] += 1
            # Taken back only while the lease is still lapsed (a late heartbeat of a live
            # worker wins), and only then cleaned up after.
            mine = model.objects.filter(
                pk=job.pk, status=JobStatus.RUNNING, attempts=job.attempts, lease_until__lt=now
            )
            if job.attempts >= max_attempts:
                gave_up = mine.update(
                    status=JobStatus.FAILED,
                    error=f"gave up after {job.attempts} attempts: the worker stopped each time",
                    finished_at=now, lease_until=None, phase="failed", backend_pid=None,
                )
                totals["gave_up"] += gave_up
                if gave_up:
                    _cleanup(kind, job)
                    job_failed_notify(kind, job, message="the worker stopped each time")
                continue
            if mine.update(
                status=JobStatus.QUEUED, enqueued_at=now, lease_until=None,
                phase="queued again: its worker stopped", backend_pid=None,
            ):
                totals["requeued"] += 1
                _cleanup(kind, job)
                _resend(kind.name, job.pk, job.job_class, job.priority)
        stale = now - timedelta(seconds=settings.TRUSTRANK_JOB_REQUEUE_SECONDS)
        lost = model.objects.filter(
            Q(enqueued_at__lt=stale) | Q(enqueued_at__isnull=True, created_at__lt=stale),
            status=JobStatus.QUEUED,
        )
        if kind.ready_field:
            lost = lost.filter(**{f"{kind.ready_field}__lte": now})
        for job_id, job_class, priority in lost.values_list("pk", "job_class", "priority")[:1000]:
            model.objects.filter(pk=job_id).update(enqueued_at=now)
            if job_class != JobClass.BATCH:
                _resend(kind.name, job_id, job_class, priority)
            totals["resent"] += 1
        if kind.batch_capable:
            batch_waiting += model.objects.filter(
                status=JobStatus.QUEUED, job_class=JobClass.BATCH
            ).count()
    free = max(0, settings.TRUSTRANK_JOBS_BATCH_SLOTS - batch_running())
    if batch_waiting and free:
        batch_wake(min(free, batch_waiting))
    return totals


def _cleanup(kind: Any, job: Any) -> None:
    try:
        kind.call(kind.cleanup, job=job)
    except Exception:
        log.exception("job %s %s: cleanup failed", kind.name, job.pk)


def _resend(kind: str, job_id: Any, job_class: str, priority: int) -> None:
    if job_class == JobClass.BATCH:
        return  # batch jobs are started by wake-ups, sent below
    job_send(kind=kind, job_id=job_id, job_class=job_class, priority=priority)
