"""Creating, claiming, running and sweeping ingest jobs."""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import F, Q
from django.db.models.sql import InsertQuery
from django.utils import timezone
from django.utils.module_loading import import_string

from ingest.errors import IngestRejected, IngestTransient
from ingest.handlers import HANDLERS
from ingest.models import IngestJob, IngestPayload, JobKind, JobStatus
from trustrank.accounts.models import Team
from trustrank.accounts.principal import Principal

log = logging.getLogger(__name__)

ProgressFn = Callable[..., None]


class InvalidPriority(ValueError):
    pass


def priority_parse(raw: str | None) -> int:
    """`X-Priority: n`; lower is more urgent; absent means the fallback (10)."""
    if raw is None or raw.strip() == "":
        return settings.TRUSTRANK_DEFAULT_PRIORITY
    try:
        value = int(raw.strip())
    except ValueError as exc:
        raise InvalidPriority(f"X-Priority must be an integer from 0 to 255, got {raw!r}") from exc
    if not 0 <= value <= 255:
        raise InvalidPriority(f"X-Priority must be an integer from 0 to 255, got {value}")
    return value


def queue_for_priority(priority: int) -> str:
    if priority < settings.TRUSTRANK_DEFAULT_PRIORITY:
        return settings.INGEST_HIGH_QUEUE
    return settings.INGEST_QUEUE


def job_enqueue_on_commit(job: IngestJob) -> None:
    """Enqueue after the job row and payload are committed, never before."""
    from ingest.tasks import ingest_job_run

    job_id, queue = str(job.id), queue_for_priority(job.priority)
    transaction.on_commit(lambda: ingest_job_run.apply_async(args=[job_id], queue=queue))


def job_create(
    *,
    team: Team,
    kind: str,
    payload: bytes,
    principal: Principal,
    params: dict[str, Any] | None = None,
    priority: int | None = None,
    content_type: str = "",
    filename: str = "",
    prepared: bytes | None = None,
) -> IngestJob:
    """Store the payload durably and enqueue it once committed. The caller has already
    checked that `principal` may write this kind of data for `team`. `prepared`: what the
    receiver derived from the payload for the worker (see `IngestPayload.prepared`)."""
    if kind not in HANDLERS:
        raise ValueError(f"no handler for job kind {kind!r}")
    user = (
        principal.user if principal.user is not None and principal.user.is_authenticated else None
    )
    job = IngestJob(
        team=team,
        kind=kind,
        params=params or {},
        digest=hashlib.sha256(payload).hexdigest(),
        size_bytes=len(payload),
        content_type=content_type[:120],
        filename=filename[:255],
        priority=settings.TRUSTRANK_DEFAULT_PRIORITY if priority is None else priority,
        submitted_by=user,
        api_key=principal.api_key,
        submitter_label=principal.label[:160],
        enqueued_at=timezone.now(),
    )
    _job_and_payload_insert(job=job, data=payload, prepared=prepared)
    job_enqueue_on_commit(job)
    return job


def _job_and_payload_insert(*, job: IngestJob, data: bytes, prepared: bytes | None) -> None:
    """Insert the job row and its payload in one statement: outside a transaction it commits
    both or neither by itself, in one round trip to PostgreSQL where BEGIN, two INSERTs and
    COMMIT took four (a receiver's answer waits on each; under load each is a wake-up of
    the server process that may wait for a core). The row's SQL is Django's own INSERT of
    the model (defaults, auto_now_add). The payload goes as a binary parameter: Django's
    client-side binding would inline it hex-encoded into the SQL text, 5x slower for a
    660 KB OTLP export."""
    import psycopg

    fields = IngestJob._meta.local_concrete_fields
    query = InsertQuery(IngestJob)
    query.insert_values(fields, [job])
    [(job_sql, job_params)] = query.get_compiler(connection=connection).as_sql()
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            f"WITH job AS ({job_sql}) "  # noqa: S608 - Django's SQL, every value a parameter
            "INSERT INTO ingest_ingestpayload (job_id, data, prepared) VALUES (%s, %b, %b)",
            [*job_params, job.pk, data, prepared],
        )
    job._state.adding = False
    job._state.db = connection.alias


def job_claim(*, job_id: str) -> IngestJob | None:
    """Take the job for this worker, or None when it is finished or another live worker has
    it. The conditional UPDATE is the lock: two deliveries of one message cannot both win."""
    now = timezone.now()
    lease = now + timedelta(seconds=settings.TRUSTRANK_JOB_LEASE_SECONDS)
    claimed = IngestJob.objects.filter(
        Q(status=JobStatus.QUEUED) | Q(status=JobStatus.RUNNING, lease_until__lt=now),
        pk=job_id,
    ).update(
        status=JobStatus.RUNNING,
        attempts=F("attempts") + 1,
        started_at=now,
        lease_until=lease,
        phase="starting",
        error="",
    )
    if not claimed:
        return None
    return IngestJob.objects.get(pk=job_id)


