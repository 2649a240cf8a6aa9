"""GET /api/v1/gate in one process: the verdict from decisions, waivers and the policy, the
400s and 404s, scopes, and answers while the ranking has not caught up."""

from __future__ import annotations

import pytest

from ingest.services import job_create
from tests.gate.helpers import LOG4J, LOG4SHELL, SPRING, SPRING4SHELL, advisories, deploy, rerank
from tests.vulns.helpers import bom, load_sbom, principal_for
from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding
from trustrank.findings.services.triage import finding_triage
from trustrank.gate.models import GatePolicy

pytestmark = pytest.mark.django_db

URL = "/api/v1/gate"


def shop(team, version: str = "1.4", *, components=(LOG4J,), impact: str = "high",
         service: str = "shop") -> None:
    load_sbom(team, bom(list(components)), project="shop", version=version)
    deploy(team, service=service, project="shop", version=version, impact=impact)


def triager(team) -> Principal:
    return Principal(scopes_by_team={team.pk: frozenset({"triage"})})


def test_an_immediate_finding_fails_the_gate_and_is_named(api, team):
    advisories(team)
    shop(team)
    run = rerank(team)
    body = api(team, "read").get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["pass"] is False and body["pending"] is False
    assert body["counts"] == {"immediate": 1, "out-of-cycle": 0, "scheduled": 0, "defer": 0}
    (reason,) = body["reasons"]
    assert reason == f"{LOG4SHELL} in log4j-core@2.14.1 is immediate (rank 1, " \
                     f"score {body['failing'][0]['score']:g})"
    assert body["failing"][0]["vuln_id"] == LOG4SHELL and body["failing"][0]["rank"] == 1
    assert body["ranking_run"] == run.pk and body["ranked_at"]
    assert body["policy"] == {"fail_on": "immediate", "new_only": False}
    assert body["project"] == "shop" and body["version"] == "1.4" and body["team"] == team.name
    assert body["upload"]["status"] == "done"


def test_a_waived_finding_does_not_fail_and_the_reason_says_by_whom(api, team):
    advisories(team)
    shop(team)
    rerank(team)
    log4j = Finding.objects.get(team=team, cve_id=LOG4SHELL)
    finding_triage(finding=log4j, principal=triager(team), state="not_affected",
                   justification="code_not_reachable", reason="JNDI lookups disabled")
    body = api(team, "read").get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["pass"] is True and body["pending"] is False
    assert body["counts"]["immediate"] == 0
    assert body["reasons"][0] == "no open finding is immediate"
    waived = body["reasons"][1]
    assert waived.startswith(f"{LOG4SHELL} in log4j-core@2.14.1 (immediate) waived: "
                             "not_affected (code_not_reachable) by ")
    assert waived.endswith(": JNDI lookups disabled")
    assert body["waived"][0]["state"] == "not_affected"


def test_accepted_risk_waives_but_plain_exploitable_does_not(api, team):
    advisories(team)
    shop(team)
    rerank(team)
    log4j = Finding.objects.get(team=team, cve_id=LOG4SHELL)
    finding_triage(finding=log4j, principal=triager(team), state="exploitable",
                   reason="confirmed")
    assert api(team, "read").get(URL, {"project": "shop", "version": "1.4"}).json()["pass"] is False
    log4j.refresh_from_db()
    finding_triage(finding=log4j, principal=triager(team), state="exploitable",
                   response=["will_not_fix"], reason="risk accepted until the rewrite")
    body = api(team, "read").get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["pass"] is True
    assert "waived: accepted risk (exploitable, will_not_fix) by " in body["reasons"][1]


def test_out_of_cycle_fails_only_when_the_policy_says_so(api, team):
    advisories(team)
    shop(team, impact="medium")
    rerank(team)
    client = api(team, "read")
    body = client.get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["counts"]["out-of-cycle"] == 1 and body["pass"] is True
    assert body["reasons"] == ["no open finding is immediate"]
    GatePolicy.objects.create(team=team, fail_on="out-of-cycle")
    body = client.get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["pass"] is False
    assert body["reasons"][0].startswith(f"{LOG4SHELL} in log4j-core@2.14.1 is out-of-cycle")


