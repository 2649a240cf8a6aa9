"""In a real browser at 1,400 px: choose a stored cluster on the replay page, watch the run
finish on the worker (htmx polling), and read which pod got the GPU first per policy."""

from __future__ import annotations

import pytest
import requests

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for

from .cluster_build import contended_objects

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_person_replays_a_stored_cluster_from_the_page(
    team, make_user, make_key, web_server, celery_worker, browser_page, tmp_path
):
    make_user("alice", team=team)
    key = make_key(team, "metrics:write")
    response = requests.post(
        f"{web_server.url}/api/v1/clusters/lab/objects", data=contended_objects(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    wait_for(lambda: IngestJob.objects.filter(status=JobStatus.DONE).exists(), timeout=60)

    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{web_server.url}/replay/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    page.select_option("#id_cluster", "lab")
    page.select_option("#id_mode", "timeline")
    page.select_option("#id_placement", "best_fit")
    page.click("button:has-text('Start replay')")
    page.wait_for_selector("h1:has-text('Replay run')")
    # The status fragment polls until the worker is done.
    page.wait_for_selector(".semantic-source", timeout=90_000)
    assert page.locator(".semantic-source").inner_text() == "cluster recommendations"
    assert page.locator("text=cluster lab's stored pods and nodes").first.is_visible()
    rows = page.locator("h3:has-text('First pods to start') + table tbody tr")
    assert rows.count() == 3
    semantic = rows.filter(has_text="Semantic-aware").inner_text()
    assert semantic.index("ml/web-5d9f-abcde") < semantic.index("ml/train-0")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    page.screenshot(path=str(tmp_path / "replay-cluster.png"), full_page=True)
