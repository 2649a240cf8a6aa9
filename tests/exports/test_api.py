"""The export API: filters, as_of, past ranking runs, bad parameters, scopes and teams."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.utils import timezone

from tests.exports.helpers import body_of, csv_rows, ranked_scenario, rerank
from trustrank.accounts.models import ApiKey
from trustrank.accounts.principal import principal_for_user
from trustrank.exports.models import Export
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.triage import finding_triage

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(team):
    return ranked_scenario(team)


def ids_of(response) -> set[int]:
    assert response.status_code == 200, body_of(response)
    return {int(r["finding_id"]) for r in csv_rows(body_of(response))}


def test_findings_filters_apply(api, team, data):
    client = api(team, "read")
    gateway = data["gateway_pv"]
    project_id = gateway.project_id if hasattr(gateway, "project_id") else gateway.project.pk
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "project": project_id})) == {
        data["log4j"].pk
    }
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "kev": "true"})) == {
        data["log4j"].pk
    }
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "q": "CVE-2020-15115"})) == {
        data["etcd"].pk
    }
    assert ids_of(
        client.get("/api/v1/exports", {"format": "csv", "decision": "immediate"})
    ) == {data["log4j"].pk}


def test_as_of_gives_the_triage_state_of_that_time(api, team, data, make_user):
    alice = make_user("alice", team=team)
    bob = make_user("bob", team=team)
    finding_triage(
        finding=data["log4j"], principal=principal_for_user(alice), assignee=bob.pk,
        reason="bob looks at it",
    )
    before = timezone.now()
    finding_triage(
        finding=data["log4j"], principal=principal_for_user(alice), state="exploitable",
        detail="reachable from the internet", reason="confirmed", assignee=alice.pk,
    )
    client = api(team, "read")
    now_rows = csv_rows(body_of(client.get("/api/v1/exports", {"format": "csv"})))
    then = client.get("/api/v1/exports", {"format": "json", "as_of": before.isoformat()})
    assert then.status_code == 200
    doc = orjson.loads(body_of(then))
    log4j_now = next(r for r in now_rows if int(r["finding_id"]) == data["log4j"].pk)
    log4j_then = next(f for f in doc["findings"] if f["finding_id"] == data["log4j"].pk)
    assert log4j_now["state"] == "exploitable" and log4j_now["assignee"] == "alice"
    assert log4j_then["state"] == "in_triage" and log4j_then["detail"] == ""
    assert log4j_then["assignee"] == "bob"
    etcd_then = next(f for f in doc["findings"] if f["finding_id"] == data["etcd"].pk)
    assert etcd_then["assignee"] == ""
    assert doc["export"]["as_of"] is not None and doc["export"]["notes"]
    then_csv = csv_rows(
        body_of(client.get("/api/v1/exports", {"format": "csv", "as_of": before.isoformat()}))
    )
    log4j_csv = next(r for r in then_csv if int(r["finding_id"]) == data["log4j"].pk)
    assert log4j_csv["state"] == "in_triage" and log4j_csv["resolved_at"] == ""
    assert log4j_csv["assignee"] == "bob"
    assert log4j_csv["explanation"] == log4j_now["explanation"] != ""
    # The state filter reads the state of that time, too.
    then_open = client.get(
        "/api/v1/exports", {"format": "csv", "as_of": before.isoformat(), "state": "in_triage"}
    )
    assert data["log4j"].pk in ids_of(then_open)
    # Before the findings existed, nothing.
    long_ago = (before - timedelta(days=365)).date().isoformat()
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "as_of": long_ago})) == set()


def test_a_past_ranking_run_is_rebuilt_from_its_history(api, team, data, make_user):
    first = data["run"]
    alice = make_user("alice", team=team)
    finding_triage(
        finding=data["log4j"], principal=principal_for_user(alice), state="resolved",
        reason="patched",
    )
    second = rerank(team)
    assert second.pk != first.pk
    client = api(team, "read")
    latest = orjson.loads(body_of(client.get("/api/v1/exports", {"format": "json"})))
    past = orjson.loads(
        body_of(client.get("/api/v1/exports", {"format": "json", "ranking_run": first.pk}))
    )
    now = {f["finding_id"]: f for f in latest["findings"]}
    then = {f["finding_id"]: f for f in past["findings"]}
    assert now[data["log4j"].pk]["rank"] is None  # resolved: out of the queue
    assert now[data["etcd"].pk]["rank"] == 1
    assert then[data["log4j"].pk]["rank"] == 1 and then[data["log4j"].pk]["decision"] == "immediate"
    assert then[data["etcd"].pk]["rank"] == 2
    assert then[data["log4j"].pk]["explanation"] is None
    assert past["export"]["ranks"] == "past_run" and past["export"]["ranking_run"] == first.pk
    assert any("RankChange" in n for n in past["export"]["notes"])


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({}, "format"),
        ({"format": "xml"}, "format"),
        ({"format": "csv", "severity": "apocalyptic"}, "severity"),
        ({"format": "csv", "sevrity": "high"}, "sevrity"),
        ({"format": "csv", "as_of": "last tuesday"}, "as_of"),
        ({"format": "csv", "ranking_run": "999999"}, "ranking_run"),
        ({"format": "csv", "ranking_run": "x"}, "ranking_run"),
        ({"format": "csv", "epss_min": "lots"}, "epss_min"),
    ],
)
def test_bad_parameters_are_refused_naming_them(api, team, params, param):
    response = api(team, "read").get("/api/v1/exports", params)
    assert response.status_code == 400
    body = orjson.loads(response.content)
    assert body["param"] == param and param in body["detail"]
    assert not Export.objects.exists()


def test_no_key_is_401_and_a_key_without_read_is_403(client, api, team, data):
    assert client.get("/api/v1/exports", {"format": "csv"}).status_code == 401
    assert api(team, "sbom:write").get("/api/v1/exports", {"format": "csv"}).status_code == 403


def test_audit_read_scope_may_export(api, make_key, team, data):
    from rest_framework.test import APIClient

    secret = make_key(team, "read")
    ApiKey.objects.filter(team=team).update(scopes=["audit:read"])
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=secret)
    response = client.get("/api/v1/exports", {"format": "csv"})
    assert response.status_code == 200
    assert len(csv_rows(body_of(response))) == 2


def test_another_teams_findings_are_never_exported(api, team, other_team, data):
    from tests.exports.helpers import bulk_findings

    bulk_findings(other_team, 5, prefix="theirs")
    ours = api(team, "read")
    theirs = api(other_team, "read")
    assert ids_of(ours.get("/api/v1/exports", {"format": "csv"})) == {
        data["log4j"].pk, data["etcd"].pk
    }
    their_rows = csv_rows(body_of(theirs.get("/api/v1/exports", {"format": "csv"})))
    assert len(their_rows) == 5
    assert not {data["log4j"].pk, data["etcd"].pk} & {int(r["finding_id"]) for r in their_rows}
    # Naming the other team, or its ranking run, is refused.
    r = theirs.get("/api/v1/exports", {"format": "csv", "team": team.pk})
    assert r.status_code == 400 and orjson.loads(r.content)["param"] == "team"
    r = theirs.get("/api/v1/exports", {"format": "csv", "ranking_run": data["run"].pk})
    assert r.status_code == 400 and orjson.loads(r.content)["param"] == "ranking_run"
    # Their key sees none of our exports.
    export = Export.objects.filter(team=team).first()
    assert theirs.get(f"/api/v1/exports/{export.pk}").status_code == 404
    assert theirs.get(f"/api/v1/exports/{export.pk}/download").status_code == 404


def test_a_streamed_export_has_a_status_but_no_file(api, team, data):
    client = api(team, "read")
    response = client.get("/api/v1/exports", {"format": "csv"})
    body_of(response)
    status = client.get(f"/api/v1/exports/{response['X-Export-Id']}").json()
    assert status["status"] == "done" and status["streamed"] is True
    assert status["download_url"] is None and status["rows"] == 2
    assert status["metadata"]["audit_chain"]["intact"] in (True, False)


@pytest.mark.django_db(transaction=True)
def test_an_abandoned_stream_records_no_export_event(api, team):
    from tests.exports.helpers import bulk_findings

    bulk_findings(team, 3000)
    response = api(team, "read").get("/api/v1/exports", {"format": "csv"})
    next(iter(response.streaming_content))
    response.close()  # the client went away: the server closes the response
    export = Export.objects.get(pk=int(response["X-Export-Id"]))
    assert export.status == "failed" and "went away" in export.error
    assert not AuditEvent.objects.filter(action="export").exists()


def test_every_state_unless_the_caller_chooses(api, team, data, make_user):
    alice = make_user("alice", team=team)
    finding_triage(
        finding=data["etcd"], principal=principal_for_user(alice), state="false_positive",
        reason="not ours",
    )
    client = api(team, "read")
    both = {data["log4j"].pk, data["etcd"].pk}
    assert ids_of(client.get("/api/v1/exports", {"format": "csv"})) == both
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "state": "all"})) == both
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "open": "true"})) == {
        data["log4j"].pk
    }
    assert ids_of(
        client.get("/api/v1/exports", {"format": "csv", "state": "false_positive"})
    ) == {data["etcd"].pk}
