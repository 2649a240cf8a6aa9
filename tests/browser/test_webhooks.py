"""In a real browser: a team admin adds a webhook on the settings page, sends a test ping,
and watches its delivery fail once (the receiver answers 500) and succeed on the retry;
then changes its events, disables and deletes it."""

from __future__ import annotations

import pytest

from tests.conftest import WebServer
from tests.notify.helpers import Receiver
from trustrank.notify.models import Delivery, Webhook

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ENV = {"TRUSTRANK_OUTBOUND_ALLOW_PRIVATE": "1", "TRUSTRANK_WEBHOOK_RETRY_BASE_SECONDS": "3"}


def test_admin_adds_a_webhook_pings_it_and_sees_the_retry(
    team, make_user, start_worker, browser_page, tmp_path
):
    make_user("alice", team=team)
    receiver = Receiver(answers=[500])
    server = WebServer(log_path=tmp_path / "gunicorn.log", extra_env=ENV)
    try:
        start_worker(**ENV)
        page = browser_page
        page.goto(f"{server.url}/settings/webhooks/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "pw-alice")
        page.click("button[type=submit]")
        page.wait_for_selector("#webhook-add")
        assert page.locator("header a[href='/settings/webhooks/']").count() == 1

        page.fill("#webhook-add input[name=url]", receiver.url)
        page.check("#webhook-add input[name=events][value='finding.immediate']")
        page.select_option("#webhook-add select[name=format]", "json")
        page.fill("#webhook-add input[name=secret]", "browser-secret")
        page.click("#webhook-add button[type=submit]")
        page.wait_for_selector("#webhook-actions")
        hook = Webhook.objects.get()
        assert hook.team_id == team.pk and hook.events == ["finding.immediate"]
        assert "browser-secret" not in page.content()

        page.click("#webhook-actions button:text('Send a test ping')")
        # The first attempt fails with 500 and waits to be retried...
        page.wait_for_selector("#deliveries tr[data-status='retrying']", timeout=60_000)
        row = page.locator("#deliveries tbody tr").first
        assert "500" in row.inner_text() and "ping" in row.inner_text()
        # ... then the retry is delivered (the table refreshes itself).
        page.wait_for_selector("#deliveries tr[data-status='delivered']", timeout=60_000)
        row = page.locator("#deliveries tbody tr").first
        assert "200" in row.inner_text()
        assert row.locator("td.attempts").inner_text() == "2"
        assert receiver.count == 2 and receiver.requests[1].signed_by("browser-secret")
        assert Delivery.objects.get().status == "delivered"

        page.check("#webhook-events input[name=events][value='job.failed']")
        page.click("#webhook-events button[type=submit]")
        page.wait_for_selector("#webhook-actions")
        hook.refresh_from_db()
        assert sorted(hook.events) == ["finding.immediate", "job.failed"]

        page.click("#webhook-actions button:text('Disable')")
        page.wait_for_selector("#webhook-actions button:text('Enable')")
        hook.refresh_from_db()
        assert not hook.enabled

        page.click("#webhook-actions button:text('Delete')")
        page.wait_for_selector("#webhooks")
        assert not Webhook.objects.exists()
    finally:
        server.stop()
        receiver.stop()
