"""Ranking runs over evidence in PostgreSQL: the seed case, storage, history, the API."""

from __future__ import annotations

import pytest

from tests.ranking.scenario import build
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankChange, RankingRun
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.ranking.services.runs import ranking_run_execute

pytestmark = pytest.mark.django_db


def rerank(team) -> RankingRun:
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert ranking_run_execute(run_id=run.pk) == "done", RankingRun.objects.get(pk=run.pk).error
    run.refresh_from_db()
    return run


def test_log4shell_first_and_localhost_etcd_low(team):
    build(team)
    run = rerank(team)
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    etcd = Finding.objects.get(team=team, cve_id="CVE-2020-15115")
    # The static sum put them close (CVSS 10 vs 9.8); the context separates them.
    assert log4j.rank == 1 and etcd.rank > log4j.rank
    assert log4j.decision == "immediate" and etcd.decision in ("defer", "scheduled")
    ctx = log4j.rank_context.data
    assert ctx["exposure"] == "open" and ctx["reachability"] == "observed"
    assert ctx["exploitation"] == "active" and ctx["path"] == ["internet", "payment-gateway"]
    assert ctx["human_impact"] == "high"
    names = {f["name"] for f in ctx["explanation"]}
    assert {"exploitation", "exposure", "reachability"} <= names
    assert etcd.rank_context.data["exposure"] == "small"
    assert run.counts["findings"] == 2 and run.inputs_digest and run.weights_version
    # The first run moves nothing: there was no queue before it.
    assert not RankChange.objects.filter(run=run).exists()


def test_same_inputs_same_result_and_nothing_moves(team):
    build(team)
    first = rerank(team)
    second = rerank(team)
    assert second.inputs_digest == first.inputs_digest
    assert second.results_digest == first.results_digest
    assert second.counts["moved"] == 0 and not RankChange.objects.filter(run=second).exists()


def test_resolved_findings_leave_the_queue(team):
    from trustrank.accounts.principal import Principal
    from trustrank.findings.services.triage import finding_triage
    from trustrank.ranking.models import RankedFinding
    from trustrank.ranking.ranks import ranks_of

    build(team)
    first = rerank(team)
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    finding_triage(finding=log4j, principal=Principal(scopes_by_team={team.pk: frozenset({"triage"})}),
                   state="resolved", reason="upgraded")
    run = rerank(team)
    etcd = Finding.objects.get(team=team, cve_id="CVE-2020-15115")
    assert ranks_of([log4j.pk, etcd.pk]) == {etcd.pk: (1, 1)}
    assert run.counts["left_queue"] == 1
    # etcd rose only because Log4Shell left: its row is not written again, nor is there
    # a history line for it.
    assert RankedFinding.objects.get(finding=etcd).run_id == first.pk
    assert list(RankChange.objects.filter(run=run).values_list("finding_id", flat=True)) == [
        log4j.pk]


def test_priorities_api(api, team, other_team):
    build(team)
    rerank(team)
    client = api(team, "read")
    body = client.get("/api/v1/priorities?environment=prod").json()
    assert body["count"] == 2
    first = body["results"][0]
    assert (first["rank"], first["vuln_id"], first["decision"]) == (1, "CVE-2021-44228",
                                                                       "immediate")
    assert first["path"] == ["internet", "payment-gateway"] and first["service"] == "payment-gateway"
    assert first["exposure"] == "open" and first["exploitation"] == "active"
    assert first["project"]["name"] == "payment-gateway" and first["explanation"]
    assert first["baseline"] > 0 and first["kind"] == "vulnerability"
    assert client.get("/api/v1/priorities?environment=staging").json()["count"] == 0
    assert api(other_team, "read").get("/api/v1/priorities").json()["count"] == 0
    ordered = client.get("/api/v1/findings?ordering=rank").json()["results"]
    assert [f["rank"] for f in ordered] == [1, 2] and ordered[0]["decision"] == "immediate"


def test_ranking_run_api(api, team, other_team):
    build(team)
    client = api(team, "read", "triage")
    r = client.post("/api/v1/ranking-runs", {}, format="json")
    assert r.status_code == 202 and r.json()["status_url"] == f"/api/v1/ranking-runs/{r.json()['id']}"
    run_id = r.json()["id"]
    ranking_run_execute(run_id=run_id)
    detail = client.get(f"/api/v1/ranking-runs/{run_id}").json()
    assert detail["status"] == "done" and detail["counts"]["findings"] == 2
    # Log4Shell is fixed: it leaves the queue and etcd rises to the top.
    from trustrank.accounts.principal import Principal
    from trustrank.findings.services.triage import finding_triage

    finding_triage(finding=Finding.objects.get(cve_id="CVE-2021-44228"),
                   principal=Principal(scopes_by_team={team.pk: frozenset({"triage"})}),
                   state="resolved", reason="upgraded")
    second = rerank(team)
    body = client.get(f"/api/v1/ranking-runs/{second.pk}/changes").json()
    assert body["previous"] == run_id
    changes = {c["vuln_id"]: c for c in body["results"]}
    assert changes["CVE-2021-44228"]["rank"] is None
    assert changes["CVE-2021-44228"]["previous_rank"] == 1
    # etcd rose to 1 only because Log4Shell left: a shift, not a change of its own.
    assert "CVE-2020-15115" not in changes
    assert api(team, "read").post("/api/v1/ranking-runs", {}, format="json").status_code == 403
    assert api(other_team, "read").get(f"/api/v1/ranking-runs/{run_id}").status_code == 404


def test_deployment_api(api, team, other_team):
    build(team)
    client = api(team, "read", "sbom:write")
    r = client.put("/api/v1/environments/prod/services/etcd/deployment",
                   {"project": "etcd", "version": "3.4.9", "human_impact": "very high"},
                   format="json")
    assert r.status_code == 200, r.content
    assert r.json()["human_impact"] == "very high" and r.json()["source"] == "api"
    got = client.get("/api/v1/environments/prod/services/etcd/deployment").json()
    assert got["project"] == "etcd" and got["version"] == "3.4.9"
    bad = client.put("/api/v1/environments/prod/services/etcd/deployment",
                     {"project": "nope", "version": "1"}, format="json")
    assert bad.status_code == 400 and "nope" in bad.json()["detail"]
    bad = client.put("/api/v1/environments/prod/services/etcd/deployment",
                     {"project": "etcd", "version": "3.4.9", "human_impact": "huge"},
                     format="json")
    assert bad.status_code == 400
    assert api(team, "read").put("/api/v1/environments/prod/services/etcd/deployment",
                                 {"project": "etcd"}, format="json").status_code == 403
    assert api(other_team, "read").get(
        "/api/v1/environments/prod/services/etcd/deployment").status_code == 404
