"""Cluster telemetry jobs (kind `telemetry`): OTLP metrics, remote write, text scrapes and
kubectl JSON, told apart by `params["format"]`. Each loader parses the stored payload and
calls the cluster app's services; nothing here knows about storage.

The receivers answered after checking every point, and the loaders parse with the same
checks (`metrics_limits`, judged against the job's time of receipt): a point or object
storage cannot hold (a time out of range, a NUL, a cluster name that is unusable) is
dropped and counted in the job's `rejected` count, never fatal for the job, so a job
stored before a check existed still stores its good points."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from django.db.models import F
from django.utils import timezone

from ingest.bodies import BodyTooLarge, BodyUndecodable, decode_body
from ingest.errors import IngestRejected
from ingest.models import IngestJob, JobStatus
from trustrank.cluster.models import Cluster
from trustrank.cluster.services.diagnoses import cluster_diagnose_request
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.metrics_otlp import OtlpPoints
from trustrank.cluster.services.objects import (
    ClusterNameInvalid,
    cluster_get_or_create,
    objects_load,
)
from trustrank.notify.events import notify_job_failed
from trustrank.parsers.errors import ParserError
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.otlp_columns import columns_unpack, otlp_metrics_raw_columns
from trustrank.parsers.otlp_metrics import otlp_metrics_parse
from trustrank.parsers.otlp_metrics_model import JSON, PROTOBUF, OtlpLimits, ResourceMetrics
from trustrank.parsers.prometheus_text import TEXT, prometheus_text_parse
from trustrank.parsers.remote_write import remote_write_parse
from trustrank.parsers.series import Series

Progress = Callable[..., None]

OTLP, REMOTE_WRITE, SCRAPE, OBJECTS = "otlp", "remote_write", "scrape", "objects"


def metrics_limits() -> OtlpLimits:
    """What makes a metric point unusable, from the settings: the receivers and the
    loaders judge alike."""
    return OtlpLimits(max_past_s=settings.TRUSTRANK_METRICS_MAX_AGE_DAYS * 86_400,
                      max_future_s=settings.TRUSTRANK_METRICS_MAX_FUTURE_SECONDS)


def _received_ms(job: IngestJob) -> int:
    return int(job.created_at.timestamp() * 1000)


def _cluster(*, job: IngestJob, name: str) -> Cluster:
    try:
        return cluster_get_or_create(team_id=job.team_id, name=name)
    except ClusterNameInvalid as exc:
        raise IngestRejected(str(exc)) from exc


def _store(
    *, job: IngestJob, by_cluster: dict[str, list[Series]], progress: Progress,
    rejected: int = 0,
) -> dict[str, Any]:
    totals: dict[str, int] = defaultdict(int)
    totals["rejected"] = rejected
    clusters: dict[str, Cluster] = {}
    for name, series in by_cluster.items():
        try:
            clusters[name] = _cluster(job=job, name=name)
        except IngestRejected:
            # Series of a cluster name that cannot be one: the receiver refused them;
            # a job stored before it did still stores its other clusters' points.
            if len(by_cluster) == 1:
                raise  # nothing usable: a wholly bad job fails
            totals["rejected"] += sum(len(item.timestamps_ms) for item in series)
    if by_cluster and not clusters:
        raise IngestRejected("no series names a usable cluster")
    for name in sorted(clusters):
        cluster, series = clusters[name], by_cluster[name]
        progress(phase=f"storing {name}")
        loaded = series_store(cluster=cluster, series=series, now=job.created_at)
        for key, value in loaded.as_dict().items():
            totals[key] += value
        cluster_diagnose_request(cluster_id=cluster.pk)
    return {**totals, "clusters": len(clusters)}


# A worker that takes an OTLP job also takes the team's other queued OTLP jobs, up to
# these bounds, and stores them in the same transaction: each job alone would pay about
# 12 ms of fixed cost (claim, payload, a dozen statements, commit) for the 8,192 points a
# Collector's batch processor sends, and the scrapes of one minute would each append
# their own partial minute rows. A worker that keeps up takes small batches; one that
# falls behind catches up with large ones, whose scrapes of a minute fold into one row
# (a 15 s scrape interval: up to four points a row). The bounds keep a batch's memory
# (one parsed request at a time, columns of 24 bytes a point: about 25 MB, and numpy's
# sort of them) and its transaction bounded.
BATCH_MAX_JOBS = 160
BATCH_MAX_POINTS = 1_000_000


def _otlp_batch_wait(job: IngestJob) -> list[IngestJob]:
    """`_otlp_batch_claim`, waiting (TRUSTRANK_METRICS_BATCH_WAIT_MS from the job's
    arrival at most) while the batch is small and the job not urgent."""
    taken = _otlp_batch_claim(job, taken=[])
    wait = settings.TRUSTRANK_METRICS_BATCH_WAIT_MS / 1000
    if not wait or job.priority < settings.TRUSTRANK_DEFAULT_PRIORITY:
        return taken
    deadline = job.created_at.timestamp() + wait
    while time.time() < deadline and _points(job, taken) < BATCH_MAX_POINTS // 4:
        time.sleep(min(0.01, max(0.0, deadline - time.time())))
        taken = _otlp_batch_claim(job, taken=taken)
    return taken


def _points(job: IngestJob, taken: list[IngestJob]) -> int:
    return sum(int(j.params.get("points") or 0) for j in (job, *taken))


def _otlp_batch_claim(job: IngestJob, *, taken: list[IngestJob]) -> list[IngestJob]:
    """The team's other queued OTLP jobs, oldest first, claimed inside the caller's
    transaction (added to `taken`, those claimed before): a rollback hands them back to
    the queue; a commit finishes them with the job that took them. Rows another worker is
    claiming are skipped, not waited for."""
    if len(taken) >= BATCH_MAX_JOBS - 1:
        return taken
    now = timezone.now()
    queued = list(
        IngestJob.objects.select_for_update(skip_locked=True)
        .filter(status=JobStatus.QUEUED, kind=job.kind, team_id=job.team_id,
                params__format=OTLP)
        .exclude(pk=job.pk).order_by("created_at")
        .only("pk", "params", "created_at", "team_id", "attempts")[:BATCH_MAX_JOBS - 1
                                                                    - len(taken)]
    )
    taken = list(taken)
    points = _points(job, taken)
    first = len(taken)
    for other in queued:
        points += int(other.params.get("points") or 0)
        if taken and points > BATCH_MAX_POINTS:
            break
        taken.append(other)
    if len(taken) > first:
        IngestJob.objects.filter(pk__in=[other.pk for other in taken[first:]]).update(
            status=JobStatus.RUNNING, attempts=F("attempts") + 1, started_at=now,
            lease_until=now + timedelta(seconds=settings.TRUSTRANK_JOB_LEASE_SECONDS),
            phase=f"with job {job.pk}"[:40], error="",
        )
    return taken


def _payload(job_id: Any) -> bytes:
    """A job's payload, read with binary results (bytea as text would be hex)."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute("SELECT data FROM ingest_ingestpayload WHERE job_id = %s", [job_id],
                       binary=True)
        row = cursor.fetchone()
    if row is None:
        raise IngestRejected(f"job {job_id} has no payload")
    return bytes(row[0])