def job_progress(
    *, job_id: Any, done: int | None = None, total: int | None = None, phase: str | None = None
) -> None:
    """Record progress and renew the lease. Visible at once only outside a transaction."""
    fields: dict[str, Any] = {
        "lease_until": timezone.now() + timedelta(seconds=settings.TRUSTRANK_JOB_LEASE_SECONDS)
    }
    if done is not None:
        fields["progress_done"] = done
    if total is not None:
        fields["progress_total"] = total
    if phase is not None:
        fields["phase"] = phase[:40]
    IngestJob.objects.filter(pk=job_id, status=JobStatus.RUNNING).update(**fields)


def _job_finish(
    *, job_id: Any, counts: dict[str, Any], progress: dict[str, Any] | None = None
) -> None:
    result = counts.pop("_result", None)
    # The last progress the handler reported, which a heartbeat may not have written yet.
    final = {
        f"progress_{name}": (progress or {}).get(name)
        for name in ("done", "total")
        if (progress or {}).get(name) is not None
    }
    IngestJob.objects.filter(pk=job_id).update(
        **final,
        status=JobStatus.DONE,
        counts=counts,
        result=result or {},
        finished_at=timezone.now(),
        lease_until=None,
        phase="done",
        error="",
    )


def job_fail(*, job_id: Any, message: str) -> None:
    IngestJob.objects.filter(pk=job_id).update(
        status=JobStatus.FAILED,
        error=message[:10000],
        finished_at=timezone.now(),
        lease_until=None,
        phase="failed",
    )


def _payload_load(*, job_id: Any) -> bytes:
    """The job's raw payload. Read with binary results: over the text protocol bytea arrives
    hex-encoded, and a large upload then costs the worker ~5x its size in memory."""
    import psycopg

    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            "SELECT data FROM ingest_ingestpayload WHERE job_id = %s", [job_id], binary=True
        )
        row = cursor.fetchone()
    if row is None:
        raise IngestPayload.DoesNotExist(f"job {job_id} has no payload")
    return bytes(row[0])


# SBOM loads rank again after their matching task (trustrank.vulns.tasks), not here.
_RERANK_AFTER_TEAM_LOAD = {JobKind.TRACES, JobKind.CERTIFICATES, JobKind.TRUST_BUNDLE}
_RERANK_AFTER_FEED = {JobKind.OSV, JobKind.KEV, JobKind.EPSS}


def _rerank_after(job: IngestJob) -> None:
    """New evidence: a debounced ranking run for the teams it concerns."""
    from trustrank.ranking.services.requests import ranking_after_feed, ranking_after_load

    if job.kind in _RERANK_AFTER_TEAM_LOAD:
        ranking_after_load(team_id=job.team_id, what=f"{job.kind} job {job.pk}")
    elif job.kind in _RERANK_AFTER_FEED:
        ranking_after_feed(what=f"{job.kind} feed job {job.pk}")


class JobHeartbeat:
    """Renews a running job's lease, and publishes its phase and progress, from a thread with
    a database connection of its own while the handler works.

    The handler's own writes cannot do it: an atomic handler's UPDATEs stay invisible until
    it commits, so a long job looked dead to the sweep (which re-queued it and a second
    worker ran it at the same time) and its progress stayed at "starting" until done.
    """

    def __init__(self, *, job_id: Any, attempt: int) -> None:
        self.job_id, self.attempt = job_id, attempt
        lease = settings.TRUSTRANK_JOB_LEASE_SECONDS
        # Several renewals per lease, so one slow UPDATE never lets the lease lapse.
        self.interval = max(0.1, min(settings.TRUSTRANK_JOB_HEARTBEAT_SECONDS, lease / 4))
        self._pending: dict[str, Any] = {}
        self.latest: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"job-heartbeat-{job_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def report(self, **progress: Any) -> None:
        """The handler's progress callback: recorded here, written by the next beat."""
        with self._lock:
            self._pending.update(progress)
            self.latest.update(progress)

    def stop(self) -> None:
        self._stop.set()
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
        fields: dict[str, Any] = {
            "lease_until": timezone.now()
            + timedelta(seconds=settings.TRUSTRANK_JOB_LEASE_SECONDS)
        }
        for name in ("done", "total"):
            if progress.get(name) is not None:
                fields[f"progress_{name}"] = progress[name]
        if progress.get("phase") is not None:
            fields["phase"] = str(progress["phase"])[:40]
        try:
            # Only while this attempt still holds the job: never revive a job another worker
            # has taken over or that has ended.
            IngestJob.objects.filter(
                pk=self.job_id, status=JobStatus.RUNNING, attempts=self.attempt
            ).update(**fields)
        except Exception:  # a lost connection: retried at the next beat
            log.warning("heartbeat of job %s failed", self.job_id, exc_info=True)
            connection.close()


