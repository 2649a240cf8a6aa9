"""The team's gate policy: API (GET read, PUT admin, strict validation, audited), the section
on the team settings pages, and the once-only record and payload of `gate.failed`."""

from __future__ import annotations

import pytest

from tests.gate.helpers import LOG4J, LOG4SHELL, advisories, deploy, rerank
from tests.vulns.helpers import bom, load_sbom
from trustrank.accounts.principal import Principal
from trustrank.findings.records import AuditEvent
from trustrank.gate.evaluate import gate_answer
from trustrank.gate.models import GatePolicy
from trustrank.gate.selectors import gate_target_find
from trustrank.gate.services import gate_failed_payload, gate_failure_record

pytestmark = pytest.mark.django_db

URL = "/api/v1/gate/policy"


def test_the_default_policy_fails_on_immediate_only(api, team):
    body = api(team, "read").get(URL).json()
    assert body == {"team": team.name, "fail_on": "immediate", "new_only": False,
                    "updated_at": None, "updated_by": None}
    assert api(team, "sbom:write").get(URL).status_code == 200


def test_an_admin_changes_it_and_the_change_is_audited(api, team):
    client = api(team, "admin", "read")
    response = client.put(URL, {"fail_on": "out-of-cycle", "new_only": True,
                                "reason": "stricter for the release train"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["fail_on"] == "out-of-cycle" and response.json()["new_only"] is True
    assert response.json()["updated_by"] == "api-key:test"
    policy = GatePolicy.objects.get(team=team)
    assert (policy.fail_on, policy.new_only) == ("out-of-cycle", True)
    (event,) = AuditEvent.objects.filter(team=team, action="gate_policy_changed")
    assert event.before == {"fail_on": "immediate", "new_only": False}
    assert event.after == {"fail_on": "out-of-cycle", "new_only": True}
    assert event.subject_type == "gate.policy" and event.reason == "stricter for the release train"
    # Only what is given changes; the same values again write no event.
    assert client.put(URL, {"new_only": False}, format="json").json()["fail_on"] == "out-of-cycle"
    client.put(URL, {"new_only": False}, format="json")
    assert AuditEvent.objects.filter(team=team, action="gate_policy_changed").count() == 2


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"fail_on": "scheduled"}, "fail_on"),
        ({"fail_on": "IMMEDIATE"}, "fail_on"),
        ({"new_only": "yes"}, "new_only"),
        ({"new_only": 1}, "new_only"),
        ({"fail_on": "immediate", "block": True}, "block"),
        (["immediate"], "body"),
    ],
)
def test_bad_policies_are_400_naming_the_field_and_change_nothing(api, team, body, param):
    response = api(team, "admin").put(URL, body, format="json")
    assert response.status_code == 400, response.content
    problem = response.json()
    assert problem["param"] == param and param in problem["errors"]
    assert not GatePolicy.objects.filter(team=team).exists()
    assert not AuditEvent.objects.filter(team=team, action="gate_policy_changed").exists()


def test_only_admins_change_it(api, team, other_team):
    assert api(team, "read", "triage").put(URL, {"new_only": True}, format="json").status_code \
        == 403
    # An admin of another team changes only their own team's policy.
    api(other_team, "admin").put(URL, {"new_only": True}, format="json")
    assert not GatePolicy.objects.filter(team=team).exists()
    assert GatePolicy.objects.get(team=other_team).new_only is True


def test_the_settings_pages_show_and_change_it(client, team, make_user):
    admin = make_user("gate-admin", team=team, role="admin")
    client.force_login(admin)
    html = client.get("/settings/keys/").content.decode()
    assert 'id="gate-policy"' in html and "Save gate policy" in html
    response = client.post("/settings/gate/", {"team": team.pk, "fail_on": "out-of-cycle",
                                               "new_only": "on", "next": "/settings/keys/"})
    assert response.status_code == 302 and response["Location"] == "/settings/keys/"
    policy = GatePolicy.objects.get(team=team)
    assert (policy.fail_on, policy.new_only) == ("out-of-cycle", True)
    assert AuditEvent.objects.filter(team=team, action="gate_policy_changed").count() == 1
    html = client.get("/settings/gate/").content.decode()
    assert 'value="out-of-cycle" selected' in html and "gate-admin" in html
    response = client.post("/settings/gate/", {"team": team.pk, "fail_on": "never"})
    assert response.status_code == 400 and "fail_on: must be one of" in response.content.decode()
    # A redirect elsewhere is not followed.
    response = client.post("/settings/gate/", {"team": team.pk, "fail_on": "immediate",
                                               "next": "https://evil.example/"})
    assert response["Location"] == "/settings/gate/"


def test_viewers_see_it_but_cannot_change_it(client, team, other_team, make_user):
    viewer = make_user("gate-viewer", team=team, role="viewer")
    client.force_login(viewer)
    html = client.get("/settings/gate/").content.decode()
    assert "Only the team's admins change it." in html and "Save gate policy" not in html
    assert client.post("/settings/gate/", {"team": team.pk, "fail_on": "out-of-cycle"}
                       ).status_code == 403
    assert client.post("/settings/gate/", {"team": other_team.pk, "fail_on": "out-of-cycle"}
                       ).status_code == 404
    assert not GatePolicy.objects.exists()


def test_a_failing_answer_is_recorded_once_per_version_and_run(team):
    advisories(team)
    load_sbom(team, bom([LOG4J]), project="shop", version="1.4")
    deploy(team, service="shop", project="shop", version="1.4")
    run = rerank(team)
    principal = Principal(scopes_by_team={team.pk: frozenset({"read"})})

    def answer():
        return gate_answer(
            target_find=lambda: gate_target_find(principal=principal, project="shop",
                                                 version="1.4"),
            environment="prod", wait=0,
        )

    result = answer()
    assert result.passed is False and result.pending is False
    assert gate_failure_record(result=result) is True
    assert gate_failure_record(result=answer()) is False
    payload = gate_failed_payload(result)
    assert payload["event"] == "gate.failed" and payload["project"] == "shop"
    assert payload["version"] == "1.4" and payload["ranking_run"] == run.pk
    assert payload["failing"][0]["vuln_id"] == LOG4SHELL
    assert payload["counts"]["immediate"] == 1 and payload["environment"] == "prod"
    # A new run that still fails is announced again.
    rerank(team)
    assert gate_failure_record(result=answer()) is True
