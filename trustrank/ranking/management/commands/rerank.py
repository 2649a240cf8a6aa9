"""python manage.py rerank [--team T] [--wait]: rank a team's findings now."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from trustrank.accounts.models import Team
from trustrank.ranking.models import RankingRun, RunStatus
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.ranking.services.runs import ranking_run_execute


class Command(BaseCommand):
    help = "Rank the open findings of one team (or every team) with the current evidence."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", help="Team name (default: every team)")
        parser.add_argument(
            "--wait",
            action="store_true",
            help="Run here and wait for the result instead of leaving it to a worker",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        teams = Team.objects.order_by("name")
        if options["team"]:
            teams = teams.filter(name=options["team"])
            if not teams.exists():
                raise CommandError(f"no team named {options['team']!r}")
        failed = False
        for team in teams:
            run = ranking_run_request(
                team_id=team.pk, trigger="command", requested_by="command line", delay_seconds=0
            )
            if not options["wait"]:
                self.stdout.write(f"{team.name}: ranking run {run.pk} queued")
                continue
            ranking_run_execute(run_id=run.pk)
            # A worker may have claimed it first: wait for whoever runs it.
            deadline = time.monotonic() + 3600
            while True:
                run.refresh_from_db()
                if run.status in (RunStatus.DONE, RunStatus.FAILED):
                    break
                if time.monotonic() > deadline:
                    raise CommandError(f"ranking run {run.pk} did not finish within an hour")
                time.sleep(0.5)
            self._report(team, run)
            failed = failed or run.status == RunStatus.FAILED
        if failed:
            raise CommandError("a ranking run failed")

    def _report(self, team: Team, run: RankingRun) -> None:
        counts = run.counts or {}
        timings = run.timings or {}
        if run.status == RunStatus.FAILED:
            self.stderr.write(f"{team.name}: ranking run {run.pk} failed: {run.error}")
            return
        self.stdout.write(
            f"{team.name}: ranking run {run.pk} done — {counts.get('findings', 0)} findings "
            f"ranked, {counts.get('moved', 0)} moved "
            f"({'incremental' if run.incremental else 'full'}; gather "
            f"{timings.get('gather_s')} s, rank {timings.get('rank_s')} s, store "
            f"{timings.get('store_s')} s)"
        )
