"""An export's life: created as a row, its file streamed straight back (small) or written
by the exports_run job (big), its SHA-256 and size taken as the bytes go out, and one audit
event (action `export`) recorded with them.

When the audit event of a streamed export is written: the digest is known only once the last
byte is produced, so the stream holds back its last chunk, records the event (and marks the
row done) and only then hands that chunk over. A client that receives the whole file has
therefore always caused an event; a client that goes away earlier gets a truncated file and
the row says so (failed, "the client went away"); if the event cannot be written, the
stream ends without its last chunk — a broken download rather than an unrecorded one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import Team
from trustrank.accounts.principal import Principal
from trustrank.exports.models import Export, ExportFormat, ExportStatus
from trustrank.exports.services.csaf import csaf_vex_chunks
from trustrank.exports.services.csv_copy import csv_copy_chunks
from trustrank.exports.services.formats import Progress, json_chunks
from trustrank.exports.services.params import ExportParamError, ExportRequest
from trustrank.exports.services.product import (
    csaf_products_of,
    products_by_version,
    vex_product_of,
)
from trustrank.exports.services.report import report_html_chunks, report_pdf_chunks
from trustrank.exports.services.rows import (
    ExportSelection,
    export_count,
    export_rows,
    export_selection,
)
from trustrank.exports.services.vex_cyclonedx import cyclonedx_vex_chunks
from trustrank.exports.services.vex_openvex import openvex_chunks
from trustrank.findings.choices import ActorKind, FindingKind
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.findings.services.audit_chain import audit_chain_verify
from trustrank.jobs.admission import job_admit
from trustrank.jobs.models import JobClass
from trustrank.jobs.runner import job_run
from trustrank.jobs.send import job_enqueue_on_commit

# Formats whose document is checked whole (schema, PDF rendering) before a byte is served.
BUILT_FIRST = (
    ExportFormat.CYCLONEDX_VEX,
    ExportFormat.CSAF_VEX,
    ExportFormat.OPENVEX,
    ExportFormat.PDF,
    ExportFormat.HTML,
)
_VEX = (ExportFormat.CYCLONEDX_VEX, ExportFormat.CSAF_VEX, ExportFormat.OPENVEX)


def export_stream_cap(fmt: str) -> int:
    """The most findings an export of `fmt` may match and still be made within the request;
    more go to the export job. A PDF costs far more a finding than the other formats, so a
    request makes only a small one."""
    cap = settings.TRUSTRANK_EXPORT_STREAM_MAX_ROWS
    if fmt == ExportFormat.PDF:
        return min(cap, settings.TRUSTRANK_EXPORT_PDF_STREAM_MAX_ROWS)
    return cap


def export_selection_for(req: ExportRequest) -> ExportSelection:
    """The findings an export reads; ExportParamError when the format cannot take them
    (a CycloneDX VEX document that would span several project versions)."""
    selection = export_selection(req)
    if req.format in _VEX:
        # VEX documents speak of vulnerabilities; other kinds have no place in them.
        selection.queryset = selection.queryset.filter(kind=FindingKind.VULNERABILITY)
        selection.notes.append("only vulnerability findings are in a VEX document")
    if req.format == ExportFormat.CYCLONEDX_VEX:
        selection.product = vex_product_of(req, selection.queryset)
    if req.format == ExportFormat.OPENVEX and not selection.queryset.exists():
        raise ExportParamError(
            "format",
            "format=openvex: an OpenVEX document needs at least one statement, and this "
            "selection has no vulnerability finding",
        )
    if req.format == ExportFormat.CSAF_VEX:
        # One CSAF vulnerability per advisory id: its findings must come together.
        selection.queryset = selection.queryset.order_by("vuln_id", "cve_id", "id")
    return selection


def export_request_of(export: Export) -> ExportRequest:
    return ExportRequest(
        format=export.format,
        team_id=export.team_id,
        filters={k: list(v) for k, v in (export.filter_params or {}).items()},
        as_of=export.as_of,
        ranking_run_id=export.ranking_run_id,
    )


def _actor_of(export: Export) -> Actor:
    if export.requested_by_key_id is not None:
        return Actor(
            label=export.requested_by_label,
            kind=ActorKind.API_KEY,
            api_key_id=export.requested_by_key_id,
        )
    if export.requested_by_user_id is not None:
        return Actor(
            label=export.requested_by_label, kind=ActorKind.USER, user=export.requested_by_user
        )
    return Actor.system(export.requested_by_label or "export")


def export_create(
    *,
    principal: Principal,
    req: ExportRequest,
    streamed: bool,
    total: int | None = None,
    job_class: str = JobClass.BATCH,
) -> Export:
    """The export's row. One written by a worker is a job: admitted against the team's
    queue limit (JobsBusy), and enqueued when the caller's transaction commits."""
    actor = Actor.of(principal)
    now = timezone.now()
    if not streamed:
        job_admit(kind="export", team_id=req.team_id)
    export = Export.objects.create(
        team_id=req.team_id,
        format=req.format,
        filter_params=req.filters,
        as_of=req.as_of,
        ranking_run_id=req.ranking_run_id,
        streamed=streamed,
        status=ExportStatus.RUNNING if streamed else ExportStatus.QUEUED,
        progress_total=total,
        requested_by_user=actor.user,
        requested_by_key_id=actor.api_key_id,
        requested_by_label=actor.label,
        created_at=now,
        started_at=now if streamed else None,
        enqueued_at=None if streamed else now,
        job_class=JobClass.INTERACTIVE if streamed else job_class,
    )
    if not streamed:
        job_enqueue_on_commit(export)
    return export


