"""The one runner: run a claimed job's handler with a heartbeat, finish or fail it, and
recover from anything a worker can die of. Claiming is `jobs.claim`, sending `jobs.send`.

- A job's database session has a statement timeout, a lock timeout and (PostgreSQL 14+) a
  check that its client is still there, so a dead worker's statement ends by itself.
- A transient error puts the job back with back-off; a crash or a rejection fails it; only
  the attempt that holds the row may finish, fail or re-queue it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from trustrank.jobs.claim import batch_claim, job_claim, lease_until
from trustrank.jobs.errors import JobRejected, JobTransient
from trustrank.jobs.models import JobClass, JobStatus
from trustrank.jobs.registry import JobKind, job_kind
from trustrank.jobs.send import batch_wake, job_send

log = logging.getLogger(__name__)

# --- The job's database session ---------------------------------------------------------------


def _server_version() -> int:
    connection.ensure_connection()
    return int(connection.pg_version)  # type: ignore[attr-defined]


@contextlib.contextmanager
def job_session() -> Iterator[None]:
    """Timeouts for the job's statements, reset afterwards (the connection is reused). One
    round trip each way: a 5,000-span trace job is ~40 ms, of which six statements were a
    millisecond."""
    timeouts = [str(int(settings.TRUSTRANK_JOB_STATEMENT_TIMEOUT_SECONDS * 1000)),
                str(int(settings.TRUSTRANK_JOB_LOCK_TIMEOUT_SECONDS * 1000))]
    names = ["statement_timeout", "lock_timeout"]
    if _server_version() >= 140000:
        # A killed worker's backend notices its client is gone within this interval and
        # ends the statement (and its locks) instead of running it to the end.
        names.append("client_connection_check_interval")
        timeouts.append("2000")
    with connection.cursor() as cur:
        # set_config(…, false) holds for the session, as SET does.
        cur.execute("SELECT " + ", ".join(["set_config(%s, %s, false)"] * len(names)),
                    [value for pair in zip(names, timeouts, strict=True) for value in pair])
    try:
        yield
    finally:
        with contextlib.suppress(Exception), connection.cursor() as cur:
            cur.execute("; ".join(f"RESET {name}" for name in names))


# --- Heartbeat --------------------------------------------------------------------------------


class Heartbeat:
    """Renews a running job's lease and publishes its phase and progress from a thread with a
    database connection of its own. The handler's own writes cannot: an atomic handler's
    UPDATEs stay invisible until it commits, so a long job would look dead to the sweep."""

    def __init__(self, *, kind: JobKind, job_id: Any, attempt: int) -> None:
        self.model, self.job_id, self.attempt = kind.model, job_id, attempt
        lease = settings.TRUSTRANK_JOB_LEASE_SECONDS
        self.interval = max(0.1, min(settings.TRUSTRANK_JOB_HEARTBEAT_SECONDS, lease / 4))
        self._pending: dict[str, Any] = {}
        self.latest: dict[str, Any] = {}
        self.lost = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"job-heartbeat-{job_id}", daemon=True
        )
        self._slow = settings.TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS

    def start(self) -> None:
        self._thread.start()

    def report(self, **progress: Any) -> None:
        """The handler's progress callback (`done`, `total`, `phase`); written by the next
        beat."""
        with self._lock:
            self._pending.update(progress)
            self.latest.update(progress)
        if self._slow:
            # Tests only: gives a test the time to kill the worker in the middle of a job.
            time.sleep(self._slow)

    __call__ = report

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self._beat()
        finally:
            connection.close()  # this thread's own connection

    def _beat(self) -> None:
        with self._lock:
            progress, self._pending = self._pending, {}
        fields: dict[str, Any] = {"lease_until": lease_until(), "heartbeat_at": timezone.now()}
        fields.update(_progress_fields(progress))
        try:
            # Only while this attempt still holds the job: never revive a job another worker
            # has taken over or that has ended.
            updated = self.model.objects.filter(
                pk=self.job_id, status=JobStatus.RUNNING, attempts=self.attempt
            ).update(**fields)
            if not updated:
                self.lost = True
        except Exception:  # a lost connection: retried at the next beat
            log.warning("heartbeat of job %s failed", self.job_id, exc_info=True)
            connection.close()


def _progress_fields(progress: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in ("done", "total"):
        if progress.get(name) is not None:
            fields[f"progress_{name}"] = int(progress[name])
    if progress.get("phase") is not None:
        fields["phase"] = str(progress["phase"])[:60]
    return fields


# --- Finish -----------------------------------------------------------------------------------


def _mine(kind: JobKind, job: Any) -> Any:
    return kind.model.objects.filter(pk=job.pk, status=JobStatus.RUNNING, attempts=job.attempts)


def job_finish(
    kind: JobKind, job: Any, *, fields: dict[str, Any], progress: dict[str, Any]
) -> bool:
    """Mark the job done with the handler's fields, if this attempt still holds it."""
    done = {**_progress_fields(progress), **fields}
    if "progress_total" not in done and job.progress_total is None and "done" in progress:
        done["progress_total"] = int(progress["done"])
    done.update(
        status=JobStatus.DONE, finished_at=timezone.now(), lease_until=None, phase="done",
        error="", backend_pid=None,
    )
    return bool(_mine(kind, job).update(**done))