def test_new_only_fails_on_what_the_previous_version_did_not_have(api, team):
    advisories(team)
    shop(team, "1.3", service="shop-old")
    shop(team, "1.4", components=(LOG4J, SPRING), service="shop-new")
    shop(team, "1.5", components=(LOG4J, SPRING), service="shop-next")
    rerank(team)
    GatePolicy.objects.create(team=team, new_only=True)
    client = api(team, "read")
    body = client.get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["pass"] is False and body["previous_version"] == "1.3"
    assert [f["vuln_id"] for f in body["failing"]] == [SPRING4SHELL]
    assert body["reasons"][0].startswith(f"{SPRING4SHELL} in spring-beans@5.3.17 is immediate")
    assert body["reasons"][0].endswith(", new since 1.3")
    assert "1 open immediate finding(s) were already in 1.3" in body["reasons"][1]
    assert body["counts"]["immediate"] == 2 and body["new_counts"]["immediate"] == 1
    # 1.5 brings nothing new: it passes, though both are still immediate.
    body = client.get(URL, {"project": "shop", "version": "1.5"}).json()
    assert body["pass"] is True and body["previous_version"] == "1.4"
    assert body["counts"]["immediate"] == 2 and body["new_counts"]["immediate"] == 0
    # The first version has no previous one: everything in it is new.
    body = client.get(URL, {"project": "shop", "version": "1.3"}).json()
    assert body["pass"] is False and body["previous_version"] is None


def test_project_uuid_and_environment(api, team):
    advisories(team)
    shop(team)
    rerank(team)
    pv = Finding.objects.get(team=team, cve_id=LOG4SHELL).project_version
    client = api(team, "read")
    body = client.get(URL, {"project_uuid": str(pv.uuid), "environment": "prod"}).json()
    assert body["pass"] is False and body["version"] == "1.4"
    assert body["environment"] == "prod" and body["deployed_in_environment"] is True
    body = client.get(URL, {"project_uuid": str(pv.uuid), "environment": "staging"}).json()
    assert body["deployed_in_environment"] is False and body["pass"] is False


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"version": "1.4"}, "project"),
        ({"project": "shop"}, "version"),
        ({"project": "shop", "version": ""}, "version"),
        ({"project": "shop", "version": "1.4", "wait": "301"}, "wait"),
        ({"project": "shop", "version": "1.4", "wait": "-1"}, "wait"),
        ({"project": "shop", "version": "1.4", "wait": "soon"}, "wait"),
        ({"project": "shop", "version": "1.4", "wait": "nan"}, "wait"),
        ({"project": "shop", "version": "1.4", "severity": "high"}, "severity"),
        ({"project": "shop", "version": "1.4", "environment": ""}, "environment"),
        ({"project": "shop", "project_uuid": "0f2c5ad0-0000-4000-8000-000000000000"},
         "project_uuid"),
    ],
)
def test_bad_questions_are_400_naming_the_parameter(api, team, query, param):
    response = api(team, "read").get(URL, query)
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["param"] == param and param in body["detail"]


def test_unknown_project_version_or_another_teams_project_is_404(api, team, other_team):
    other_pv = load_sbom(other_team, bom([LOG4J]), project="secret", version="9")
    load_sbom(team, bom([LOG4J]), project="shop", version="1.4")
    client = api(team, "read")
    for query, param, words in [
        ({"project": "nope", "version": "1"}, "project", "no project 'nope'"),
        ({"project": "shop", "version": "7.7"}, "version", "has no version '7.7'"),
        ({"project": "secret", "version": "9"}, "project", "no project 'secret'"),
        ({"project_uuid": "0f2c5ad0-0000-4000-8000-000000000000"}, "project_uuid", "uuid"),
        ({"project_uuid": "not-a-uuid"}, "project_uuid", "not-a-uuid"),
    ]:
        response = client.get(URL, query)
        assert response.status_code == 404, (query, response.content)
        assert response.json()["param"] == param and words in response.json()["detail"]
    response = client.get(URL, {"project_uuid": str(other_pv.uuid)})
    assert response.status_code == 404


def test_a_ci_key_with_sbom_write_reads_its_teams_gate_only(api, team, other_team, client):
    load_sbom(team, bom([LOG4J]), project="shop", version="1.4")
    rerank(team)
    query = {"project": "shop", "version": "1.4"}
    assert api(team, "sbom:write").get(URL, query).status_code == 200
    assert api(team, "traces:write").get(URL, query).status_code == 403
    assert api(other_team, "sbom:write").get(URL, query).status_code == 404
    assert client.get(URL, query).status_code == 401