def export_metadata(export: Export, selection: ExportSelection) -> dict[str, Any]:
    """What the file says about itself; also kept on the row."""
    team = Team.objects.get(pk=export.team_id)
    return {
        "export_id": export.pk,
        "format": export.format,
        "team": {"id": team.pk, "name": team.name},
        "filter": export.filter_params,
        "as_of": export.as_of.isoformat() if export.as_of else None,
        **selection.metadata(),
        "requested_by": export.requested_by_label,
        "generated_at": timezone.now().isoformat(),
        "audit_chain": audit_chain_verify(team_id=export.team_id).as_dict(),
    }


def export_chunks(
    export: Export,
    selection: ExportSelection,
    meta: dict[str, Any],
    progress: Progress | None,
    *,
    job: bool = False,
) -> Iterator[bytes]:
    fmt = ExportFormat(export.format)
    if fmt == ExportFormat.PDF:
        return report_pdf_chunks(selection, meta, progress)
    if fmt == ExportFormat.HTML:
        return report_html_chunks(selection, meta, progress)
    if fmt == ExportFormat.CSV:
        return csv_copy_chunks(selection, meta, progress, own_connection=job)
    rows = export_rows(selection)
    if fmt == ExportFormat.CSAF_VEX:
        return csaf_vex_chunks(rows, meta, progress, products=csaf_products_of(selection.queryset))
    if fmt == ExportFormat.OPENVEX:
        return openvex_chunks(
            rows, meta, progress, products=products_by_version(selection.queryset)
        )
    writer: Callable[..., Iterator[bytes]] = {
        ExportFormat.JSON: json_chunks,
        ExportFormat.CYCLONEDX_VEX: cyclonedx_vex_chunks,
    }[fmt]
    return writer(rows, meta, progress)


def _finish(export: Export, *, rows: int, size: int, sha256: str, file_path: str = "") -> None:
    """Mark the export done and record its audit event, together."""
    now = timezone.now()
    with transaction.atomic():
        # Only while this attempt (or the streaming request) holds the row: a job attempt
        # the sweep gave up on must not finish, nor record an event, for one that runs again.
        finished = Export.objects.filter(
            pk=export.pk, status=ExportStatus.RUNNING, attempts=export.attempts
        ).update(
            status=ExportStatus.DONE,
            phase="done",
            lease_until=None,
            backend_pid=None,
            rows=rows,
            progress_done=rows,
            size_bytes=size,
            sha256=sha256,
            file_path=file_path,
            finished_at=now,
            error="",
        )
        if not finished:
            raise RuntimeError(f"export {export.pk} was taken over by another attempt")
        audit_event_record(
            actor=_actor_of(export),
            action="export",
            team_id=export.team_id,
            subject_type="export",
            subject_id=str(export.pk),
            after={
                "format": export.format,
                "filter": {
                    **export.filter_params,
                    **({"as_of": export.as_of.isoformat()} if export.as_of else {}),
                    **({"ranking_run": export.ranking_run_id} if export.ranking_run_id else {}),
                },
                "rows": rows,
                "sha256": sha256,
                "size": size,
            },
            at=now,
        )


def _fail(export_id: int, error: str) -> None:
    Export.objects.filter(pk=export_id).exclude(status=ExportStatus.DONE).update(
        status=ExportStatus.FAILED, error=error[:2000], finished_at=timezone.now()
    )


@dataclass
class _Counter:
    rows: int = 0

    def __call__(self, n: int) -> None:
        self.rows = n


@dataclass
class StreamedExport:
    export: Export
    chunks: Iterator[bytes]
    meta: dict[str, Any]


