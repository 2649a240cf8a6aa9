"""End to end with the real Python OTLP exporter: an export with one unusable resource (a
NUL in its service.name) is stored without it, instead of vanishing whole after a 200."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for
from tests.runtime.helpers import SpanFactory
from trustrank.runtime.models import Service

pytestmark = pytest.mark.e2e


def test_one_bad_resource_does_not_lose_the_good_spans(web_server, celery_worker, team,
                                                       make_key):
    f = SpanFactory(env="e2e")
    bad = f.resource("bad\x00svc")
    for _ in range(50):
        f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=f.trace_id())
    for _ in range(5):
        f.span(service="ignored", name="GET /x", kind=SpanKind.SERVER, trace_id=f.trace_id(),
               resource=bad)
    key = make_key(team, "traces:write")
    exporter = OTLPSpanExporter(endpoint=f"{web_server.url}/v1/traces",
                                headers={"Authorization": f"Bearer {key}"})
    assert exporter.export(f.spans) == SpanExportResult.SUCCESS
    exporter.shutdown()

    def finished():
        job = IngestJob.objects.filter(kind="traces").first()
        return job if job is not None and job.is_finished else None

    job = wait_for(finished, timeout=90)
    assert job.status == JobStatus.DONE, job.error
    assert job.counts["spans"] == 50
    assert job.params["spans"] == 50
    assert set(Service.objects.values_list("name", flat=True)) >= {"web"}
    assert not Service.objects.filter(name__contains="bad").exists()
