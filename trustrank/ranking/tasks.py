"""Thin Celery tasks for ranking runs: ids in, the service does the work."""

from __future__ import annotations

from celery import shared_task

from trustrank.lib.tasks import IngestQueueTask


@shared_task(acks_late=True, reject_on_worker_lost=True)
def ranking_run(run_id: int) -> str:
    """The name ranking runs were sent under before the one job system: messages queued
    under it still run (through the job runner)."""
    from trustrank.ranking.services.runs import ranking_run_execute

    return ranking_run_execute(run_id=int(run_id))


@shared_task(base=IngestQueueTask, acks_late=True)
def ranking_runs_sweep() -> int:
    """Beat: rank again the teams whose evidence aged since their last run."""
    from trustrank.ranking.services.requests import ranking_runs_sweep as sweep

    return sweep()


@shared_task(base=IngestQueueTask, acks_late=True)
def ranking_evidence_sweep() -> int:
    """Beat, every few seconds: the evidence changes loads recorded become debounced runs."""
    from trustrank.ranking.services.requests import ranking_evidence_sweep as sweep

    return sweep()
