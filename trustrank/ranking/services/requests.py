"""Requesting ranking runs: on demand, debounced after evidence changed, and periodically.

Loads never call this module: they record that a team's evidence changed
(trustrank.findings.services.evidence), and `ranking_evidence_sweep`, run by beat every few
seconds, turns the recorded changes into debounced runs here."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trustrank.jobs.models import JobClass
from trustrank.jobs.send import job_enqueue_on_commit
from trustrank.lib.locks import advisory_xact_lock
from trustrank.ranking.models import RankingRun, RunStatus

log = logging.getLogger(__name__)


def ranking_run_request(
    *,
    team_id: int,
    trigger: str,
    requested_by: Any = None,
    delay_seconds: float | None = None,
    job_class: str = JobClass.INTERACTIVE,
) -> RankingRun:
    """A queued run for the team: the one already waiting (loads in quick succession share
    it), or a new one that starts after the debounce delay. A request with a shorter delay
    than the waiting run's brings it forward ("rank now"). Enqueued on commit.
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
            start = timezone.now() + timedelta(seconds=delay)
            if run.not_before > start:
                run.not_before = start
                changed.append("not_before")
            if job_class == JobClass.INTERACTIVE and run.job_class == JobClass.BATCH:
                run.job_class = JobClass.INTERACTIVE
                changed.append("job_class")
            if changed:
                run.enqueued_at = timezone.now()
                run.save(update_fields=[*changed, "enqueued_at"])
                job_enqueue_on_commit(run, countdown=max(0, delay))
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


def _teams_with_open_vulnerabilities() -> list[int]:
    from trustrank.findings.choices import OPEN_STATES
    from trustrank.findings.models import Finding

    return sorted(set(
        Finding.objects.filter(kind="vulnerability", state__in=OPEN_STATES)
        .values_list("team_id", flat=True)
        .distinct()
    ))


def _debounce_of(kind: str) -> float:
    """How long after a change of this kind of evidence its run starts: a trace window
    (the ingest kind "traces") TRUSTRANK_RANKING_TRACE_DEBOUNCE_SECONDS, so ranks move
    within seconds of the traffic that moved them; any other change
    TRUSTRANK_RANKING_DEBOUNCE_SECONDS."""
    if kind == "traces":
        return float(settings.TRUSTRANK_RANKING_TRACE_DEBOUNCE_SECONDS)
    return float(settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS)


def ranking_evidence_sweep() -> int:
    """Beat, every TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS: turn the evidence changes loads
    recorded into debounced runs, one per team, starting a debounce after the team's first
    change (so the changes within the delay share one run): `_debounce_of` its kind, the
    earliest start of the team's changes winning (a trace window brings an SBOM's run
    forward). A feed's change (no team) is every team's with open vulnerability findings,
    as batch work.

    The changes are taken and the runs requested in one transaction: a failure puts the
    changes back for the next sweep. A change recorded while the team's run is already
    running finds no queued run, so it gets a run of its own after that one. Returns the
    number of teams asked for."""
    from trustrank.findings.services.evidence import evidence_changes_take

    with transaction.atomic():
        changes = evidence_changes_take()
        if not changes:
            return 0
        now = timezone.now()
        # team -> (when its run may start, what asked for that, interactive?)
        wanted: dict[int, tuple[Any, str, bool]] = {}
        for change in changes:  # oldest first: of equal starts the first change wins
            start = change.at + timedelta(seconds=_debounce_of(change.kind))
            teams = (
                [change.team_id] if change.team_id is not None
                else _teams_with_open_vulnerabilities()
            )
            for team_id in teams:
                at, what, interactive = wanted.get(team_id, (start, change.what, False))
                if start < at:
                    at, what = start, change.what
                wanted[team_id] = (at, what, interactive or change.team_id is not None)
        for team_id, (at, what, interactive) in sorted(wanted.items()):
            ranking_run_request(
                team_id=team_id,
                trigger=f"after {what}",
                delay_seconds=max(0.0, (at - now).total_seconds()),
                job_class=JobClass.INTERACTIVE if interactive else JobClass.BATCH,
            )
    return len(wanted)


def ranking_runs_sweep() -> int:
    """Beat: rank again every team with open findings whose last run is older than the
    sweep interval (certificates expire and telemetry leaves the window while nothing is
    uploaded). Lost and stranded runs are the job system's sweep's (trustrank.jobs)."""
    from trustrank.findings.choices import OPEN_STATES
    from trustrank.findings.models import Finding

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
        try:
            ranking_run_request(
                team_id=team_id, trigger="after periodic re-rank", job_class=JobClass.BATCH
            )
        except Exception:  # one team's failure must not keep the others from their run
            log.exception("could not schedule a ranking run for team %s", team_id)
    return len(stale)
