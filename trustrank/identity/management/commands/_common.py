"""Shared by the identity import commands."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.management.base import CommandError

from ingest.models import IngestJob
from ingest.services import job_run
from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal


@dataclass(frozen=True)
class CommandPrincipal(Principal):
    """An operator at the console: may write certificates for the team named."""

    command: str = "manage.py"

    @property
    def label(self) -> str:
        return f"command:{self.command}"


def principal_for_team(*, team_name: str, command: str) -> tuple[Team, CommandPrincipal]:
    team = Team.objects.filter(name=team_name).first()
    if team is None:
        raise CommandError(f"no team named {team_name!r}")
    scopes = frozenset({Scope.CERTS_WRITE, Scope.READ})
    return team, CommandPrincipal(scopes_by_team={team.pk: scopes}, command=command)


def run_here(job: IngestJob) -> IngestJob:
    """Run the job in this process (a worker that gets the message later finds it done)."""
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    return job
