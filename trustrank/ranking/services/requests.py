"""Requesting ranking runs: on demand, debounced after loads and feed imports, and the
beat sweep that re-queues lost or stale runs."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from trustrank.ranking.models import RankingRun, RunStatus

log = logging.getLogger(__name__)


def ranking_run_request(
    *, team_id: int, trigger: str, requested_by: str = "system", delay_seconds: int | None = None
) -> RankingRun:
    """A queued run for the team: the one already waiting (loads in quick succession share
    it), or a new one that starts after the debounce delay. Enqueued on commit."""
    from trustrank.ranking.tasks import ranking_run

    delay = settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS if delay_seconds is None else delay_seconds
    with transaction.atomic():
        # One queued run per team: serialise requests of one team on an advisory lock.
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"ranking:{team_id}"]
            )
        run = RankingRun.objects.filter(team_id=team_id, status=RunStatus.QUEUED).first()
        if run is not None:
            if delay == 0 and run.not_before > timezone.now():
                run.not_before = timezone.now()
                run.save(update_fields=["not_before"])
                waiting_id = run.pk
                transaction.on_commit(lambda: ranking_run.apply_async(args=[waiting_id]))
            return run
        run = RankingRun.objects.create(
            team_id=team_id,
            trigger=trigger[:64],
            requested_by=requested_by[:160],
            not_before=timezone.now() + timedelta(seconds=delay),
        )
        run_id = run.pk
        transaction.on_commit(
            lambda: ranking_run.apply_async(args=[run_id], countdown=max(0, delay))
        )
    return run


def ranking_after_load(*, team_id: int, what: str) -> None:
    """Evidence changed: rank again after the debounce delay (never fails the load)."""
    try:
        ranking_run_request(team_id=team_id, trigger=f"after {what}")
    except Exception:  # a load must not fail because ranking could not be scheduled
        log.exception("could not schedule a ranking run for team %s", team_id)


def ranking_after_feed(*, what: str) -> None:
    """Feeds are shared: every team with open vulnerability findings ranks again."""
    from trustrank.findings.models import OPEN_STATES, Finding

    team_ids = (
        Finding.objects.filter(kind="vulnerability", state__in=OPEN_STATES)
        .values_list("team_id", flat=True)
        .distinct()
    )
    for team_id in sorted(set(team_ids)):
        ranking_after_load(team_id=team_id, what=what)


# A run still "running" this long after it started lost its worker: it is queued again.
_RUN_LEASE = timedelta(hours=1)


def ranking_runs_sweep() -> int:
    """Beat: re-queue runs whose worker died, re-send lost messages, and rank again every
    team with open findings whose last run is older than the sweep interval (certificates
    expire and telemetry leaves the window while nothing is uploaded)."""
    from trustrank.findings.models import OPEN_STATES, Finding
    from trustrank.ranking.tasks import ranking_run

    now = timezone.now()
    RankingRun.objects.filter(status=RunStatus.RUNNING, started_at__lt=now - _RUN_LEASE).update(
        status=RunStatus.QUEUED, not_before=now, phase=""
    )
    stale = now - timedelta(seconds=settings.TRUSTRANK_JOB_REQUEUE_SECONDS)
    ids = list(
        RankingRun.objects.filter(status=RunStatus.QUEUED, not_before__lt=stale).values_list(
            "pk", flat=True
        )
    )
    for run_id in ids:
        ranking_run.apply_async(args=[run_id])
    due = now - timedelta(seconds=settings.TRUSTRANK_RANKING_SWEEP_SECONDS)
    recent = set(
        RankingRun.objects.filter(created_at__gte=due).values_list("team_id", flat=True)
    )
    teams = set(
        Finding.objects.filter(state__in=OPEN_STATES).values_list("team_id", flat=True).distinct()
    )
    for team_id in sorted(teams - recent):
        ranking_after_load(team_id=team_id, what="periodic re-rank")
    return len(ids)

