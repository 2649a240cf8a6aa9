"""The webhooks API: scope `admin`, validation naming what is wrong (nothing stored), the
secret never returned, another team's webhook 404, deliveries newest first."""

from __future__ import annotations

import pytest
from django.utils import timezone

from trustrank.notify.models import Delivery, NotifyBatch, NotifyEvent, Webhook

pytestmark = pytest.mark.django_db

URL = "https://93.184.215.14/hook"
GOOD = {"url": URL, "events": ["finding.immediate", "job.failed"], "secret": "s3cret-value"}


def _post(client, body):
    return client.post("/api/v1/webhooks", body, format="json")


def test_an_admin_adds_a_webhook_and_the_secret_is_never_returned(api, team):
    admin = api(team, "admin")
    resp = _post(admin, {**GOOD, "format": "slack"})
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["id"] and body["format"] == "slack" and body["events"] == GOOD["events"]
    assert "secret" not in body and b"s3cret-value" not in resp.content
    hook = Webhook.objects.get(pk=body["id"])
    assert hook.team_id == team.pk and hook.secret == "s3cret-value" and hook.enabled
    for path in ("/api/v1/webhooks", f"/api/v1/webhooks/{hook.pk}"):
        got = admin.get(path)
        assert got.status_code == 200 and b"s3cret-value" not in got.content
    assert admin.get("/api/v1/webhooks").json()["count"] == 1


@pytest.mark.parametrize(("body", "param"), [
    ({**GOOD, "url": "ftp://example.com/x"}, "url"),
    ({**GOOD, "url": "https:///nohost"}, "url"),
    ({**GOOD, "url": "http://127.0.0.1:8080/x"}, "url"),
    ({**GOOD, "url": "http://169.254.169.254/latest/meta-data/"}, "url"),
    ({**GOOD, "url": "http://localhost/x"}, "url"),
    ({**GOOD, "events": []}, "events"),
    ({**GOOD, "events": "finding.immediate"}, "events"),
    ({**GOOD, "events": ["finding.immediate", "finding.exploded"]}, "events"),
    ({**GOOD, "format": "teams"}, "format"),
    ({**GOOD, "colour": "red"}, "colour"),
    ({**GOOD, "secret": ""}, "secret"),
    ({**GOOD, "jira_project_key": "SEC"}, "jira_project_key"),
    ({"url": URL, "events": ["job.failed"]}, "secret"),
])
def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(api, team, body, param):
    resp = _post(api(team, "admin"), body)
    assert resp.status_code == 400, resp.content
    problem = resp.json()
    assert problem["param"] == param and param in problem["detail"]
    assert resp["Content-Type"].startswith("application/problem+json")
    assert not Webhook.objects.exists()


def test_unknown_event_and_format_are_named(api, team):
    admin = api(team, "admin")
    detail = _post(admin, {**GOOD, "events": ["finding.exploded"]}).json()["detail"]
    assert "finding.exploded" in detail
    assert "teams" in _post(admin, {**GOOD, "format": "teams"}).json()["detail"]


def test_jira_format_takes_its_extra_fields(api, team):
    resp = _post(api(team, "admin"), {**GOOD, "format": "jira", "jira_project_key": "SEC",
                                      "jira_user": "bot@example.com"})
    assert resp.status_code == 201, resp.content
    assert resp.json()["jira_project_key"] == "SEC"


def test_every_route_needs_the_admin_scope(api, team, client):
    hook = Webhook.objects.create(team=team, url=URL, events=["job.failed"], secret="x")
    reader = api(team, "read", "triage", "sbom:write")
    for method, path in [("get", "/api/v1/webhooks"), ("post", "/api/v1/webhooks"),
                         ("get", f"/api/v1/webhooks/{hook.pk}"),
                         ("patch", f"/api/v1/webhooks/{hook.pk}"),
                         ("delete", f"/api/v1/webhooks/{hook.pk}"),
                         ("get", f"/api/v1/webhooks/{hook.pk}/deliveries")]:
        assert getattr(reader, method)(path, {}, format="json").status_code == 403, path
        assert getattr(client, method)(path).status_code in (401, 403), path
    assert Webhook.objects.filter(pk=hook.pk).exists()


def test_another_teams_webhook_is_not_found(api, team, other_team):
    theirs = Webhook.objects.create(team=other_team, url=URL, events=["job.failed"], secret="x")
    mine = api(team, "admin")
    for method in ("get", "patch", "delete"):
        resp = getattr(mine, method)(f"/api/v1/webhooks/{theirs.pk}", {"enabled": False},
                                     format="json")
        assert resp.status_code == 404, method
    assert mine.get(f"/api/v1/webhooks/{theirs.pk}/deliveries").status_code == 404
    assert mine.get("/api/v1/webhooks").json()["count"] == 0
    theirs.refresh_from_db()
    assert theirs.enabled


def test_patch_changes_only_what_is_given_and_validates_it(api, team):
    admin = api(team, "admin")
    hook_id = _post(admin, GOOD).json()["id"]
    resp = admin.patch(f"/api/v1/webhooks/{hook_id}",
                       {"events": ["gate.failed"], "enabled": False}, format="json")
    assert resp.status_code == 200 and resp.json()["events"] == ["gate.failed"]
    assert resp.json()["enabled"] is False and resp.json()["url"] == URL
    bad = admin.patch(f"/api/v1/webhooks/{hook_id}", {"events": ["nope"], "enabled": True},
                      format="json")
    assert bad.status_code == 400 and bad.json()["param"] == "events"
    assert not Webhook.objects.get(pk=hook_id).enabled  # nothing partial
    assert admin.patch(f"/api/v1/webhooks/{hook_id}", {"secret": "new"},
                       format="json").status_code == 200
    assert Webhook.objects.get(pk=hook_id).secret == "new"
    assert admin.patch(f"/api/v1/webhooks/{hook_id}", {"id": 5},
                       format="json").json()["param"] == "id"


def test_delete_removes_the_webhook(api, team):
    admin = api(team, "admin")
    hook_id = _post(admin, GOOD).json()["id"]
    assert admin.delete(f"/api/v1/webhooks/{hook_id}").status_code == 204
    assert admin.get(f"/api/v1/webhooks/{hook_id}").status_code == 404


def test_deliveries_are_listed_newest_first_and_paginated(api, team):
    admin = api(team, "admin")
    hook = Webhook.objects.create(team=team, url=URL, events=["job.failed"], secret="x")
    batch = NotifyBatch.objects.create(team=team, source="events", event="job.failed")
    event = NotifyEvent.objects.create(batch=batch, team=team, event="job.failed", payload={})
    now = timezone.now()
    made = [
        Delivery.objects.create(webhook=hook, notify_event=event, event="job.failed",
                                created_at=now - timezone.timedelta(minutes=i),
                                status="retrying", attempts=i, response_code=500,
                                next_attempt_at=now)
        for i in range(3)
    ]
    page = admin.get(f"/api/v1/webhooks/{hook.pk}/deliveries?page_size=2").json()
    assert page["count"] == 3 and page["next"]
    assert [d["id"] for d in page["results"]] == [str(made[0].uuid), str(made[1].uuid)]
    first = page["results"][0]
    assert (first["status"], first["response_code"], first["attempts"]) == ("retrying", 500, 0)
    assert first["next_retry_at"] is not None
