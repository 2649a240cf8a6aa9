"""Whether the ranking has caught up with a project version's latest upload.

An upload is ranked in two steps, neither of which the gate can ask to be told about: the
SBOM ingest job loads it and matches it against the advisories in one transaction (it
stamps the SBOM's `matched_at`, and records an evidence change); then the ranking sweep
turns that change into a debounced ranking run (a job row). So the answer is complete when

1. the version's latest SBOM upload job is finished (a failed one is final too: the gate
   fails on it rather than judge the SBOM before);
2. the version's current SBOM has been matched (`Sbom.matched_at`: an SBOM stored before
   its job matched in the same transaction may still lack it);
3. a ranking run of the team that started after that upload finished is done; and
4. every open vulnerability finding of the version has a rank. A run that started after the
   upload but before the match committed (a deployment's own evidence change can start one)
   did not see the findings the match made; they are unranked until the next run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trustrank.findings.choices import OPEN_STATES, FindingKind
from trustrank.findings.models import Finding
from trustrank.gate.selectors import GateTarget, sbom_jobs_of
from trustrank.inventory.models import ProjectVersion, Sbom
from trustrank.jobs.models import JobStatus
from trustrank.ranking.models import RankingRun


@dataclass(frozen=True)
class Upload:
    """The version's latest SBOM upload job, as the answer shows it."""

    job_id: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    error: str

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job_id,
            "status": self.status,
            "created_at": self.created_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            **({"error": self.error} if self.error else {}),
        }


@dataclass(frozen=True)
class Progress:
    ready: bool
    # What is still being waited for, as a person reads it ('' when ready).
    waiting_for: str
    upload: Upload | None


def _upload(job: Any) -> Upload:
    return Upload(job_id=str(job.pk), status=job.status, created_at=job.created_at,
                  finished_at=job.finished_at, error=job.error if job.status == "failed" else "")


def latest_upload(pv: ProjectVersion) -> Upload | None:
    since = None
    if pv.current_sbom_id is not None:
        # Every later upload of the version was created after the one that made the current
        # SBOM: the walk of the team's jobs stops there.
        since = (
            Sbom.objects.filter(pk=pv.current_sbom_id)
            .values_list("job__created_at", flat=True)
            .first()
        )
    job = sbom_jobs_of(
        team_id=pv.project.team_id, project=pv.project.name, version=pv.version,
        version_uuid=str(pv.uuid), since=since,
    ).first()
    return None if job is None else _upload(job)


def _sbom_matched(sbom_id: int) -> bool:
    # Set by every whole match of the version's current SBOM (vulns.services.matching), even
    # one that found no package to look up; the upload token's `processing` reads it too.
    return Sbom.objects.filter(pk=sbom_id, matched_at__isnull=False).exists()


def _run_state(team_id: int) -> str:
    run = (
        RankingRun.objects.filter(team_id=team_id)
        .order_by("-created_at", "-id")
        .values("pk", "status", "error", "not_before")
        .first()
    )
    if run is None:
        return "no ranking run has been requested yet"
    text = f"ranking run {run['pk']} is {run['status']}"
    if run["status"] == JobStatus.QUEUED and run["not_before"]:
        text += f" (starts after {run['not_before']:%H:%M:%S} UTC)"
    if run["status"] == JobStatus.FAILED and run["error"]:
        text += f": {run['error'][:200]}"
    return text


def gate_progress(target: GateTarget) -> Progress:
    """Where the ranking stands for the target's latest upload (a few indexed queries)."""
    pv = target.project_version
    if pv is None:
        job = target.pending_job
        return Progress(
            ready=False,
            waiting_for=f"SBOM upload job {job.pk} is {job.status}",
            upload=_upload(job),
        )
    upload = latest_upload(pv)
    if upload is not None and upload.status in (JobStatus.QUEUED, JobStatus.RUNNING):
        return Progress(False, f"SBOM upload job {upload.job_id} is {upload.status}", upload)
    if upload is not None and upload.status == JobStatus.FAILED:
        return Progress(True, "", upload)
    if pv.current_sbom_id is not None and not _sbom_matched(pv.current_sbom_id):
        return Progress(False, "the SBOM is being matched against the advisories", upload)
    team_id = pv.project.team_id
    if upload is not None and upload.finished_at is not None:
        ranked_after = RankingRun.objects.filter(
            team_id=team_id, status=JobStatus.DONE, started_at__gte=upload.finished_at
        ).exists()
        if not ranked_after:
            return Progress(
                False, f"no ranking run since the upload finished; {_run_state(team_id)}", upload
            )
    unranked = Finding.objects.filter(
        project_version=pv, kind=FindingKind.VULNERABILITY, state__in=OPEN_STATES,
        ranked__isnull=True,
    ).count()
    if unranked:
        return Progress(
            False, f"{unranked} open finding(s) not ranked yet; {_run_state(team_id)}", upload
        )
    return Progress(True, "", upload)
