"""Starting feed imports: the command (file, directory, zip), the schedule, path errors."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile

import pytest
from django.core.management import CommandError, call_command

from ingest.models import IngestJob, IngestPayload
from ingest.services import job_run
from ingest.submit import feed_scheduled_submit as feed_scheduled_import
from tests.conftest import ROOT, subprocess_env
from trustrank.vulns.models import Advisory

from .helpers import ADVISORIES

pytestmark = pytest.mark.django_db


def test_command_packs_a_directory_into_one_zip_job():
    out = io.StringIO()
    call_command("import_feed", "osv", str(ADVISORIES / "osv" / "npm"), stdout=out)
    job = IngestJob.objects.get()
    assert (
        job.kind == "osv"
        and job.team.name == "feeds"
        and job.requested_by_label == "system:import_feed"
    )
    data = bytes(IngestPayload.objects.get(job=job).data)
    assert len(zipfile.ZipFile(io.BytesIO(data)).namelist()) == 12
    job_run(job_id=str(job.pk))
    assert Advisory.objects.count() == 12
    assert str(job.pk) in out.getvalue()


def test_command_takes_single_files_and_refuses_bad_paths(tmp_path):
    call_command(
        "import_feed",
        "kev",
        str(ADVISORIES / "kev" / "known_exploited_vulnerabilities.json"),
        stdout=io.StringIO(),
    )
    assert IngestJob.objects.get().kind == "kev"
    with pytest.raises(CommandError, match="neither a file nor a directory"):
        call_command("import_feed", "osv", str(tmp_path / "missing"), stdout=io.StringIO())
    with pytest.raises(CommandError, match="takes one file"):
        call_command("import_feed", "epss", str(tmp_path), stdout=io.StringIO())
    with pytest.raises(CommandError, match="no team"):
        call_command(
            "import_feed",
            "kev",
            str(ADVISORIES / "kev" / "known_exploited_vulnerabilities.json"),
            "--team",
            "nobody",
            stdout=io.StringIO(),
        )


def test_schedule_reads_the_configured_source(settings):
    settings.TRUSTRANK_FEED_SOURCES = {
        "osv": "",
        "kev": "",
        "epss": str(next((ADVISORIES / "epss").glob("*.csv"))),
    }
    assert feed_scheduled_import(kind="osv") is None
    job = feed_scheduled_import(kind="epss")
    assert job is not None and job.kind == "epss" and job.requested_by_label == "system:schedule"
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    assert job.status == "done" and job.counts["rows"] == 200


def _beat_entries(**env: str) -> str:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(sorted(k for k in settings.CELERY_BEAT_SCHEDULE if k.startswith('vulns-feed')))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_beat_schedule_is_off_unless_a_source_is_configured():
    assert _beat_entries() == "[]"
    assert (
        _beat_entries(TRUSTRANK_FEED_KEV_SOURCE="https://example.org/kev.json")
        == "['vulns-feed-kev']"
    )
