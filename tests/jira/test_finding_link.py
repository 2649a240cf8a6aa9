"""The finding links to its Jira issue: `jira` {key, url} in the findings API (one query for
a whole page), and the key as a link on the finding page."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.findings.helpers import many_findings
from tests.jira.helpers import Webhook, event_payload, log4j_finding
from trustrank.findings.models import Finding
from trustrank.jira.models import JiraConfig, JiraIssueLink
from trustrank.jira.services import jira_deliver

pytestmark = pytest.mark.django_db


def _link(finding: Finding, key: str) -> JiraIssueLink:
    return JiraIssueLink.objects.create(
        finding=finding, team_id=finding.team_id, base_url="https://jira.example.com",
        project_key="SEC", key=key, url=f"https://jira.example.com/browse/{key}",
    )


def test_a_delivered_issue_shows_in_the_api_and_on_the_page(
    team, api, make_user, client, fake_jira
):
    JiraConfig.objects.create(team=team, base_url=fake_jira.base_url, project_key="SEC",
                              token="pat")
    finding = log4j_finding(team)
    other = log4j_finding(team, fingerprint="other")
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="pat")
    assert jira_deliver(webhook=hook, event="finding.immediate",
                        payload=event_payload(finding))[0] == 201
    url = f"{fake_jira.base_url}/browse/SEC-1"

    reader = api(team, "read")
    detail = reader.get(f"/api/v1/findings/{finding.pk}").json()
    assert detail["jira"] == {"key": "SEC-1", "url": url}
    assert reader.get(f"/api/v1/findings/{other.pk}").json()["jira"] is None
    listed = {row["id"]: row["jira"] for row in reader.get("/api/v1/findings").json()["results"]}
    assert listed == {finding.pk: {"key": "SEC-1", "url": url}, other.pk: None}

    make_user("vera", team=team, role="viewer")
    client.login(username="vera", password="pw-vera")
    html = client.get(f"/findings/{finding.pk}/").content.decode()
    assert f'href="{url}"' in html and ">SEC-1</a>" in html
    assert "jira issue SEC-1 created" in html  # the audit trail on the page
    assert "SEC-1" not in client.get(f"/findings/{other.pk}/").content.decode()


def test_the_list_reads_every_link_of_a_page_in_one_query(team, api):
    reader = api(team, "read")
    ids = many_findings(team, 3, prefix="a")
    _link(Finding.objects.get(pk=ids[0]), "SEC-1")
    reader.get("/api/v1/findings")  # warm the key and count caches
    with CaptureQueriesContext(connection) as few:
        assert reader.get("/api/v1/findings").status_code == 200
    more = many_findings(team, 30, prefix="b")
    for n, pk in enumerate(more, start=2):
        _link(Finding.objects.get(pk=pk), f"SEC-{n}")
    reader.get("/api/v1/findings")
    with CaptureQueriesContext(connection) as many:
        body = reader.get("/api/v1/findings").json()
    assert sum(1 for row in body["results"] if row["jira"]) == 31
    assert len(many.captured_queries) <= len(few.captured_queries)


def test_another_teams_link_is_not_shown(team, other_team, api):
    theirs = many_findings(other_team, 1, prefix="x")[0]
    _link(Finding.objects.get(pk=theirs), "THEIRS-1")
    response = api(team, "read").get(f"/api/v1/findings/{theirs}")
    assert response.status_code == 404
