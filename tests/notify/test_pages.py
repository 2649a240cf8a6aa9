"""The webhooks pages: team admins only, another team's webhook 404, bad input shown on the
form with nothing stored, the secret never on a page."""

from __future__ import annotations

import pytest

from trustrank.accounts.models import Role
from trustrank.notify.models import NotifyBatch, Webhook

pytestmark = pytest.mark.django_db

URL = "https://93.184.215.14/hook"


def test_an_admin_adds_a_webhook_on_the_page(client, team, make_user):
    client.force_login(make_user("alice", team=team))
    page = client.get("/settings/webhooks/")
    assert page.status_code == 200 and b'id="webhook-add"' in page.content
    resp = client.post("/settings/webhooks/", {
        "url": URL, "events": ["finding.immediate", "gate.failed"], "format": "json",
        "secret": "page-secret",
    })
    hook = Webhook.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/settings/webhooks/{hook.pk}/"
    assert hook.events == ["finding.immediate", "gate.failed"] and hook.team_id == team.pk
    detail = client.get(f"/settings/webhooks/{hook.pk}/")
    assert detail.status_code == 200 and b"page-secret" not in detail.content
    assert client.post(f"/settings/webhooks/{hook.pk}/ping/").status_code == 302
    assert NotifyBatch.objects.filter(source="ping", ref_id=hook.pk).count() == 1


def test_a_refused_url_is_shown_on_the_form_and_nothing_is_stored(client, team, make_user):
    client.force_login(make_user("alice", team=team))
    resp = client.post("/settings/webhooks/", {
        "url": "http://169.254.169.254/latest/", "events": ["job.failed"], "format": "json",
        "secret": "s",
    })
    assert resp.status_code == 200 and b"link-local" in resp.content
    assert not Webhook.objects.exists()


def test_a_viewer_cannot_manage_webhooks(client, team, make_user):
    hook = Webhook.objects.create(team=team, url=URL, events=["job.failed"], secret="x")
    client.force_login(make_user("vic", team=team, role=Role.VIEWER))
    page = client.get("/settings/webhooks/")
    assert b"Only team admins manage webhooks" in page.content and URL.encode() not in page.content
    assert client.get(f"/settings/webhooks/{hook.pk}/").status_code == 404
    assert client.post(f"/settings/webhooks/{hook.pk}/delete/").status_code == 404
    client.post("/settings/webhooks/", {"url": URL, "events": ["job.failed"],
                                         "format": "json", "secret": "s"})
    assert Webhook.objects.count() == 1


def test_another_teams_webhook_is_not_found(client, team, other_team, make_user):
    theirs = Webhook.objects.create(team=other_team, url=URL, events=["job.failed"], secret="x")
    client.force_login(make_user("alice", team=team))
    for path in (f"/settings/webhooks/{theirs.pk}/",
                 f"/settings/webhooks/{theirs.pk}/deliveries/"):
        assert client.get(path).status_code == 404
    for action in ("delete", "disable", "ping"):
        assert client.post(f"/settings/webhooks/{theirs.pk}/{action}/").status_code == 404
    assert Webhook.objects.get(pk=theirs.pk).enabled


def test_an_unknown_action_is_not_found(client, team, make_user):
    hook = Webhook.objects.create(team=team, url=URL, events=["job.failed"], secret="x")
    client.force_login(make_user("alice", team=team))
    assert client.post(f"/settings/webhooks/{hook.pk}/explode/").status_code == 404