def _prepared(job_ids: list[Any]) -> dict[Any, bytes]:
    """The packed columns the receiver stored with each job, where it stored any."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute("SELECT job_id, prepared FROM ingest_ingestpayload "
                       "WHERE job_id = ANY(%s) AND prepared IS NOT NULL", [job_ids],
                       binary=True)
        return {job_id: bytes(prepared) for job_id, prepared in cursor.fetchall()}


def _body(*, job: IngestJob, payload: bytes | None) -> bytes:
    """A job's request body as sent before any Content-Encoding (`payload`: as stored,
    read here when None)."""
    data = _payload(job.pk) if payload is None else payload
    if job.params.get("content_encoding") == "gzip":
        data = decode_body(data, content_encoding="gzip",
                           limit=settings.TRUSTRANK_MAX_UPLOAD_BYTES)
    return data


def _otlp_add(
    *, job: IngestJob, payload: bytes | None, prepared: bytes | None,
    batches: dict[str, OtlpPoints],
) -> dict[str, Any]:
    """Add one job's points to the batch: from the columns the receiver packed, else
    from its body (`payload`, read here when None)."""
    encoding = JSON if job.params.get("encoding") == "json" else PROTOBUF
    # Judge point ages against the time of receipt: a job run late must keep what the
    # receiver accepted.
    now_ns = int(job.created_at.timestamp() * 1e9)
    fallback = str(job.params.get("cluster") or "")
    try:
        body = None
        columns = None if prepared is None else columns_unpack(prepared)
        if columns is None:
            body = _body(job=job, payload=payload)
            if encoding == PROTOBUF:
                columns = otlp_metrics_raw_columns(body=body, now_ns=now_ns,
                                                   limits=metrics_limits())
        names = {r.get("k8s.cluster.name") or fallback for r in columns.resources} if (
            columns is not None) else set()
        if columns is not None and len(names) == 1:
            # The usual request: one cluster's good gauge and sum points, as columns.
            name = names.pop()
            points = batches.get(name)
            if points is None:
                # Its only cluster name unusable: nothing in the job can be stored, and
                # the job fails (handing back the jobs it took) as a wholly bad one.
                points = batches[name] = OtlpPoints(cluster=_cluster(job=job, name=name))
            return {**points.add_columns(columns, now=job.created_at).as_dict(),
                    "clusters": 1}
        if body is None:
            body = _body(job=job, payload=payload)
        parsed = otlp_metrics_parse(body=body, encoding=encoding, now_ns=now_ns,
                                    limits=metrics_limits())
    except (ParserError, BodyTooLarge, BodyUndecodable) as exc:
        raise IngestRejected(str(exc)) from exc
    by_cluster: dict[str, list[ResourceMetrics]] = defaultdict(list)
    for resource in parsed.resources:
        by_cluster[resource.cluster or fallback].append(resource)
    totals: dict[str, int] = defaultdict(int)
    totals["rejected"] = parsed.rejected_points
    clusters = {}
    unusable: IngestRejected | None = None
    for name, resources in list(by_cluster.items()):
        if name in batches:
            clusters[name] = batches[name].cluster
            continue
        try:
            clusters[name] = _cluster(job=job, name=name)
        except IngestRejected as exc:
            # The receiver refuses such a name; a job stored before it did keeps the
            # other clusters' points (one with none usable fails, as a wholly bad job).
            unusable = exc
            totals["rejected"] += sum(m.point_count for r in resources for m in r.metrics)
            del by_cluster[name]
    if unusable is not None and not by_cluster:
        raise unusable
    for name, resources in sorted(by_cluster.items()):
        points = batches.get(name)
        if points is None:
            points = batches[name] = OtlpPoints(cluster=clusters[name])
        loaded = points.add(resources, now=job.created_at)
        for key, value in loaded.as_dict().items():
            totals[key] += value
    return {**totals, "clusters": len(by_cluster)}


def otlp_metrics_load(*, job: IngestJob, payload: bytes, progress: Progress) -> dict[str, Any]:
    """This job and the team's other queued OTLP jobs (bounded), in one transaction."""
    # The payloads are stored already: a commit lost in a crash leaves the jobs to be run
    # again (their claim lapses), so the commit need not wait for its WAL flush.
    with connection.cursor() as cur:
        cur.execute("SET LOCAL synchronous_commit = off")
    others = _otlp_batch_wait(job)
    prepared = _prepared([job.pk, *(other.pk for other in others)])
    batches: dict[str, OtlpPoints] = {}
    counts = _otlp_add(job=job, payload=payload, prepared=prepared.get(job.pk),
                       batches=batches)
    done: list[tuple[IngestJob, dict[str, Any]]] = []
    for at, other in enumerate(others, start=1):
        progress(phase=f"parsing {at + 1} of {len(others) + 1}")
        try:
            done.append((other, _otlp_add(job=other, payload=None,
                                          prepared=prepared.pop(other.pk, None),
                                          batches=batches)))
        except IngestRejected as exc:
            IngestJob.objects.filter(pk=other.pk).update(
                status=JobStatus.FAILED, error=str(exc)[:10000], finished_at=timezone.now(),
                lease_until=None, phase="failed",
            )
            notify_job_failed(kind="ingest", job=other, message=str(exc))
    minutes = new_series = dropped = 0
    for name, points in sorted(batches.items()):
        progress(phase=f"storing {name}")
        stored = points.store()
        minutes += stored.minutes
        new_series += stored.new_series
        dropped += stored.rejected
        cluster_diagnose_request(cluster_id=points.cluster.pk)
    # `minutes` and `new_series` of a batch: what the whole batch wrote, on every job of it.
    finished = timezone.now()
    batch = {"minutes": minutes, "new_series": new_series, "batch": len(done) + 1}
    if dropped:
        # Points storage could not hold that the parse let through (see minutes_store).
        batch["rejected_in_batch"] = dropped
    for other, other_counts in done:
        IngestJob.objects.filter(pk=other.pk).update(
            status=JobStatus.DONE,
            counts={**other_counts, **batch, "batched_with": str(job.pk)},
            result={}, finished_at=finished, lease_until=None, phase="done", error="",
        )
    return {**counts, **batch}