def job_fail(kind: JobKind, job: Any, *, message: str) -> bool:
    """Mark the job failed and clean up after it, if this attempt still holds it: an attempt
    taken over after its lease lapsed (a worker frozen, not dead) must not fail the job a
    newer attempt is running, nor remove that attempt's files."""
    failed = _mine(kind, job).update(
        status=JobStatus.FAILED,
        error=message[:10000],
        finished_at=timezone.now(),
        lease_until=None,
        phase="failed",
        backend_pid=None,
    )
    if not failed:
        log.warning("job %s %s was taken over; this attempt's failure is not kept: %s",
                    kind.name, job.pk, message[:200])
        return False
    try:
        kind.call(kind.cleanup, job=job)
    except Exception:
        log.exception("job %s %s: cleanup failed", kind.name, job.pk)
    job_failed_notify(kind, job, message=message)
    return True


def job_failed_notify(kind: JobKind, job: Any, *, message: str) -> None:
    """`job.failed` for the job's team (webhooks); never fails the caller."""
    from trustrank.notify.events import notify_job_failed

    notify_job_failed(kind=kind.name, job=job, message=message)


def _requeue(kind: JobKind, job: Any, *, message: str) -> float | None:
    """Back to the queue for another attempt, if this attempt still holds the job; returns
    the back-off before it (None: taken over, nothing to send)."""
    backoff = min(300.0, 2.0 ** min(job.attempts, 8))
    requeued = _mine(kind, job).update(
        status=JobStatus.QUEUED, enqueued_at=timezone.now(), lease_until=None,
        phase="waiting to retry", error=message[:2000], backend_pid=None,
    )
    return backoff if requeued else None


# --- Run --------------------------------------------------------------------------------------


def job_run(*, kind_name: str, job_id: str) -> str:
    """Run one job (or, for a batch wake-up, the fairest batch job). Returns what happened."""
    if not kind_name:
        claimed = batch_claim()
        if claimed is None:
            return "no batch job to run or no free slot"
        kind, job = claimed
    else:
        kind = job_kind(kind_name)
        # Claimed first: the common case is one statement. Why a claim failed is read after.
        job = job_claim(kind, job_id, direct=True)
        if job is None:
            row = kind.model.objects.filter(pk=job_id).values(
                "status", "job_class", "priority",
                *([kind.ready_field] if kind.ready_field else []),
            ).first()
            if row is None:
                return "missing"
            if row["status"] in (JobStatus.DONE, JobStatus.FAILED):
                return "finished before"
            batch = row["job_class"] == JobClass.BATCH
            if kind.ready_field and row["status"] == JobStatus.QUEUED:
                # Not ready when claimed (by the database's clock): asked again when it is.
                wait = (row[kind.ready_field] - timezone.now()).total_seconds()
                if wait > 0 or not batch:
                    job_send(kind=kind.name, job_id=job_id, job_class=row["job_class"],
                             priority=row["priority"], countdown=max(wait, 0.0) + 0.5)
                    return "waiting"
            if batch:
                return job_run(kind_name="", job_id="")
            return "finished or held by a live worker"
    outcome = _execute(kind, job)
    if job.job_class == JobClass.BATCH:
        batch_wake()
    return outcome