def test_while_the_upload_is_queued_the_answer_is_pending_and_never_passes(api, team):
    load_sbom(team, bom([LOG4J]), project="shop", version="1.4")
    rerank(team)
    client = api(team, "read")
    assert client.get(URL, {"project": "shop", "version": "1.4"}).json()["pass"] is True
    job = job_create(team=team, kind="sbom", payload=bom([LOG4J, SPRING]),
                     principal=principal_for(team),
                     params={"projectName": "shop", "projectVersion": "1.4", "autoCreate": True})
    body = client.get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["pending"] is True and body["pass"] is False
    assert body["provisional_pass"] is True
    assert body["reasons"][0] == f"ranking not finished: SBOM upload job {job.pk} is queued"
    body = client.get(URL, {"project": "shop", "version": "1.4", "wait": "0.6"}).json()
    assert body["pending"] is True and body["pass"] is False
    assert body["reasons"][0].startswith("ranking not finished within 0.6 s: ")
    assert body["waited_seconds"] >= 0.6


def test_a_first_upload_still_queued_is_pending_not_404(api, team):
    job_create(team=team, kind="sbom", payload=bom([LOG4J]), principal=principal_for(team),
               params={"projectName": "shop", "projectVersion": "2.0", "autoCreate": True})
    response = api(team, "read").get(URL, {"project": "shop", "version": "2.0"})
    assert response.status_code == 200
    body = response.json()
    assert body["pending"] is True and body["pass"] is False and body["project_uuid"] is None


def test_a_first_upload_that_finishes_between_the_two_reads_is_found(api, team, monkeypatch):
    """The version read finds nothing, then the upload commits: the job read sees it done, so
    the version is read again instead of answering 404 (a race the gate's wait loop hits)."""
    from ingest.models import IngestJob
    from trustrank.gate import selectors

    job = job_create(team=team, kind="sbom", payload=bom([LOG4J]), principal=principal_for(team),
                     params={"projectName": "shop", "projectVersion": "2.0", "autoCreate": True})
    load_sbom(team, bom([LOG4J]), project="shop", version="2.0")
    IngestJob.objects.filter(pk=job.pk).update(status="done")
    loaded, reads = selectors._loaded_target, []

    def before_the_commit_once(*args):
        reads.append(args)
        return None if len(reads) == 1 else loaded(*args)

    monkeypatch.setattr(selectors, "_loaded_target", before_the_commit_once)
    response = api(team, "read").get(URL, {"project": "shop", "version": "2.0"})
    assert response.status_code == 200, response.content
    assert response.json()["version"] == "2.0" and len(reads) == 2


def test_an_unranked_finding_keeps_the_answer_pending(api, team):
    advisories(team)
    load_sbom(team, bom([LOG4J]), project="shop", version="1.4")
    body = api(team, "read").get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["pending"] is True and body["pass"] is False
    assert "no ranking run since the upload finished" in body["reasons"][0]


def test_the_answer_costs_a_fixed_number_of_queries(api, team, django_assert_max_num_queries):
    advisories(team)
    shop(team, "1.3", service="shop-old")
    shop(team, "1.4", components=(LOG4J, SPRING), service="shop-new")
    rerank(team)
    for f in Finding.objects.filter(team=team, project_version__version="1.4"):
        finding_triage(finding=f, principal=triager(team), state="false_positive",
                       reason="test fixture")
    GatePolicy.objects.create(team=team, new_only=True)
    client = api(team, "read")
    with django_assert_max_num_queries(20):
        body = client.get(URL, {"project": "shop", "version": "1.4",
                                "environment": "prod"}).json()
    assert body["pass"] is True and len(body["waived"]) == 2


def test_a_failing_answer_queues_one_gate_failed_event_per_ranking_run(api, team):
    from trustrank.notify.models import NotifyBatch, Webhook

    Webhook.objects.create(team=team, url="https://hooks.example.com/ci", secret="s",
                           events=["gate.failed"])
    advisories(team)
    shop(team)
    rerank(team)
    for _ in range(2):
        assert api(team, "read").get(URL, {"project": "shop", "version": "1.4"}).json()[
            "pass"] is False
    (batch,) = NotifyBatch.objects.filter(team=team, event="gate.failed")
    (item,) = batch.items
    assert "shop" in str(item) and "1.4" in str(item)


def test_an_sbom_not_yet_matched_keeps_the_answer_pending(api, team):
    from trustrank.inventory.models import ProjectVersion, Sbom

    advisories(team)
    shop(team)
    rerank(team)
    pv = ProjectVersion.objects.get(project__team=team, version="1.4")
    Sbom.objects.filter(pk=pv.current_sbom_id).update(matched_at=None)
    body = api(team, "read").get(URL, {"project": "shop", "version": "1.4"}).json()
    assert body["pending"] is True and body["pass"] is False
    assert "being matched against the advisories" in body["reasons"][0]
