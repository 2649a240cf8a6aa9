"""In a real browser at 1,400 px: the jobs list fits the window whatever the jobs contain."""

from __future__ import annotations

import pytest

from ingest.models import IngestJob, JobKind, JobStatus

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_jobs_page_fits_a_1400px_window(team, make_user, web_server, browser_page):
    make_user("alice", team=team)
    # Long unbreakable text in each wrapping column: a file name, a project name, an error
    # with a path, the submitter.
    IngestJob.objects.create(
        team=team, kind=JobKind.OSV, status=JobStatus.FAILED, digest="0" * 64,
        filename="osv-" + "x" * 150 + ".zip",
        submitter_label="api-key:" + "k" * 80,
        error="Traceback: /usr/lib/python3/site-packages/" + "deep/" * 30 + "module.py ValueError",
    )
    IngestJob.objects.create(
        team=team, kind=JobKind.SBOM, status=JobStatus.DONE, digest="1" * 64,
        params={"projectName": "org.example." + "subgroup." * 12 + "artifact",
                "projectVersion": "1.0.0-SNAPSHOT+build." + "9" * 40},
        counts={"findings_advisories_considered": 1234567, "components": 99},
    )
    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{web_server.url}/jobs/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    page.wait_for_selector("tbody tr[data-job]")
    assert page.locator("tr[data-job]").count() == 2
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= 1400, f"the jobs page is {scroll_width} px wide"
