"""In a real browser: log in and find the components of an SBOM that the API ingested."""

from __future__ import annotations

import pytest
import requests

from ingest.models import IngestJob, JobStatus
from tests.conftest import DATA, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_person_finds_ingested_components_on_the_project_page(
    team, make_user, make_key, web_server, celery_worker, browser_page, tmp_path
):
    make_user("alice", team=team)
    key = make_key(team, "sbom:write")
    response = requests.post(
        f"{web_server.url}/api/v1/sboms",
        params={"projectName": "dependency-track", "projectVersion": "4.5.0", "autoCreate": "true"},
        data=(DATA / "sbom" / "cdx-1.4_maven_dependency-track-apiserver-4.5.0.json").read_bytes(),
        headers={"X-Api-Key": key, "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    wait_for(
        lambda: IngestJob.objects.filter(pk=job_id, status=JobStatus.DONE).exists(), timeout=60
    )

    page = browser_page
    page.goto(f"{web_server.url}/projects/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    page.click("text=dependency-track")
    page.wait_for_selector("h1:has-text('dependency-track')")
    assert page.locator("text=132 total").first.is_visible()

    # Typing in the search box narrows the table through htmx, without a full reload.
    page.fill("input[name=q]", "jackson-databind")
    page.wait_for_function(
        "() => document.querySelectorAll('#components tbody tr').length === 1"
    )
    row = page.locator("#components tbody tr").first
    assert "jackson-databind" in row.inner_text()
    assert "pkg:maven/com.fasterxml.jackson.core/jackson-databind@" in row.inner_text()
    assert "jackson-databind" in page.url  # the search is in the address bar (hx-push-url)

    # The job that ingested it is on the jobs page, done.
    page.goto(f"{web_server.url}/jobs/")
    assert page.locator(f"tr[data-job='{job_id}'] .badge").inner_text() == "done"
    page.screenshot(path=str(tmp_path / "jobs.png"))
