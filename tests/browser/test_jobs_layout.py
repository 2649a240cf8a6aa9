"""In a real browser at 1,400 px: the jobs list fits the window whatever the jobs contain."""

from __future__ import annotations

import pytest

from ingest.models import IngestJob, JobKind, JobStatus

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_jobs_page_fits_a_1400px_window(team, make_user, web_server, browser_page):
    make_user("alice", team=team)
    # Long unbreakable text in each wrapping column: a file name, a project name, an error
    # with a path, the submitter.
    IngestJob.objects.create(
        team=team, kind=JobKind.OSV, status=JobStatus.FAILED, digest="0" * 64,
        filename="osv-" + "x" * 150 + ".zip",
        requested_by_label="api-key:" + "k" * 80,
        error="Traceback: /usr/lib/python3/site-packages/" + "deep/" * 30 + "module.py ValueError",
    )
    IngestJob.objects.create(
        team=team, kind=JobKind.SBOM, status=JobStatus.DONE, digest="1" * 64,
        params={"projectName": "org.example." + "subgroup." * 12 + "artifact",
                "projectVersion": "1.0.0-SNAPSHOT+build." + "9" * 40},
        counts={"findings_advisories_considered": 1234567, "components": 99},
    )
    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{web_server.url}/jobs/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    page.wait_for_selector("tbody tr[data-job]")
    assert page.locator("tr[data-job]").count() == 2
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= 1400, f"the jobs page is {scroll_width} px wide"


def test_findings_priorities_and_audit_pages_fit_a_1400px_window(
    team, make_user, web_server, browser_page
):
    """An identity finding about a long SPIFFE ID (and its audit event) must wrap in its cell
    rather than push the lists wider than the window."""
    from trustrank.findings.choices import FindingKind, FindingSource
    from trustrank.findings.models import Finding
    from trustrank.findings.services.audit import Actor, audit_event_record
    from trustrank.inventory.models import Project, ProjectVersion
    from trustrank.ranking.models import RankContext, RankedFinding

    spiffe = "spiffe://shop.example/ns/" + "payments-" * 12 + "/sa/storefront-" + "x" * 60
    # A container image's project version is its digest: one 71-character word.
    project = Project.objects.create(team=team, name="docker.io/library/" + "alpine" * 8)
    version = ProjectVersion.objects.create(project=project, version="sha256:" + "cbaa390e" * 8)
    vulnerable = Finding.objects.create(
        team=team, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
        fingerprint="v" * 64, title="busybox flaw", project=project, project_version=version,
        component_name="busybox", component_version="1.36.1-r2" + "+build" * 10,
        component_purl="pkg:apk/alpine/busybox@1.36.1-r2?arch=x86_64&distro=" + "3" * 60,
        vuln_id="CVE-2024-0001",
    )
    finding = Finding.objects.create(
        team=team, kind=FindingKind.IDENTITY, category="expired", source=FindingSource.OSV,
        fingerprint="f" * 64, title=f"Certificate for {spiffe} expired on 2026-11-01",
        spiffe_id=spiffe, environment="shop",
    )
    context = RankContext.objects.create(digest="d" * 64, data={})
    RankedFinding.objects.create(
        finding=finding, team=team, rank=1, env_rank=1, environment="shop", score=70.0,
        decision="out-of-cycle", context=context,
    )
    RankedFinding.objects.create(
        finding=vulnerable, team=team, rank=2, env_rank=1, environment="", score=40.0,
        decision="scheduled", context=context,
    )
    audit_event_record(
        actor=Actor.system("layout test"), action="created", team_id=team.pk,
        finding_id=finding.pk, after={"title": finding.title}, reason=finding.title,
    )
    make_user("alice", team=team)
    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{web_server.url}/findings/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    for path in ("/", "/findings/", "/audit/"):
        page.goto(f"{web_server.url}{path}")
        page.wait_for_selector("table tbody tr")
        assert "shop.example" in page.content(), path
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        assert scroll_width <= 1400, f"{path} is {scroll_width} px wide"
