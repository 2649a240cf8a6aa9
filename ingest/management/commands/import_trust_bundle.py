from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ingest.errors import SubmitRefused
from ingest.management.commands._common import principal_for_team, run_here
from ingest.submit import trust_bundle_submit


class Command(BaseCommand):
    help = "Replace an environment's trust bundle (PEM CA certificates or SPIFFE bundle JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="PEM or SPIFFE bundle (JWKS JSON) file")
        parser.add_argument("--team", required=True, help="team name")
        parser.add_argument("--environment", default="default")
        parser.add_argument("--trust-domain", default="", help="the trust domain it serves")
        parser.add_argument(
            "--run-now", action="store_true", help="process here instead of by a worker"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        team, principal = principal_for_team(
            team_name=options["team"], command="import_trust_bundle"
        )
        path = Path(options["file"])
        try:
            body = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"{path}: {exc}") from exc
        try:
            job = trust_bundle_submit(
                principal=principal,
                team=team,
                body=body,
                environment=options["environment"],
                trust_domain=options["trust_domain"],
                filename=path.name,
            )
        except SubmitRefused as exc:
            raise CommandError(f"{path}: refused: {exc.detail}") from exc
        if options["run_now"]:
            job = run_here(job)
        self.stdout.write(
            f"{path}: job {job.pk} {job.status}"
            + (f" ({job.error})" if job.error else f" {job.counts or ''}")
        )
