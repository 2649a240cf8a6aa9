"""Thin Celery task for exports too big to stream: an id in, the service does the work."""

from __future__ import annotations

from trustrank.lib.tasks import row_task


@row_task
def exports_run(export_id: int) -> str:
    """Write one queued Export's file (a second delivery finds it claimed and does nothing)."""
    from trustrank.exports.services.run import export_run_execute

    return export_run_execute(export_id=int(export_id))