def job_run(*, job_id: str) -> None:
    """Claim and run one job. Transient errors put it back in the queue and propagate (the
    task retries with back-off); bad input fails the job with the handler's message."""
    job = job_claim(job_id=job_id)
    if job is None:
        log.info("job %s is finished or held by a live worker; nothing to do", job_id)
        return
    handler = HANDLERS[job.kind]
    func = import_string(handler.path)
    payload = _payload_load(job_id=job.pk)

    heartbeat = JobHeartbeat(job_id=job.pk, attempt=job.attempts)
    heartbeat.start()
    try:
        try:
            if handler.atomic:
                with transaction.atomic():
                    counts = func(job=job, payload=payload, progress=heartbeat.report)
                    heartbeat.stop()
                    _job_finish(job_id=job.pk, counts=dict(counts), progress=heartbeat.latest)
            else:
                counts = func(job=job, payload=payload, progress=heartbeat.report)
                heartbeat.stop()
                _job_finish(job_id=job.pk, counts=dict(counts), progress=heartbeat.latest)
        finally:
            heartbeat.stop()
        _rerank_after(job)
    except IngestRejected as exc:
        job_fail(job_id=job.pk, message=str(exc))
    except (IngestTransient, OperationalError):
        if job.attempts >= settings.TRUSTRANK_JOB_MAX_ATTEMPTS:
            job_fail(job_id=job.pk, message=f"gave up after {job.attempts} attempts")
        else:
            IngestJob.objects.filter(pk=job.pk).update(
                status=JobStatus.QUEUED, enqueued_at=timezone.now(), lease_until=None
            )
        raise
    except Exception as exc:
        log.exception("job %s crashed", job.pk)
        job_fail(
            job_id=job.pk,
            message=f"Internal error while processing the job ({type(exc).__name__}). "
            "The payload is kept; an operator can re-run the job.",
        )


def jobs_sweep() -> dict[str, int]:
    """Re-enqueue jobs a worker died on (lease expired) or a broker lost (queued too long).

    The job row, not the broker, is the source of truth; a job is claimed by conditional
    UPDATE, so enqueuing one twice is harmless.
    """
    from ingest.tasks import ingest_job_run

    now = timezone.now()
    max_attempts = settings.TRUSTRANK_JOB_MAX_ATTEMPTS
    gave_up = IngestJob.objects.filter(
        status=JobStatus.RUNNING, lease_until__lt=now, attempts__gte=max_attempts
    ).update(
        status=JobStatus.FAILED,
        error=f"gave up after {max_attempts} attempts: the worker stopped each time",
        finished_at=now,
        lease_until=None,
        phase="failed",
    )
    stale = now - timedelta(seconds=settings.TRUSTRANK_JOB_REQUEUE_SECONDS)
    ids = list(
        IngestJob.objects.filter(
            Q(status=JobStatus.RUNNING, lease_until__lt=now)
            | Q(status=JobStatus.QUEUED, enqueued_at__lt=stale)
        ).values_list("pk", "priority")[:1000]
    )
    for job_id, priority in ids:
        IngestJob.objects.filter(pk=job_id).update(enqueued_at=now)
        ingest_job_run.apply_async(args=[str(job_id)], queue=queue_for_priority(priority))
    return {"requeued": len(ids), "gave_up": gave_up}


def ingest_queue_depth() -> int:
    return IngestJob.objects.filter(status=JobStatus.QUEUED).count()


def retry_after_seconds(*, queue_depth: int) -> int:
    """Design formula 6: delay = base · (1 + 0.02 q)², rounded up to whole seconds."""
    delay = settings.TRUSTRANK_BACKOFF_BASE_SECONDS * (1 + 0.02 * queue_depth) ** 2
    return max(1, math.ceil(delay))


# Every receiver asks on every upload; the queue depth is a COUNT, so each process re-reads it
# at most once per TRUSTRANK_INGEST_OVERLOAD_CACHE_SECONDS instead of once per request (an
# OpenTelemetry exporter may send twenty a second).
_overload_cache: dict[str, Any] = {"at": -math.inf, "value": None}


def ingest_overloaded() -> int | None:
    """Retry-After seconds when the queue is past its soft limit, else None."""
    now = time.monotonic()
    if now - _overload_cache["at"] < settings.TRUSTRANK_INGEST_OVERLOAD_CACHE_SECONDS:
        return _overload_cache["value"]
    depth = ingest_queue_depth()
    value = None
    if depth >= settings.TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT:
        value = retry_after_seconds(queue_depth=depth)
    _overload_cache.update(at=now, value=value)
    return value


def ingest_overload_cache_clear() -> None:
    _overload_cache.update(at=-math.inf, value=None)
