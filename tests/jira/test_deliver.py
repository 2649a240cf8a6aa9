"""jira_deliver against a local fake Jira: the exact request, one issue per finding, Jira's
refusals returned as their status, and the audit trail."""

from __future__ import annotations

import base64
import socket
import threading

import pytest
from django.db import connection

from tests.jira.helpers import Webhook, event_payload, log4j_finding
from trustrank.findings.records import AuditEvent
from trustrank.jira.models import JiraConfig, JiraIssueLink
from trustrank.jira.services import jira_deliver
from trustrank.lib.outbound import OutboundError, OutboundRefused

pytestmark = pytest.mark.django_db


def _config(team, jira, **values):
    defaults = {"base_url": jira.base_url, "project_key": "SEC", "user": "bot@example.com",
                "token": "cloud-token", "priorities": {"immediate": "Highest"}}
    return JiraConfig.objects.create(team=team, **{**defaults, **values})


def test_a_finding_event_opens_an_issue_with_the_exact_request(team, fake_jira):
    _config(team, fake_jira)
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="cloud-token")

    status, detail = jira_deliver(webhook=hook, event="finding.immediate",
                                  payload=event_payload(finding))

    assert (status, detail) == (201, "jira issue SEC-1 created")
    [sent] = fake_jira.requests
    assert sent.method == "POST" and sent.path == "/rest/api/2/issue"
    expected = base64.b64encode(b"bot@example.com:cloud-token").decode()
    assert sent.headers["Authorization"] == f"Basic {expected}"
    assert sent.headers["Content-Type"] == "application/json"
    fields = sent.json["fields"]
    assert fields["project"] == {"key": "SEC"}
    assert fields["summary"] == "[TrustRank] immediate CVE-2021-44228 in log4j-core 2.14.1 (rank 1)"
    assert fields["issuetype"] == {"name": "Bug"}
    assert fields["labels"] == ["trustrank", "immediate"]
    assert fields["priority"] == {"name": "Highest"}
    description = fields["description"]
    assert "exposure" in description and "ingress path internet -> checkout" in description
    assert f"https://trustrank.example/findings/{finding.pk}/" in description
    link = JiraIssueLink.objects.get(finding=finding)
    assert link.key == "SEC-1"
    assert link.url == f"{fake_jira.base_url}/browse/SEC-1"
    assert link.api_url == f"{fake_jira.base_url}/rest/api/2/issue/10001"
    assert link.issue_id == "10001" and link.team_id == team.pk
    event = AuditEvent.objects.get(finding=finding, action="jira_issue_created")
    assert event.reason == "jira issue SEC-1 created"
    assert event.after["jira_key"] == "SEC-1"


def test_without_a_user_the_token_goes_as_bearer_and_the_webhook_project_wins(team, fake_jira):
    _config(team, fake_jira, user="", token="", priorities={})
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="pat-123",
                   jira_project_key="OPS")

    status, _ = jira_deliver(webhook=hook, event="finding.immediate",
                             payload=event_payload(finding, decision="out-of-cycle"))

    assert status == 201
    [sent] = fake_jira.requests
    assert sent.headers["Authorization"] == "Bearer pat-123"
    fields = sent.json["fields"]
    assert fields["project"] == {"key": "OPS"} and "priority" not in fields
    assert fields["labels"] == ["trustrank", "out-of-cycle"]
    assert JiraIssueLink.objects.get(finding=finding).project_key == "OPS"


def test_the_team_settings_fill_in_what_the_webhook_leaves_empty(team, fake_jira):
    _config(team, fake_jira, issue_type="Vulnerability")
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="")

    status, _ = jira_deliver(webhook=hook, event="finding.immediate",
                             payload=event_payload(finding))

    assert status == 201
    [sent] = fake_jira.requests
    expected = base64.b64encode(b"bot@example.com:cloud-token").decode()
    assert sent.headers["Authorization"] == f"Basic {expected}"
    assert sent.json["fields"]["project"] == {"key": "SEC"}
    assert sent.json["fields"]["issuetype"] == {"name": "Vulnerability"}


def test_a_second_event_opens_no_second_issue_and_a_decision_change_comments(team, fake_jira):
    _config(team, fake_jira)
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="cloud-token")
    payload = event_payload(finding)

    assert jira_deliver(webhook=hook, event="finding.immediate", payload=payload)[0] == 201
    again = jira_deliver(webhook=hook, event="finding.immediate", payload=payload)
    assert again == (200, "finding already has jira issue SEC-1; nothing sent")
    changed = jira_deliver(
        webhook=hook, event="finding.decision_changed",
        payload=event_payload(finding, event="finding.decision_changed",
                              decision="out-of-cycle", rank=4),
    )

    assert changed == (201, "jira issue SEC-1 commented (finding.decision_changed)")
    assert len(fake_jira.issue_creations()) == 1
    comment = fake_jira.requests[-1]
    assert comment.path == "/rest/api/2/issue/SEC-1/comment"
    assert "out-of-cycle" in comment.json["body"] and "rank 4" in comment.json["body"]
    assert JiraIssueLink.objects.filter(finding=finding).count() == 1
    assert AuditEvent.objects.filter(finding=finding, action="jira_issue_commented").count() == 1


