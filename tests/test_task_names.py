"""Renamed Celery tasks keep answering to their old names: messages queued before a deploy
(and beat entries of an old schedule file) must still run."""

from __future__ import annotations

import pytest

from trustrank.celery import app

OLD_NAMES = (
    "trustrank.vulns.tasks.findings_match_project_version",
    "trustrank.vulns.tasks.feeds_import_scheduled",
)
NEW_NAMES = (
    "trustrank.vulns.tasks.vulns_findings_match",
    "ingest.tasks.ingest_feed_import_scheduled",
    "ingest.tasks.ingest_job_run",
    "ingest.tasks.ingest_jobs_sweep",
    "trustrank.jobs.tasks.jobs_run",
    "trustrank.jobs.tasks.jobs_sweep",
    "trustrank.ranking.tasks.ranking_run",
    "trustrank.cluster.tasks.replay_run",
    "trustrank.exports.tasks.exports_run",
    "trustrank.findings.tasks.findings_bulk_triage",
    "trustrank.notify.tasks.notify_retention",
)


@pytest.mark.parametrize("name", OLD_NAMES + NEW_NAMES)
def test_task_is_registered(name: str) -> None:
    app.loader.import_default_modules()
    assert name in app.tasks
