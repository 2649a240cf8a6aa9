"""Shared by the import_* commands."""

from __future__ import annotations

from django.core.management.base import CommandError

from ingest.models import IngestJob
from ingest.services import job_run
from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import SystemPrincipal, principal_for_command


def principal_for_team(*, team_name: str, command: str) -> tuple[Team, SystemPrincipal]:
    """An operator at the console: may write certificates for the team named."""
    team = Team.objects.filter(name=team_name).first()
    if team is None:
        raise CommandError(f"no team named {team_name!r}")
    scopes = frozenset({Scope.CERTS_WRITE, Scope.READ})
    return team, principal_for_command(team_id=team.pk, command=command, scopes=scopes)


def run_here(job: IngestJob) -> IngestJob:
    """Run the job in this process (a worker that gets the message later finds it done)."""
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    return job
