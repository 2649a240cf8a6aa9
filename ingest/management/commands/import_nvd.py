"""python manage.py import_nvd FILE... [--wait] [--run-now] [--team NAME]

Each file is one NVD CVE API 2.0 page (an API answer or a yearly feed file), JSON or gzip
(told by its magic bytes; a `.gz` name that is not gzip is refused), queued as one `nvd`
feed job; the findings whose advisory has no CVSS take NVD's score afterwards."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ingest.management.commands._common import run_here
from ingest.models import IngestJob, JobStatus
from ingest.submit import feed_submit, nvd_page_check
from trustrank.accounts.models import SITE_SCOPES, Team
from trustrank.accounts.principal import principal_for_system
from trustrank.parsers.nvd import GZIP_MAGIC
from trustrank.vulns.services.feeds import FeedSourceError, feeds_team


def _read(name: str) -> bytes:
    path = Path(name)
    try:
        payload = path.read_bytes()
    except OSError as exc:
        raise CommandError(f"{name}: {exc.strerror or exc}") from exc
    if path.suffix == ".gz" and not payload.startswith(GZIP_MAGIC):
        raise CommandError(f"{name}: named .gz but not a gzip file")
    return payload


class Command(BaseCommand):
    help = "Import NVD CVE API 2.0 pages (JSON or gzip), one ingest job per file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", help="NVD CVE API 2.0 pages, .json or .json.gz")
        parser.add_argument("--wait", action="store_true", help="block until the jobs end")
        parser.add_argument("--timeout", type=float, default=3600.0, help="seconds, with --wait")
        parser.add_argument(
            "--run-now", action="store_true", help="process here instead of by a worker"
        )
        parser.add_argument("--team", default="", help="team that owns the jobs (default: feeds)")

    def handle(self, *args: Any, **options: Any) -> None:
        # Every file is read and checked before any job is queued: one bad file of several
        # queues none (feed_submit checks each again).
        payloads = [(name, _read(name)) for name in options["files"]]
        for name, payload in payloads:
            try:
                nvd_page_check(payload, filename=Path(name).name)
            except FeedSourceError as exc:
                raise CommandError(f"{name}: {exc}") from exc
        if options["team"]:
            team = Team.objects.filter(name=options["team"]).first()
            if team is None:
                raise CommandError(f"no team named {options['team']!r}")
        else:
            team = feeds_team()
        principal = principal_for_system(team_id=team.pk, name="import_nvd", scopes=SITE_SCOPES)
        jobs: list[IngestJob] = []
        for name, payload in payloads:
            try:
                job = feed_submit(
                    kind="nvd", payload=payload, principal=principal, team=team,
                    filename=Path(name).name,
                )
            except FeedSourceError as exc:
                raise CommandError(f"{name}: {exc}") from exc
            self.stdout.write(f"{name}: queued nvd import job {job.pk} ({len(payload)} bytes)")
            jobs.append(run_here(job) if options["run_now"] else job)
        if options["wait"] or options["run_now"]:
            self._wait(jobs, timeout=options["timeout"])

    def _wait(self, jobs: list[IngestJob], *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = {str(j.pk) for j in jobs}
        failed: list[str] = []
        while pending and time.monotonic() < deadline:
            for job in IngestJob.objects.filter(pk__in=pending):
                if job.status in (JobStatus.DONE, JobStatus.FAILED):
                    pending.discard(str(job.pk))
                    if job.status == JobStatus.FAILED:
                        failed.append(f"job {job.pk} ({job.filename}) failed: {job.error}")
                    else:
                        self.stdout.write(f"job {job.pk} ({job.filename}) done: {job.counts}")
            if pending:
                time.sleep(0.25)
        if failed:
            raise CommandError("; ".join(failed))
        if pending:
            raise CommandError(f"{len(pending)} job(s) did not finish within {timeout} s")