def _by_label(series: Iterable[Series], *, label: str, fallback: str) -> dict[str, list[Series]]:
    grouped: dict[str, list[Series]] = defaultdict(list)
    for item in series:
        grouped[item.label(label) or fallback].append(item)
    return grouped


def remote_write_load(*, job: IngestJob, payload: bytes, progress: Progress) -> dict[str, Any]:
    written = remote_write_parse(body=payload, now_ms=_received_ms(job), limits=metrics_limits())
    return _store(
        job=job,
        by_cluster=_by_label(written.series, label=str(job.params.get("cluster_label")
                                                       or "cluster"),
                             fallback=str(job.params.get("cluster") or "")),
        progress=progress, rejected=written.rejected_samples,
    )


def scrape_load(*, job: IngestJob, payload: bytes, progress: Progress) -> dict[str, Any]:
    received = _received_ms(job)
    scrape = prometheus_text_parse(
        body=payload, scraped_at_ms=received, now_ms=received, limits=metrics_limits(),
        media_type=str(job.params.get("media_type") or TEXT),
    )
    return _store(job=job, by_cluster={str(job.params["cluster"]): list(scrape.series)},
                  progress=progress, rejected=scrape.rejected_samples)


def kubernetes_objects_load(
    *, job: IngestJob, payload: bytes, progress: Progress
) -> dict[str, Any]:
    snapshot = kubernetes_parse(body=payload)
    cluster = _cluster(job=job, name=str(job.params["cluster"]))
    loaded = objects_load(cluster=cluster, snapshot=snapshot, at=job.created_at)
    cluster_diagnose_request(cluster_id=cluster.pk)
    return {**loaded.as_dict(), "ignored": dict(snapshot.ignored),
            "rejected": len(snapshot.rejected)}


_LOADERS = {
    OTLP: otlp_metrics_load,
    REMOTE_WRITE: remote_write_load,
    SCRAPE: scrape_load,
    OBJECTS: kubernetes_objects_load,
}


def telemetry_load(*, job: IngestJob, payload: bytes, progress: Progress) -> dict[str, Any]:
    """The `telemetry` job kind's handler. The receiver validated the payload already; a
    parser error here means the payload changed meaning (a newer parser) and is final."""
    loader = _LOADERS.get(str(job.params.get("format")))
    if loader is None:
        raise IngestRejected(f"unknown telemetry format {job.params.get('format')!r}")
    try:
        return loader(job=job, payload=payload, progress=progress)
    except ParserError as exc:
        raise IngestRejected(str(exc)) from exc
