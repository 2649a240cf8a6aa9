"""Creating ingest jobs and running them through the job system (trustrank.jobs)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models.sql import InsertQuery
from django.utils import timezone
from django.utils.module_loading import import_string

from ingest.errors import IngestRejected, IngestTransient
from ingest.handlers import HANDLERS
from ingest.models import IngestJob, IngestPayload, JobKind
from trustrank.accounts.models import Team
from trustrank.accounts.principal import Principal
from trustrank.jobs import runner, send
from trustrank.jobs.admission import (
    jobs_overload_cache_clear,
    jobs_overloaded,
)
from trustrank.jobs.errors import JobRejected, JobTransient
from trustrank.lib.numbers import NumberInvalid, int_parse

log = logging.getLogger(__name__)

ProgressFn = Callable[..., None]


class InvalidPriority(ValueError):
    pass


def priority_parse(raw: str | None) -> int:
    """`X-Priority: n`; lower is more urgent; absent means the fallback (10)."""
    if raw is None or raw.strip() == "":
        return settings.TRUSTRANK_DEFAULT_PRIORITY
    try:
        # ASCII digits only: int() would take "١٠" or "1_0" too.
        return int_parse(raw, minimum=0, maximum=255)
    except NumberInvalid as exc:
        raise InvalidPriority(f"X-Priority must be an integer from 0 to 255, got {raw!r}") from exc


def job_enqueue_on_commit(job: IngestJob) -> None:
    """Enqueue after the job row and payload are committed, never before."""
    send.job_enqueue_on_commit(job)


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
    job = IngestJob(
        team=team,
        kind=kind,
        params=params or {},
        digest=hashlib.sha256(payload).hexdigest(),
        size_bytes=len(payload),
        content_type=content_type[:120],
        filename=filename[:255],
        priority=settings.TRUSTRANK_DEFAULT_PRIORITY if priority is None else priority,
        enqueued_at=timezone.now(),
    )
    job.requested_by_set(principal)
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


def _payload_load(*, job_id: Any) -> bytes:
    """The job's raw payload. Read with binary results: over the text protocol bytea arrives
    hex-encoded, and a large upload then costs the worker ~5x its size in memory. A payload
    larger than `_PAYLOAD_PIECE` is read in pieces: in one piece libpq holds it twice (its
    input buffer and the result) beside Python's copy, 3x its size at once."""
    import psycopg

    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            "SELECT octet_length(data) FROM ingest_ingestpayload WHERE job_id = %s", [job_id]
        )
        size = int(_one(cursor, job_id)[0] or 0)
        if size <= _PAYLOAD_PIECE:
            cursor.execute(
                "SELECT data FROM ingest_ingestpayload WHERE job_id = %s", [job_id], binary=True
            )
            return bytes(_one(cursor, job_id)[0])
        pieces = []
        for start in range(0, size, _PAYLOAD_PIECE):
            cursor.execute(
                "SELECT substring(data FROM %s FOR %s) FROM ingest_ingestpayload"
                " WHERE job_id = %s",
                [start + 1, _PAYLOAD_PIECE, job_id], binary=True,
            )
            pieces.append(bytes(_one(cursor, job_id)[0]))
    return b"".join(pieces)


_PAYLOAD_PIECE = 16 << 20


def _one(cursor: Any, job_id: Any) -> Any:
    row = cursor.fetchone()
    if row is None:
        raise IngestPayload.DoesNotExist(f"job {job_id} has no payload")
    return row


# SBOM loads record their change after their match (`sbom_findings_match`, in the job's
# transaction), not here.
_RERANK_AFTER_TEAM_LOAD = {JobKind.TRACES, JobKind.CERTIFICATES, JobKind.TRUST_BUNDLE}
_RERANK_AFTER_FEED = {JobKind.OSV, JobKind.KEV, JobKind.EPSS, JobKind.NVD}


def _rerank_after(job: IngestJob) -> None:
    """New evidence: recorded for the ranking sweep, which starts a debounced run for the
    teams it concerns (a feed: every team). Called by the handler, so an atomic load and its
    record commit together, and a worker that dies after the load leaves the job to run
    again (and record) rather than a load nobody ranks after."""
    from trustrank.findings.services.evidence import evidence_change_record

    if job.kind in _RERANK_AFTER_TEAM_LOAD:
        evidence_change_record(team_id=job.team_id, what=f"{job.kind} job {job.pk}",
                               kind=job.kind)
    elif job.kind in _RERANK_AFTER_FEED:
        evidence_change_record(team_id=None, what=f"{job.kind} feed job {job.pk}",
                               kind=job.kind)


def ingest_job_handle(*, job: IngestJob, progress: ProgressFn) -> dict[str, Any]:
    """The job runner's handler for the kind "ingest": the loader of the job's kind, on the
    stored payload. Loaders marked atomic run in one transaction with the job's finish."""
    handler = HANDLERS[job.kind]
    func = import_string(handler.path)
    payload = _payload_load(job_id=job.pk)
    try:
        counts = dict(func(job=job, payload=payload, progress=progress))
    except IngestRejected as exc:
        raise JobRejected(str(exc)) from exc
    except IngestTransient as exc:
        raise JobTransient(str(exc)) from exc
    result = counts.pop("_result", None)
    _rerank_after(job)
    return {"counts": counts, "result": result or {}}


def ingest_job_atomic(job: IngestJob) -> bool:
    return HANDLERS[job.kind].atomic


def job_run(*, job_id: str) -> str:
    """Claim and run one ingest job now, in this process (commands, benches)."""
    return runner.job_run(kind_name="ingest", job_id=str(job_id))


def ingest_overloaded() -> int | None:
    """Retry-After seconds when the job queues (every kind) are past their soft limit."""
    return jobs_overloaded()


def ingest_overload_cache_clear() -> None:
    jobs_overload_cache_clear()