@pytest.mark.parametrize(
    ("status", "answer", "words"),
    [
        (401, {"errorMessages": ["You are not authenticated."], "errors": {}},
         "You are not authenticated."),
        (400, {"errorMessages": [], "errors": {"priority": "Priority name 'Highest' is not valid"}},
         "priority: Priority name 'Highest' is not valid"),
    ],
)
def test_jira_refusing_is_returned_as_its_status_and_nothing_is_linked(
    team, fake_jira, status, answer, words
):
    _config(team, fake_jira)
    finding = log4j_finding(team)
    fake_jira.scripted.append((status, answer))
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="cloud-token")

    got_status, detail = jira_deliver(webhook=hook, event="finding.immediate",
                                      payload=event_payload(finding))

    assert got_status == status
    assert detail == f"Jira answered {status}: {words}"
    assert not JiraIssueLink.objects.filter(finding=finding).exists()
    assert not AuditEvent.objects.filter(finding=finding, action="jira_issue_created").exists()
    # The next delivery (after the settings are fixed) opens the issue.
    assert jira_deliver(webhook=hook, event="finding.immediate",
                        payload=event_payload(finding))[0] == 201


def test_an_event_about_no_finding_sends_nothing(team, fake_jira):
    _config(team, fake_jira)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="cloud-token")
    for event in ("job.failed", "gate.failed"):
        payload = {"event": event, "job": {"id": 3, "error": "boom"}}
        assert jira_deliver(webhook=hook, event=event, payload=payload) == (
            204, "not a finding event; nothing sent"
        )
    assert fake_jira.requests == []


def test_another_teams_finding_is_not_sent(team, other_team, fake_jira):
    _config(team, fake_jira)
    theirs = log4j_finding(other_team)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="cloud-token")

    status, _ = jira_deliver(webhook=hook, event="finding.immediate",
                             payload=event_payload(theirs))

    assert status == 404 and fake_jira.requests == []
    assert not JiraIssueLink.objects.exists()


def test_without_a_project_key_anywhere_nothing_is_sent(team, fake_jira):
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="t")
    status, detail = jira_deliver(webhook=hook, event="finding.immediate",
                                  payload=event_payload(finding))
    assert status == 400 and "jira_project_key" in detail and fake_jira.requests == []


def test_a_jira_that_does_not_answer_raises_outbound_error(team, settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=f"http://127.0.0.1:{port}", secret="t",
                   jira_project_key="SEC")
    with pytest.raises(OutboundError):
        jira_deliver(webhook=hook, event="finding.immediate", payload=event_payload(finding))
    assert not JiraIssueLink.objects.exists()


def test_a_private_jira_address_is_refused_unless_allowed(team, fake_jira, settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = False
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="t", jira_project_key="SEC")
    with pytest.raises(OutboundRefused):
        jira_deliver(webhook=hook, event="finding.immediate", payload=event_payload(finding))
    assert fake_jira.requests == []


@pytest.mark.django_db(transaction=True)
def test_two_deliveries_at_once_open_one_issue(team, fake_jira):
    _config(team, fake_jira)
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="cloud-token")
    fake_jira.delay = 0.3
    results: list[tuple[int, str]] = []

    def deliver() -> None:
        try:
            results.append(jira_deliver(webhook=hook, event="finding.immediate",
                                        payload=event_payload(finding)))
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert sorted(s for s, _ in results) == [200, 201]
    assert len(fake_jira.issue_creations()) == 1
    assert JiraIssueLink.objects.filter(finding=finding).count() == 1


def test_a_webhook_url_copied_from_further_in_still_means_the_site(team, fake_jira):
    finding = log4j_finding(team)
    hook = Webhook(team_id=team.pk, url=f"{fake_jira.base_url}/rest/api/2/issue/",
                   secret="pat", jira_project_key="SEC")
    assert jira_deliver(webhook=hook, event="finding.immediate",
                        payload=event_payload(finding))[0] == 201
    assert [r.path for r in fake_jira.requests] == ["/rest/api/2/issue"]
    assert JiraIssueLink.objects.get().url == f"{fake_jira.base_url}/browse/SEC-1"


@pytest.mark.parametrize("bad_id", ["abc", -1, True, None, 2**70])
def test_a_finding_id_that_is_no_id_sends_nothing(team, fake_jira, bad_id):
    hook = Webhook(team_id=team.pk, url=fake_jira.base_url, secret="pat", jira_project_key="SEC")
    payload = {"event": "finding.immediate", "finding": {"id": bad_id, "vuln_id": "CVE-1"}}
    status, _ = jira_deliver(webhook=hook, event="finding.immediate", payload=payload)
    assert status in (204, 404) and fake_jira.requests == []