def _finished_by_handler(kind: JobKind, job: Any) -> bool:
    """A handler may mark its own row done in the transaction of its last write (a ranking
    run: its queue and its status commit together)."""
    return kind.model.objects.filter(
        pk=job.pk, status=JobStatus.DONE, attempts=job.attempts
    ).exists()


def _atomic(kind: JobKind, job: Any) -> bool:
    if isinstance(kind.atomic, str):
        return bool(import_string(kind.atomic)(job))
    return kind.atomic


def _execute(kind: JobKind, job: Any) -> str:
    if job.attempts > 1:
        kind.call(kind.cleanup, job=job)
    func = import_string(kind.handler)
    heartbeat = Heartbeat(kind=kind, job_id=job.pk, attempt=job.attempts)
    heartbeat.start()
    try:
        with job_session():
            if _atomic(kind, job):
                with transaction.atomic():
                    fields = func(job=job, progress=heartbeat) or {}
                    heartbeat.stop()
                    finished = job_finish(kind, job, fields=fields, progress=heartbeat.latest)
            else:
                fields = func(job=job, progress=heartbeat) or {}
                heartbeat.stop()
                finished = job_finish(kind, job, fields=fields, progress=heartbeat.latest)
    except JobRejected as exc:
        heartbeat.stop()
        return JobStatus.FAILED if job_fail(kind, job, message=str(exc)) else "taken over"
    except (JobTransient, OperationalError) as exc:
        heartbeat.stop()
        message = f"{type(exc).__name__}: {exc}"
        if job.attempts >= settings.TRUSTRANK_JOB_MAX_ATTEMPTS:
            gave_up = job_fail(
                kind, job, message=f"gave up after {job.attempts} attempts ({message})"
            )
            return JobStatus.FAILED if gave_up else "taken over"
        try:
            connection.close()  # a broken connection must not be reused
            backoff = _requeue(kind, job, message=message)
            if backoff is None:
                return "taken over"
            job_send(kind=kind.name, job_id=job.pk, job_class=job.job_class,
                     priority=job.priority, countdown=backoff)
        except Exception:  # the database is away: the sweep re-queues it after the lease
            log.warning("job %s %s: could not re-queue; the sweep will", kind.name, job.pk,
                        exc_info=True)
        return "retrying"
    except Exception as exc:
        heartbeat.stop()
        log.exception("job %s %s crashed", kind.name, job.pk)
        if kind.hide_internal_errors:
            message = (
                f"Internal error while processing the job ({type(exc).__name__}). "
                "The input is kept; an operator can re-run the job."
            )
        else:
            message = f"{type(exc).__name__}: {exc}"
        return JobStatus.FAILED if job_fail(kind, job, message=message) else "taken over"
    finally:
        heartbeat.stop()
    if not finished and not _finished_by_handler(kind, job):
        log.warning("job %s %s was taken over while it ran; its result is not kept",
                    kind.name, job.pk)
        return "taken over"
    try:
        kind.call(kind.on_done, job=job)
    except Exception:  # what follows a job (a debounced re-rank) never undoes it
        log.exception("job %s %s: its follow-up failed", kind.name, job.pk)
    return JobStatus.DONE
