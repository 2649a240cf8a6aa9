"""In a real browser: bulk triage from the findings list, and two analysts racing on one
finding (the second sees the first one's change and re-applies theirs)."""

from __future__ import annotations

import pytest

from tests.findings.helpers import many_findings
from trustrank.accounts.models import Role
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _login(page, url: str, username: str) -> None:
    page.goto(url)
    page.fill("#id_username", username)
    page.fill("#id_password", f"pw-{username}")
    page.click("button[type=submit]")


def test_bulk_triage_from_the_findings_page(team, make_user, web_server, browser_page):
    make_user("alice", team=team, role=Role.TRIAGER)
    ids = many_findings(team, 8, prefix="bt", package_name="left-pad")
    many_findings(team, 3, prefix="other")
    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 900})
    _login(page, f"{web_server.url}/findings/?q=left-pad", "alice")
    page.wait_for_selector("table.findings")
    assert page.locator("table.findings tbody tr").count() == 8

    # Two rows ticked, a state and an owner, one action.
    page.check(f"tr[data-finding='{ids[0]}'] input.row-select")
    page.check(f"tr[data-finding='{ids[1]}'] input.row-select")
    page.select_option("#bulk-form select[name=state]", "exploitable")
    page.select_option("#bulk-form select[name=assignee]", label="alice")
    page.fill("#bulk-form input[name=reason]", "reachable from the gateway")
    page.click("#bulk-apply")
    page.wait_for_selector("text=2 changed")
    row = page.locator(f"tr[data-finding='{ids[0]}']")
    assert "Exploitable" in row.locator("td.state").inner_text()
    assert "alice" in row.locator("td.assignee").inner_text()

    # Every finding the filter matches, beyond the ticked ones.
    assert page.locator("text=Select all 8 matching this filter").is_visible()
    page.check("#select-all-matching")
    page.select_option("#bulk-form select[name=state]", "resolved")
    page.fill("#bulk-form input[name=reason]", "upgraded everywhere")
    page.click("#bulk-apply")
    page.wait_for_selector("text=8 changed")
    assert "No findings match" in page.inner_text("#findings")  # open by default
    assert Finding.objects.filter(pk__in=ids, state="resolved").count() == 8
    assert Finding.objects.filter(state="in_triage").count() == 3
    assert AuditEvent.objects.filter(action="bulk_triaged").count() == 10
    assert AuditEvent.objects.filter(action="bulk_triage").count() == 2


def test_two_analysts_race_and_the_second_reapplies(team, make_user, web_server, browser_page):
    make_user("alice", team=team, role=Role.TRIAGER)
    make_user("bob", team=team, role=Role.TRIAGER)
    (finding_id,) = many_findings(team, 1, prefix="race")
    url = f"{web_server.url}/findings/{finding_id}/"

    alice = browser_page
    alice.set_viewport_size({"width": 1400, "height": 900})
    bob_context = alice.context.browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        bob = bob_context.new_page()
        bob.set_default_timeout(30_000)
        _login(alice, url, "alice")
        _login(bob, url, "bob")
        alice.wait_for_selector("#triage-form")
        bob.wait_for_selector("#triage-form")

        # Both have version 1 in their form; alice saves first.
        alice.select_option("#triage-form select[name=state]", "exploitable")
        alice.fill("#triage-form input[name=reason]", "exploit seen in the logs")
        alice.click("#triage-form button[type=submit]")
        alice.wait_for_selector("text=Triage saved.")

        bob.select_option("#triage-form select[name=state]", "false_positive")
        bob.fill("#triage-form input[name=reason]", "scanner noise")
        bob.click("#triage-form button[type=submit]")
        bob.wait_for_selector("#conflict")
        conflict = bob.inner_text("#conflict")
        assert "Someone else changed this finding" in conflict
        assert "alice" in conflict and "exploitable" in conflict
        assert "exploit seen in the logs" in conflict
        assert Finding.objects.get(pk=finding_id).state == "exploitable"

        bob.click("#reapply")
        bob.wait_for_selector("text=Triage saved.")
        f = Finding.objects.get(pk=finding_id)
        assert f.state == "false_positive" and f.version == 3
        assert "False positive" in bob.inner_text("#triage")
    finally:
        bob_context.close()
