"""Thin Celery tasks for ranking runs: ids in, the service does the work."""

from __future__ import annotations

from celery import shared_task

from trustrank.lib.tasks import IngestQueueTask, row_task


@row_task
def ranking_run(run_id: int) -> str:
    """Execute one queued RankingRun (a second delivery finds it claimed and does nothing)."""
    from trustrank.ranking.services.runs import ranking_run_execute

    return ranking_run_execute(run_id=int(run_id))


@shared_task(base=IngestQueueTask, acks_late=True)
def ranking_runs_sweep() -> int:
    """Beat: start runs whose debounce delay passed but whose message was lost."""
    from trustrank.ranking.services.requests import ranking_runs_sweep as sweep

    return sweep()
