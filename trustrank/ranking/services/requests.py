"""Requesting ranking runs: on demand, debounced after loads and feed imports, and the
beat sweep that re-queues lost or stale runs."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trustrank.jobs.models import JobClass
from trustrank.jobs.runner import job_enqueue_on_commit
from trustrank.lib.locks import advisory_xact_lock
from trustrank.ranking.models import RankingRun, RunStatus

log = logging.getLogger(__name__)


def ranking_run_request(
    *,
    team_id: int,
    trigger: str,
    requested_by: Any = None,
    delay_seconds: int | None = None,
    job_class: str = JobClass.INTERACTIVE,
) -> RankingRun:
    """A queued run for the team: the one already waiting (loads in quick succession share
    it), or a new one that starts after the debounce delay. Enqueued on commit.
    `requested_by` is a Principal, or a label (a command, the system).
    A team's own re-rank is interactive; the periodic and feed-wide ones are batch work,
    and an interactive request for a team whose batch run waits makes it interactive."""
    delay = settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS if delay_seconds is None else delay_seconds
    with transaction.atomic():
        # One queued run per team: serialise requests of one team on an advisory lock.
        advisory_xact_lock(f"ranking:{team_id}")
        run = RankingRun.objects.filter(team_id=team_id, status=RunStatus.QUEUED).first()
        if run is not None:
            changed = []
            if delay == 0 and run.not_before > timezone.now():
                run.not_before = timezone.now()
                changed.append("not_before")
            if job_class == JobClass.INTERACTIVE and run.job_class == JobClass.BATCH:
                run.job_class = JobClass.INTERACTIVE
                changed.append("job_class")
            if changed:
                run.enqueued_at = timezone.now()
                run.save(update_fields=[*changed, "enqueued_at"])
                job_enqueue_on_commit(run)
            return run
        run = RankingRun(
            team_id=team_id,
            trigger=trigger[:64],
            not_before=timezone.now() + timedelta(seconds=delay),
            job_class=job_class,
            enqueued_at=timezone.now(),
        )
        if requested_by is None or isinstance(requested_by, str):
            run.requested_by_label = (requested_by or "system")[:160]
        else:
            run.requested_by_set(requested_by)
        run.save(force_insert=True)
        job_enqueue_on_commit(run, countdown=max(0, delay))
    return run


def ranking_after_load(
    *, team_id: int, what: str, job_class: str = JobClass.INTERACTIVE
) -> None:
    """Evidence changed: rank again after the debounce delay (never fails the load)."""
    try:
        ranking_run_request(team_id=team_id, trigger=f"after {what}", job_class=job_class)
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
        ranking_after_load(team_id=team_id, what=what, job_class=JobClass.BATCH)


def ranking_runs_sweep() -> int:
    """Beat: rank again every team with open findings whose last run is older than the
    sweep interval (certificates expire and telemetry leaves the window while nothing is
    uploaded). Lost and stranded runs are the job system's sweep's (trustrank.jobs)."""
    from trustrank.findings.models import OPEN_STATES, Finding

    now = timezone.now()
    due = now - timedelta(seconds=settings.TRUSTRANK_RANKING_SWEEP_SECONDS)
    recent = set(
        RankingRun.objects.filter(created_at__gte=due).values_list("team_id", flat=True)
    )
    teams = set(
        Finding.objects.filter(state__in=OPEN_STATES).values_list("team_id", flat=True).distinct()
    )
    stale = sorted(teams - recent)
    for team_id in stale:
        ranking_after_load(team_id=team_id, what="periodic re-rank", job_class=JobClass.BATCH)
    return len(stale)
