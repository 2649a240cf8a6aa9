"""In a real browser: a triage made through the API shows in the auditor's audit log, the
filters narrow it through htmx, and the chain is shown intact."""

from __future__ import annotations

import pytest
import requests

from trustrank.accounts.models import Role
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor, audit_event_record

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_auditor_reads_the_log_of_a_triage_made_through_the_api(
    team, make_user, make_key, web_server, browser_page, tmp_path
):
    make_user("audrey", team=team, role=Role.AUDITOR)
    finding = Finding.objects.create(team=team, kind="identity", source="certificate",
                                     fingerprint="cert-1", title="Certificate expired")
    audit_event_record(actor=Actor.system("identity check"), action="created",
                       team_id=team.pk, finding_id=finding.pk, reason="expired yesterday")
    key = make_key(team, "triage")
    response = requests.post(
        f"{web_server.url}/api/v1/findings/{finding.pk}/triage",
        json={"state": "exploitable", "reason": "served to customers"},
        headers={"X-Api-Key": key},
        timeout=30,
    )
    assert response.status_code == 200, response.text

    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{web_server.url}/audit/")
    page.fill("#id_username", "audrey")
    page.fill("#id_password", "pw-audrey")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Audit log')")
    assert page.locator("#audit-chain .badge").first.inner_text() == "intact"
    rows = page.locator("#audit-events tbody tr")
    assert rows.count() == 2
    assert "served to customers" in rows.first.inner_text()
    assert "api-key:test" in rows.first.inner_text()
    page.screenshot(path=str(tmp_path / "audit.png"), full_page=True)

    page.select_option("select[name=action]", ["created"])
    page.click("form.filters button[type=submit]")
    page.wait_for_function(
        "() => document.querySelectorAll('#audit-events tbody tr').length === 1"
        " && document.querySelector('#audit-events tbody tr').innerText.includes('expired')"
    )
    assert "action=created" in page.url
    # The auditor cannot change anything the page shows.
    assert page.locator("text=Issue key").count() == 0
