"""Loading OTLP trace exports into the runtime call graph."""

from __future__ import annotations

import gc
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.utils import timezone

from ingest.errors import IngestRejected
from ingest.models import IngestJob, IngestPayload
from ingest.services import ProgressFn
from trustrank.parsers.otlp import JSON, PROTOBUF, OtlpDecodeError, otlp_span_batches
from trustrank.runtime.services.aggregation import span_window, traces_aggregate_store


def traces_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    """Decode the export part by part and fold each part into the team's call graph."""
    encoding = JSON if job.params.get("encoding") == "json" else PROTOBUF
    counts: dict[str, Any] = defaultdict(int)
    problems: list[str] = []
    received_at = timezone.now()
    # The cyclic garbage collector is paused for the job: it produces hundreds of thousands
    # of short-lived tuples that hold no cycles, and the collector's passes over them cost
    # ~7 % of the aggregation. Collection resumes (and catches up) when the job ends.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # Part by part: a large export is aggregated with bounded memory. Calls whose two
        # halves fall in different parts are matched through the span index tables, exactly
        # as halves arriving in different export requests are.
        for batch in otlp_span_batches(
            payload,
            encoding=encoding,
            max_bytes=settings.TRUSTRANK_TRACE_PART_BYTES,
            name_sample_rate=settings.TRUSTRANK_TRACE_SAMPLE_RATE,
            # Anchored at the upload, so the receiver's count and a re-run agree.
            window=span_window(now=job.created_at),
            max_stack_frames=settings.TRUSTRANK_TRACE_STACK_FRAMES,
            max_span_frames=settings.TRUSTRANK_TRACE_SPAN_FRAMES,
        ):
            part = traces_aggregate_store(
                team_id=job.team_id, batch=batch, received_at=received_at
            )
            for key, value in part.items():
                # Distinct things (environments, services) are not additive across parts.
                if key in ("environments", "services"):
                    counts[key] = max(counts[key], value)
                else:
                    counts[key] += value
            # Written by the job's heartbeat (the spans stored so far are not visible
            # before the job's transaction commits).
            progress(phase="aggregating", done=counts["spans"], total=job.params.get("spans"))
            if batch.rejected_spans and len(problems) < 5:
                problems.append(batch.message())
    except OtlpDecodeError as exc:
        raise IngestRejected(f"The trace export cannot be decoded: {exc}") from exc
    finally:
        if gc_was_enabled:
            gc.enable()
    counts = dict(counts)
    if problems:
        counts["_result"] = {"partial_success": " | ".join(problems)}
    if not settings.TRUSTRANK_TRACE_KEEP_PAYLOAD:
        # Raw spans are not kept (aggregates are). Cleared in the job's own transaction, so a
        # job that fails keeps its payload for the next attempt.
        IngestPayload.objects.filter(job_id=job.pk).update(data=b"")
    return counts
