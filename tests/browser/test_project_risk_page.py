"""In a real browser: a project's risk, its charts and its findings (filtered through htmx),
and the findings grouped by fix."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.inventory.test_project_risk import finding
from trustrank.inventory.models import Project

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_person_reads_a_projects_risk_and_what_to_upgrade(
    team, make_user, web_server, browser_page
):
    make_user("alice", team=team)
    shop = Project.objects.create(team=team, name="shop")
    now = timezone.now()
    finding(team, shop, severity="critical", first_seen=now - timedelta(days=9), kev=True,
            due=now.date() - timedelta(days=1), decision="immediate", rank=1,
            vuln="GHSA-open-0001")
    finding(team, shop, severity="high", state="resolved", first_seen=now - timedelta(days=6),
            resolved_at=now - timedelta(days=2), vuln="GHSA-done-0001")

    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{web_server.url}/projects/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    row = page.locator("tr:has-text('shop')").first
    assert "1 KEV" in row.inner_text() and "1 overdue" in row.inner_text()
    page.click("text=shop")
    page.wait_for_selector("h1:has-text('shop')")
    assert page.locator("#risk-summary polyline").count() == 1
    assert page.locator("#risk-summary g.bar").count() == 1  # MTTR: one severity resolved
    table = page.locator("#project-findings")
    assert "GHSA-open-0001" in table.inner_text()
    assert "GHSA-done-0001" not in table.inner_text()

    # Closed findings through htmx: the table changes, the page does not reload.
    page.select_option("select[name=open]", "false")
    page.click("#project-findings >> xpath=.. >> button[type=submit]")
    page.wait_for_function(
        "() => document.querySelector('#project-findings').innerText.includes('GHSA-done-0001')"
    )
    assert "GHSA-open-0001" not in table.inner_text()
    assert page.locator("#risk-summary").is_visible()
    assert "open=false" in page.url

    page.click("text=what to upgrade")
    page.wait_for_selector("h1:has-text('grouped by fix')")
    assert page.locator("#groups tbody tr").count() == 1
