"""Thin Celery task for exports too big to stream: an id in, the service does the work."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, reject_on_worker_lost=True)
def exports_run(export_id: int) -> str:
    """The name export jobs were sent under before the one job system: messages queued
    under it still run (through the job runner)."""
    from trustrank.exports.services.run import export_run_execute

    return export_run_execute(export_id=int(export_id))
