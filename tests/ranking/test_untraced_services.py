"""Declared services that send no traces are services of the ranking: their findings carry
the service and environment, use the human impact declared for them, show exposure and
reachability "unknown", and decide as SSVC System Exposure "open" (nothing rules it out),
so they never sort below a copy of the same flaw on a service known to be small.

Declared through the real routes (an SBOM upload naming its service, the deployment PUT),
ranked through the job system (a requested run, executed)."""

from __future__ import annotations

import pytest

from tests.identity.helpers import run_queued_jobs
from tests.ranking.scenario import ETCD, build
from tests.ranking.test_ranking_runs import rerank
from tests.vulns.helpers import bom, load_sbom
from trustrank.findings.models import Finding
from trustrank.inventory.models import ProjectVersion
from trustrank.vulns.services.matching import findings_match_project_version

pytestmark = pytest.mark.django_db

CVE = "CVE-2020-15115"


def _declare_by_sbom(client, team, *, project, environment, service, human_impact):
    r = client.post(
        f"/api/v1/sboms?projectName={project}&projectVersion=3.4.9&autoCreate=true"
        f"&environment={environment}&service={service}&human_impact={human_impact}",
        bom([ETCD]), content_type="application/json",
    )
    assert r.status_code == 202, r.content
    [job] = run_queued_jobs()
    assert job.status == "done", job.error
    pv = ProjectVersion.objects.get(project__team=team, project__name=project)
    # The load's on-commit hook does not fire inside a test transaction.
    findings_match_project_version(project_version_id=pv.pk)


def _finding(team, project):
    return Finding.objects.get(team=team, cve_id=CVE, project__name=project)


@pytest.fixture
def declared(api, team):
    """The seed case (etcd on localhost only: exposure small, human impact medium), plus two
    copies of etcd's flaw on services that send no traces: `etcd-edge` in staging, declared
    by its SBOM upload with human impact medium, and `etcd-dr` in dr, declared through the
    deployment PUT with human impact very high."""
    build(team)
    client = api(team, "sbom:write", "read")
    _declare_by_sbom(client, team, project="etcd-edge", environment="staging",
                     service="etcd-edge", human_impact="medium")
    load_sbom(team, bom([ETCD]), project="etcd-dr", version="3.4.9")
    r = client.put("/api/v1/environments/dr/services/etcd-dr/deployment",
                   {"project": "etcd-dr", "version": "3.4.9", "human_impact": "very high"},
                   format="json")
    assert r.status_code == 200, r.content
    rerank(team)
    return client


def test_an_untraced_declared_service_is_listed_in_its_environment(declared):
    body = declared.get("/api/v1/priorities?environment=staging").json()
    assert body["count"] == 1
    [row] = body["results"]
    assert (row["vuln_id"], row["environment"], row["service"]) == (CVE, "staging", "etcd-edge")
    assert row["deployed"] is True
    assert (row["exposure"], row["reachability"], row["human_impact"]) == (
        "unknown", "unknown", "medium")
    # CVSS 9.8 network vector (automatable), EPSS 0.002 (no exploitation): the Deployer
    # table at none/open/yes/medium, as "unknown" reads.
    assert row["decision"] == "scheduled"
    exposure = next(f for f in row["explanation"] if f["name"] == "exposure")
    assert exposure["value"] == "unknown" and exposure["confidence"] == "low"
    assert exposure["source"].startswith("service declared in staging, sends no traces")
    # Read as open in the points too (risk-2 weights: exposure 15, so +7.5).
    assert exposure["effect"] == 7.5 and "read as System Exposure 'open'" in exposure["source"]
    reach = next(f for f in row["explanation"] if f["name"] == "reachability")
    assert reach["value"] == "unknown" and reach["confidence"] == "low"


def test_the_human_impact_declared_for_the_service_counts(declared):
    [row] = declared.get("/api/v1/priorities?environment=dr").json()["results"]
    assert (row["service"], row["human_impact"], row["exposure"]) == (
        "etcd-dr", "very high", "unknown")
    # none/open/yes/very high: out-of-cycle, above every other copy.
    assert row["decision"] == "out-of-cycle"
    impact = next(f for f in row["explanation"] if f["name"] == "human_impact")
    assert impact["confidence"] == "high" and "dr/etcd-dr" in impact["source"]


def test_an_untraced_copy_never_sorts_below_a_copy_known_to_be_small(team, declared):
    small, edge, dr = (_finding(team, p) for p in ("etcd", "etcd-edge", "etcd-dr"))
    assert small.rank_context.data["exposure"] == "small"
    assert small.rank_context.data["human_impact"] == "medium"
    # Same flaw, same decision and human impact: the unknown exposure (read as open)
    # puts the untraced copy above the one known to be small.
    assert small.decision == edge.decision == "scheduled"
    assert dr.rank < edge.rank < small.rank
    ranks = [r["vuln_id"] + "@" + r["service"] for r in declared.get(
        "/api/v1/priorities").json()["results"]]
    assert ranks == [
        "CVE-2021-44228@payment-gateway", f"{CVE}@etcd-dr", f"{CVE}@etcd-edge", f"{CVE}@etcd"]


def test_the_priorities_page_lists_and_explains_the_untraced_service(
        client, make_user, team, declared):
    client.force_login(make_user("viewer", team=team, role="viewer"))
    html = client.get("/?environment=staging").content.decode()
    assert "etcd-edge" in html and "exposure-unknown" in html
    html = client.get("/?exposure=unknown").content.decode()
    assert "etcd-edge" in html and "etcd-dr" in html
    edge = _finding(team, "etcd-edge")
    page = client.get(f"/findings/{edge.pk}/").content.decode()
    assert "exposure unknown: etcd-edge is declared in staging but sends no traces" in page


def test_the_services_result_names_the_untraced_service(team, declared):
    from trustrank.ranking.models import RankingRun

    run = RankingRun.objects.filter(team=team).order_by("-pk").first()
    data = run.services
    assert data["staging"]["etcd-edge"]["exposure"] == "unknown"
    assert data["prod"]["etcd"]["exposure"] == "small"
