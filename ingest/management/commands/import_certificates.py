from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ingest.errors import SubmitRefused
from ingest.management.commands._common import principal_for_team, run_here
from ingest.submit import certificates_submit


class Command(BaseCommand):
    help = (
        "Upload certificate files (PEM, one or many per file, or DER) for a team's "
        "environment. Each file becomes one ingest job."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", help="PEM or DER certificate files")
        parser.add_argument("--team", required=True, help="team name")
        parser.add_argument("--environment", default="default")
        parser.add_argument("--service", default="", help="the service presenting them")
        parser.add_argument("--namespace", default="", help="that service's namespace")
        parser.add_argument("--observed", default="", help="where they were observed")
        parser.add_argument(
            "--run-now", action="store_true", help="process here instead of by a worker"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        team, principal = principal_for_team(
            team_name=options["team"], command="import_certificates"
        )
        failed = 0
        for name in options["files"]:
            path = Path(name)
            try:
                body = path.read_bytes()
            except OSError as exc:
                raise CommandError(f"{name}: {exc}") from exc
            try:
                job = certificates_submit(
                    principal=principal,
                    team=team,
                    body=body,
                    environment=options["environment"],
                    service=options["service"],
                    namespace=options["namespace"],
                    observed=options["observed"],
                    filename=path.name,
                )
            except SubmitRefused as exc:
                failed += 1
                self.stderr.write(f"{name}: refused: {exc.detail}")
                continue
            if options["run_now"]:
                job = run_here(job)
            self.stdout.write(
                f"{name}: job {job.pk} {job.status}"
                + (f" ({job.error})" if job.error else f" {job.counts or ''}")
            )
        if failed:
            raise CommandError(f"{failed} file(s) refused; nothing was stored for them")
