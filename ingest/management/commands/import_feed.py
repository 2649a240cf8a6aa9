"""python manage.py import_feed {osv|kev|epss|nvd} PATH [--wait] [--team NAME]"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ingest.models import IngestJob, JobStatus
from ingest.submit import feed_submit
from trustrank.accounts.models import SITE_SCOPES, Team
from trustrank.accounts.principal import principal_for_system
from trustrank.vulns.services.feeds import (
    FEED_KINDS,
    FeedSourceError,
    feed_payload_read,
    feeds_team,
)


class Command(BaseCommand):
    help = "Queue an import of an OSV (file, directory or zip), CISA KEV or FIRST EPSS feed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=FEED_KINDS)
        parser.add_argument("path", help="a file, a directory of OSV records, or a zip")
        parser.add_argument("--wait", action="store_true", help="block until the job ends")
        parser.add_argument("--timeout", type=float, default=3600.0, help="seconds, with --wait")
        parser.add_argument("--team", default="", help="team that owns the job (default: feeds)")
        parser.add_argument(
            "--allow-shrink",
            action="store_true",
            help="accept a KEV catalog that removes most stored entries at once",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        kind, path = options["kind"], options["path"]
        try:
            payload, filename = feed_payload_read(kind=kind, path=path)
        except (FeedSourceError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        if options["team"]:
            team = Team.objects.filter(name=options["team"]).first()
            if team is None:
                raise CommandError(f"no team named {options['team']!r}")
        else:
            team = feeds_team()
        # Labelled "system:import_feed": feed imports are operators' work, whoever typed the
        # command; the site-wide feeds:write scope is what lets it change shared data.
        principal = principal_for_system(team_id=team.pk, name="import_feed", scopes=SITE_SCOPES)
        job = feed_submit(
            kind=kind,
            payload=payload,
            principal=principal,
            team=team,
            filename=filename,
            allow_shrink=options["allow_shrink"],
        )
        self.stdout.write(f"queued {kind} import job {job.pk} ({len(payload)} bytes)")
        if not options["wait"]:
            return
        deadline = time.monotonic() + options["timeout"]
        while time.monotonic() < deadline:
            job = IngestJob.objects.get(pk=job.pk)
            if job.status == JobStatus.DONE:
                self.stdout.write(f"job {job.pk} done: {job.counts}")
                return
            if job.status == JobStatus.FAILED:
                raise CommandError(f"job {job.pk} failed: {job.error}")
            time.sleep(0.25)
        raise CommandError(f"job {job.pk} did not finish within {options['timeout']} s")
