"""Taking a job: the conditional claim, and the fair choice of a batch job for a free slot.

- Claim: one conditional UPDATE (`queued`, or `running` with a lapsed lease), so two
  deliveries of a message can never both run a job. The claimant records its PostgreSQL
  backend; if the row's previous claimant's backend is still running (a killed worker's
  statement holding its locks), the new claimant ends it first.
- Batch jobs run in a bounded number of slots (TRUSTRANK_JOBS_BATCH_SLOTS, and per team
  TRUSTRANK_JOBS_BATCH_SLOTS_PER_TEAM). Their messages are wake-ups: a worker woken for batch
  work takes the fairest queued batch job of any team and kind (the team served least
  recently first), not the one the message named, so one team's burst cannot hold the
  slots while another team waits.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from trustrank.jobs.models import JobStatus
from trustrank.jobs.registry import JobKind, job_kind, job_kinds

log = logging.getLogger(__name__)

_WORKER = f"{socket.gethostname()}:{os.getpid()}"


def lease_until() -> Any:
    return timezone.now() + timedelta(seconds=settings.TRUSTRANK_JOB_LEASE_SECONDS)


def backend_end(*, pid: int | None, started: Any) -> bool:
    """End a PostgreSQL backend left by a dead claimant, if it is still that backend (the
    start time guards against a pid the server has since given to another session)."""
    if not pid or started is None:
        return False
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid = %s AND backend_start = %s AND pid <> pg_backend_pid()",
            [pid, started],
        )
        row = cur.fetchone()
    ended = bool(row and row[0])
    if ended:
        log.warning("ended PostgreSQL backend %s left by a dead job claimant", pid)
    return ended


# --- Claim ------------------------------------------------------------------------------------


def _claim_sql(kind: JobKind, *, direct: bool) -> str:
    ready = f' AND "{kind.ready_field}" <= clock_timestamp()' if kind.ready_field else ""
    # A batch job is claimed only as the fair choice for a free slot (`batch_claim`).
    direct_only = " AND j.job_class <> 'batch'" if direct else ""
    table = kind.table
    # The old claimant's backend is read in the same statement that replaces it, and the
    # claimed row is returned by it.
    return (
        f'UPDATE "{table}" AS j SET status = %s, attempts = j.attempts + 1, '  # noqa: S608
        "started_at = coalesce(j.started_at, clock_timestamp()), lease_until = %s, "
        "heartbeat_at = clock_timestamp(), "
        "phase = 'starting', error = '', worker = %s, backend_pid = pg_backend_pid(), "
        "backend_start = (SELECT backend_start FROM pg_stat_activity "
        "                 WHERE pid = pg_backend_pid()) "
        f'FROM (SELECT id, backend_pid, backend_start FROM "{table}" WHERE id = %s FOR UPDATE) '
        "AS old WHERE j.id = old.id AND (j.status = 'queued' OR "
        f"(j.status = 'running' AND j.lease_until < clock_timestamp())){ready}{direct_only} "
        "RETURNING old.backend_pid AS claim_old_pid, old.backend_start AS claim_old_start, j.*"
    )


def job_claim(kind: JobKind, job_id: Any, *, direct: bool = False) -> Any | None:
    """Take the job for this worker (the claimed row, as a model instance), or None when it
    is finished, not ready, held by a live claimant or, `direct`, a batch job. Ends the
    backend a dead claimant left behind."""
    claimed = list(kind.model.objects.raw(
        _claim_sql(kind, direct=direct), [JobStatus.RUNNING, lease_until(), _WORKER[:160], job_id]
    ))
    if not claimed:
        return None
    job = claimed[0]
    old_pid, old_start = job.claim_old_pid, job.claim_old_start
    del job.claim_old_pid, job.claim_old_start
    backend_end(pid=old_pid, started=old_start)
    return job


def _batch_rows_sql(*, where: str, columns: str) -> str:
    parts = []
    for kind in job_kinds():
        if not kind.batch_capable:
            continue
        ready = f' AND "{kind.ready_field}" <= clock_timestamp()' if kind.ready_field else ""
        parts.append(
            f"SELECT '{kind.name}' AS kind, id::text AS id, {columns} "  # noqa: S608
            f'FROM "{kind.table}" WHERE job_class = \'batch\' AND {where}'
            + (ready if "queued" in where else "")
        )
    return " UNION ALL ".join(parts)


def batch_next() -> tuple[str, str] | None:
    """The fairest queued batch job with a free slot, or None. Call it holding the batch
    lock: the slot counts must not change between the choice and the claim."""
    per_team = settings.TRUSTRANK_JOBS_BATCH_SLOTS_PER_TEAM
    queued = _batch_rows_sql(
        where="status = 'queued'", columns="team_id, priority, created_at"
    )
    recent = _batch_rows_sql(
        where="(status = 'running' AND lease_until >= clock_timestamp() "
        "OR started_at >= clock_timestamp() - interval '1 day')",
        columns="team_id, status, started_at",
    )
    if not queued:
        return None
    sql = (
        f"WITH q AS ({queued}), r AS ("  # noqa: S608 - table names from the registry
        "  SELECT team_id, count(*) FILTER (WHERE status = 'running') AS running, "
        f"  max(started_at) AS served FROM ({recent}) AS x GROUP BY team_id) "
        "SELECT q.kind, q.id FROM q LEFT JOIN r ON r.team_id = q.team_id "
        "WHERE coalesce(r.running, 0) < %s "
        "ORDER BY coalesce(r.running, 0), q.priority, r.served NULLS FIRST, q.created_at "
        "LIMIT 1"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [per_team])
        row = cur.fetchone()
    return (str(row[0]), str(row[1])) if row else None


def batch_running() -> int:
    sql = _batch_rows_sql(
        where="status = 'running' AND lease_until >= clock_timestamp()", columns="team_id"
    )
    if not sql:
        return 0
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM ({sql}) AS x")  # noqa: S608
        return int(cur.fetchone()[0])


def batch_claim() -> tuple[JobKind, Any] | None:
    """Claim the fairest batch job if a slot is free (serialised on an advisory lock)."""
    from trustrank.lib.locks import advisory_xact_lock

    with transaction.atomic():
        advisory_xact_lock("jobs:batch-slots")
        if batch_running() >= settings.TRUSTRANK_JOBS_BATCH_SLOTS:
            return None
        chosen = batch_next()
        if chosen is None:
            return None
        kind = job_kind(chosen[0])
        job = job_claim(kind, chosen[1])
    return (kind, job) if job is not None else None
