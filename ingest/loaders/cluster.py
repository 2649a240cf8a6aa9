"""Cluster telemetry jobs (kind `telemetry`): OTLP metrics, remote write, text scrapes and
kubectl JSON, told apart by `params["format"]`. Each loader parses the stored payload and
calls the cluster app's services; nothing here knows about storage."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ingest.errors import IngestRejected
from ingest.models import IngestJob
from trustrank.cluster.models import Cluster
from trustrank.cluster.services.diagnoses import cluster_diagnose_request
from trustrank.cluster.services.metrics import parsed_metrics_store, series_store
from trustrank.cluster.services.objects import (
    ClusterNameInvalid,
    cluster_get_or_create,
    objects_load,
)
from trustrank.parsers.errors import ParserError
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.otlp_metrics import JSON, PROTOBUF, ResourceMetrics, otlp_metrics_parse
from trustrank.parsers.prometheus_text import TEXT, prometheus_text_parse
from trustrank.parsers.remote_write import remote_write_parse
from trustrank.parsers.series import Series

Progress = Callable[..., None]

OTLP, REMOTE_WRITE, SCRAPE, OBJECTS = "otlp", "remote_write", "scrape", "objects"


def _received_ms(job: IngestJob) -> int:
    return int(job.created_at.timestamp() * 1000)


def _cluster(*, job: IngestJob, name: str) -> Cluster:
    try:
        return cluster_get_or_create(team_id=job.team_id, name=name)
    except ClusterNameInvalid as exc:
        raise IngestRejected(str(exc)) from exc


def _store(
    *, job: IngestJob, by_cluster: dict[str, list[Series]], progress: Progress
) -> dict[str, Any]:
    totals: dict[str, int] = defaultdict(int)
    for name, series in sorted(by_cluster.items()):
        cluster = _cluster(job=job, name=name)
        progress(phase=f"storing {name}")
        loaded = series_store(cluster=cluster, series=series, now=job.created_at)
        for key, value in loaded.as_dict().items():
            totals[key] += value
        cluster_diagnose_request(cluster_id=cluster.pk)
    return {**totals, "clusters": len(by_cluster)}


def otlp_metrics_load(*, job: IngestJob, payload: bytes, progress: Progress) -> dict[str, Any]:
    encoding = JSON if job.params.get("encoding") == "json" else PROTOBUF
    # Judge point ages against the time of receipt: a job run late must keep what the
    # receiver accepted.
    parsed = otlp_metrics_parse(
        body=payload, encoding=encoding, now_ns=int(job.created_at.timestamp() * 1e9)
    )
    fallback = str(job.params.get("cluster") or "")
    by_cluster: dict[str, list[ResourceMetrics]] = defaultdict(list)
    for resource in parsed.resources:
        by_cluster[resource.cluster or fallback].append(resource)
    totals: dict[str, int] = defaultdict(int)
    for name, resources in sorted(by_cluster.items()):
        cluster = _cluster(job=job, name=name)
        progress(phase=f"storing {name}")
        loaded = parsed_metrics_store(cluster=cluster, resources=resources, now=job.created_at)
        for key, value in loaded.as_dict().items():
            totals[key] += value
        cluster_diagnose_request(cluster_id=cluster.pk)
    return {**totals, "clusters": len(by_cluster)}


def _by_label(series: Iterable[Series], *, label: str, fallback: str) -> dict[str, list[Series]]:
    grouped: dict[str, list[Series]] = defaultdict(list)
    for item in series:
        grouped[item.label(label) or fallback].append(item)
    return grouped


def remote_write_load(*, job: IngestJob, payload: bytes, progress: Progress) -> dict[str, Any]:
    written = remote_write_parse(body=payload)
    return _store(
        job=job,
        by_cluster=_by_label(written.series, label=str(job.params.get("cluster_label")
                                                       or "cluster"),
                             fallback=str(job.params.get("cluster") or "")),
        progress=progress,
    )


def scrape_load(*, job: IngestJob, payload: bytes, progress: Progress) -> dict[str, Any]:
    scrape = prometheus_text_parse(
        body=payload, scraped_at_ms=_received_ms(job),
        media_type=str(job.params.get("media_type") or TEXT),
    )
    return _store(job=job, by_cluster={str(job.params["cluster"]): list(scrape.series)},
                  progress=progress)


def kubernetes_objects_load(
    *, job: IngestJob, payload: bytes, progress: Progress
) -> dict[str, Any]:
    snapshot = kubernetes_parse(body=payload)
    cluster = _cluster(job=job, name=str(job.params["cluster"]))
    loaded = objects_load(cluster=cluster, snapshot=snapshot, at=job.created_at)
    cluster_diagnose_request(cluster_id=cluster.pk)
    return {**loaded.as_dict(), "ignored": dict(snapshot.ignored)}


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