def export_stream(*, export: Export, selection: ExportSelection) -> StreamedExport:
    """The bytes of a small export, to hand to a StreamingHttpResponse. CSV and JSON are
    produced as they are sent; the other formats are built (and validated) into a spooled
    temporary file first, here, so an invalid document raises before any byte goes out."""
    meta = export_metadata(export, selection)
    Export.objects.filter(pk=export.pk).update(metadata=meta)
    counter = _Counter()
    chunks = export_chunks(export, selection, meta, counter)
    if export.format in BUILT_FIRST:
        spool = tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024)  # noqa: SIM115
        try:
            for chunk in chunks:
                spool.write(chunk)
        except Exception as exc:
            spool.close()
            _fail(export.pk, f"{type(exc).__name__}: {exc}")
            raise
        spool.seek(0)
        chunks = _read_spool(spool)
    return StreamedExport(export=export, chunks=_recorded(export, chunks, counter), meta=meta)


def _read_spool(spool: Any) -> Iterator[bytes]:
    try:
        while block := spool.read(64 * 1024):
            yield block
    finally:
        spool.close()


def _recorded(export: Export, chunks: Iterator[bytes], counter: _Counter) -> Iterator[bytes]:
    digest = hashlib.sha256()
    size = 0
    held: bytes | None = None
    completed = False
    try:
        for chunk in chunks:
            if not chunk:
                continue
            if held is not None:
                yield held
            digest.update(chunk)
            size += len(chunk)
            held = chunk
        _finish(export, rows=counter.rows, size=size, sha256=digest.hexdigest())
        completed = True
        if held is not None:
            yield held
    except GeneratorExit:
        # Close the writer first: a CSV export is mid-COPY on the connection _fail uses.
        _close(chunks)
        if not completed:
            _fail(export.pk, "the client went away before the end of the file")
        raise
    except Exception as exc:
        if not completed:
            _fail(export.pk, f"{type(exc).__name__}: {exc}")
        raise


def _close(chunks: Iterator[bytes]) -> None:
    close = getattr(chunks, "close", None)
    if close is not None:
        close()


def export_path(export: Export) -> Path:
    return Path(settings.TRUSTRANK_EXPORT_DIR) / export.file_path


def export_partial_path(export: Export) -> Path:
    """Where an attempt writes its file until it is complete: a name per attempt (a frozen
    worker that wakes up never writes into the file of the attempt that took over), all
    found by the export's id when a dead attempt is cleaned up."""
    folder = Path(settings.TRUSTRANK_EXPORT_DIR) / str(export.team_id)
    return folder / f"{export.pk}.{export.attempts}.part"


def export_job_cleanup(*, job: Export) -> None:
    """Remove the half-written file of a dead or failed attempt, and the complete one of an
    attempt that died between renaming its file and marking the row done (no row names it,
    so nothing else would ever remove it)."""
    folder = export_partial_path(job).parent
    for partial in folder.glob(f"{job.pk}.*.part"):
        partial.unlink(missing_ok=True)
    kept = Export.objects.filter(pk=job.pk).values_list("file_path", flat=True).first() or ""
    for orphan in folder.glob(f"{job.pk}-*.{job.extension}"):
        if str(orphan.relative_to(settings.TRUSTRANK_EXPORT_DIR)) != kept:
            orphan.unlink(missing_ok=True)


def export_run_handle(*, job: Export, progress: Any) -> None:
    """The job runner's handler for the kind "export": write the file under its partial
    name, rename it, then mark the row done with its audit event in one transaction."""
    export = Export.objects.select_related("requested_by_user").get(pk=job.pk)
    folder = Path(settings.TRUSTRANK_EXPORT_DIR) / str(export.team_id)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{export.pk}-{secrets.token_hex(8)}.{export.extension}"
    partial = export_partial_path(export)
    try:
        selection = export_selection_for(export_request_of(export))
        total = export_count(selection)
        meta = export_metadata(export, selection)
        Export.objects.filter(pk=export.pk).update(progress_total=total, metadata=meta)
        counter = _Counter()

        def both(n: int) -> None:
            counter(n)
            progress(done=n)

        digest = hashlib.sha256()
        size = 0
        with partial.open("wb") as out:
            for chunk in export_chunks(export, selection, meta, both, job=True):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        final = folder / name
        partial.rename(final)
        try:
            _finish(
                export,
                rows=counter.rows,
                size=size,
                sha256=digest.hexdigest(),
                file_path=str(final.relative_to(settings.TRUSTRANK_EXPORT_DIR)),
            )
        except Exception:
            final.unlink(missing_ok=True)
            raise
    except Exception:
        partial.unlink(missing_ok=True)
        raise


def export_run_execute(*, export_id: int) -> str:
    """Run one export job now, in this process (tests, benches)."""
    return job_run(kind_name="export", job_id=str(export_id))
