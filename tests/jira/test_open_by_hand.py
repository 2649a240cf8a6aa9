"""A triager opens a finding's Jira issue by hand (POST /api/v1/findings/<id>/jira and the
finding page's button) with the team's Jira settings: the same one issue per finding."""

from __future__ import annotations

import base64

import pytest

from tests.jira.helpers import log4j_finding
from trustrank.findings.records import AuditEvent
from trustrank.jira.models import JiraConfig, JiraIssueLink

pytestmark = pytest.mark.django_db


@pytest.fixture
def configured(team, fake_jira):
    return JiraConfig.objects.create(
        team=team, base_url=fake_jira.base_url, project_key="SEC", user="bot@example.com",
        token="cloud-token", issue_type="Task",
    )


def test_a_triager_opens_the_issue_once_through_the_api(team, api, fake_jira, configured):
    finding = log4j_finding(team)
    client = api(team, "triage", "read")

    first = client.post(f"/api/v1/findings/{finding.pk}/jira")
    second = client.post(f"/api/v1/findings/{finding.pk}/jira")

    url = f"{fake_jira.base_url}/browse/SEC-1"
    assert first.status_code == 201, first.content
    assert first.json() == {"key": "SEC-1", "url": url, "detail": "jira issue SEC-1 created"}
    assert second.status_code == 200 and second.json()["key"] == "SEC-1"
    [sent] = fake_jira.issue_creations()
    expected = base64.b64encode(b"bot@example.com:cloud-token").decode()
    assert sent.headers["Authorization"] == f"Basic {expected}"
    fields = sent.json["fields"]
    assert fields["summary"] == "[TrustRank] unranked CVE-2021-44228 in log4j-core 2.14.1"
    assert fields["issuetype"] == {"name": "Task"} and fields["labels"] == ["trustrank"]
    assert f"/findings/{finding.pk}/" in fields["description"]
    event = AuditEvent.objects.get(finding=finding, action="jira_issue_created")
    assert event.actor_label.startswith("api-key:")
    assert client.get(f"/api/v1/findings/{finding.pk}").json()["jira"] == {"key": "SEC-1",
                                                                           "url": url}


def test_without_jira_settings_it_is_a_409_and_nothing_is_sent(team, api, fake_jira):
    finding = log4j_finding(team)
    response = api(team, "triage").post(f"/api/v1/findings/{finding.pk}/jira")
    assert response.status_code == 409 and fake_jira.requests == []


def test_jira_refusing_is_a_502_with_its_status(team, api, fake_jira, configured):
    finding = log4j_finding(team)
    fake_jira.scripted.append((401, {"errorMessages": ["Bad token"], "errors": {}}))
    response = api(team, "triage").post(f"/api/v1/findings/{finding.pk}/jira")
    assert response.status_code == 502
    assert response.json()["jira_status"] == 401 and "Bad token" in response.json()["detail"]
    assert not JiraIssueLink.objects.exists()


def test_read_scope_and_other_teams_are_refused(team, other_team, api, fake_jira, configured):
    finding = log4j_finding(team)
    theirs = log4j_finding(other_team)
    assert api(team, "read").post(f"/api/v1/findings/{finding.pk}/jira").status_code == 403
    assert api(team, "triage").post(f"/api/v1/findings/{theirs.pk}/jira").status_code == 404
    assert fake_jira.requests == []


def test_the_finding_page_button_opens_it(team, make_user, client, fake_jira, configured):
    finding = log4j_finding(team)
    make_user("tess", team=team, role="triager")
    client.login(username="tess", password="pw-tess")
    assert 'id="jira-open-form"' in client.get(f"/findings/{finding.pk}/").content.decode()

    response = client.post(f"/findings/{finding.pk}/jira/", follow=True)

    html = response.content.decode()
    assert "jira issue SEC-1 created" in html
    assert f'href="{fake_jira.base_url}/browse/SEC-1"' in html and 'id="jira-open-form"' not in html
    assert len(fake_jira.issue_creations()) == 1


def test_a_viewer_has_no_button_and_cannot_post(team, make_user, client, fake_jira, configured):
    finding = log4j_finding(team)
    make_user("vera", team=team, role="viewer")
    client.login(username="vera", password="pw-vera")
    assert 'id="jira-open-form"' not in client.get(f"/findings/{finding.pk}/").content.decode()
    assert client.post(f"/findings/{finding.pk}/jira/").status_code == 403
    assert fake_jira.requests == []
