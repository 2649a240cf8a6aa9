"""A project's risk: the summary (decisions, severities, KEV, overdue), MTTR, open findings
per day, the project page and list, and the API — checked against hand-computed figures."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from trustrank.findings.models import Finding, FindingDue
from trustrank.inventory.models import Project
from trustrank.inventory.selectors import (
    project_mttr,
    project_open_over_time,
    project_risk,
    project_risk_for_projects,
    project_risk_summary,
)
from trustrank.ranking.models import RankContext, RankedFinding

pytestmark = pytest.mark.django_db

_seq = itertools.count(1)


def finding(team, project, *, severity="high", state="in_triage", first_seen, resolved_at=None,
            kev=False, due=None, decision=None, rank=None, vuln="") -> Finding:
    n = next(_seq)
    f = Finding.objects.create(
        team=team, project=project, kind="vulnerability", source="osv", fingerprint=f"r-{n}",
        severity=severity, state=state, first_seen=first_seen, resolved_at=resolved_at,
        in_kev=kev, vuln_id=vuln or f"GHSA-risk-{n:04d}", ecosystem="npm",
        package_name=f"pkg{n}", component_name=f"pkg{n}", component_version="1.0.0",
        title=f"finding {n}",
    )
    if due is not None:
        FindingDue.objects.create(finding=f, team=team, due_date=due, manual=True)
    if decision:
        ctx, _ = RankContext.objects.get_or_create(digest="r" * 64, defaults={"data": {}})
        RankedFinding.objects.create(finding=f, team=team, rank=rank or n, env_rank=rank or n,
                                     score=1.0, decision=decision, context=ctx)
    return f


@pytest.fixture
def now():
    return timezone.now()


@pytest.fixture
def shop(team, other_team, now):
    """Four open findings and four closed ones (three inside the 90-day MTTR window)."""
    shop = Project.objects.create(team=team, name="shop")
    billing = Project.objects.create(team=team, name="billing")
    today = now.date()
    d = lambda days: now - timedelta(days=days)  # noqa: E731
    finding(team, shop, severity="critical", first_seen=d(10), kev=True,
            due=today - timedelta(days=1), decision="immediate", rank=1, vuln="GHSA-aaaa")
    finding(team, shop, severity="high", first_seen=d(5), due=today + timedelta(days=1),
            decision="out-of-cycle", rank=2, vuln="GHSA-bbbb")
    finding(team, shop, severity="high", first_seen=d(3), decision="scheduled", rank=3,
            vuln="GHSA-cccc")
    finding(team, shop, severity="medium", state="exploitable", first_seen=d(60),
            due=today - timedelta(days=40), vuln="GHSA-dddd")
    # Closed: 10 days, 6 days (high), 1 day (critical); one resolved 100 days ago (outside).
    finding(team, shop, severity="high", state="resolved", first_seen=d(20), resolved_at=d(10),
            due=today - timedelta(days=30), vuln="GHSA-eeee")
    finding(team, shop, severity="high", state="false_positive", first_seen=d(8),
            resolved_at=d(2), vuln="GHSA-ffff")
    finding(team, shop, severity="critical", state="resolved", first_seen=d(5),
            resolved_at=d(4), vuln="GHSA-gggg")
    finding(team, shop, severity="low", state="resolved", first_seen=d(200),
            resolved_at=d(100), vuln="GHSA-hhhh")
    finding(team, billing, severity="critical", first_seen=d(1), kev=True, decision="defer",
            rank=9, vuln="GHSA-iiii")
    secret = Project.objects.create(team=other_team, name="secret-project")
    for _ in range(3):
        finding(other_team, secret, severity="critical", first_seen=d(2), kev=True,
                decision="immediate", rank=1, vuln="GHSA-zzzz-secret")
    return shop


def test_risk_summary_counts_open_findings_by_decision_severity_kev_and_overdue(shop, now):
    risk = project_risk(project=shop, today=now.date())
    assert risk.open_total == 4
    assert risk.by_decision == {"immediate": 1, "out-of-cycle": 1, "scheduled": 1, "defer": 0,
                                "unranked": 1}
    assert risk.by_severity == {"critical": 1, "high": 2, "medium": 1, "low": 0, "none": 0,
                                "unknown": 0}
    # KEV: the critical one. Overdue: open past due (the closed one past due does not count).
    assert risk.kev == 1 and risk.overdue == 2
    assert risk.highest_decision == "immediate"


def test_mttr_is_the_mean_of_resolution_times_in_the_last_90_days_by_severity(shop, now):
    mttr = project_mttr(project=shop, now=now)
    assert mttr.resolved == 3 and mttr.window_days == 90
    assert mttr.by_severity == {"critical": {"days": 1.0, "resolved": 1},
                                "high": {"days": 8.0, "resolved": 2}}
    assert mttr.days == pytest.approx((10 + 6 + 1) / 3, abs=0.01)
    summary = project_risk_summary(shop, now=now)
    assert summary["open"] == 4 and summary["mttr"]["by_severity"]["high"]["days"] == 8.0
    assert summary.kev == 1 and summary.overdue == 2 and summary.open_total == 4


def test_open_over_time_matches_a_day_by_day_count(shop, now):
    today = now.date()
    series = project_open_over_time(shop, days=30, today=today)
    assert len(series) == 30 and series[0].day == today - timedelta(days=29)
    assert series[-1].day == today
    by_day = {p.day: p.open for p in series}
    # By hand (the fixture's comments): open at the end of each day.
    assert by_day[today] == 4                          # A B C D
    assert by_day[today - timedelta(days=2)] == 4      # F resolved that day
    assert by_day[today - timedelta(days=3)] == 5      # A B C D F
    assert by_day[today - timedelta(days=4)] == 4      # G opened and resolved: A B D F
    assert by_day[today - timedelta(days=7)] == 3      # A D F
    assert by_day[today - timedelta(days=9)] == 2      # A D (E resolved the day before)
    assert by_day[today - timedelta(days=15)] == 2     # D E
    assert by_day[today - timedelta(days=29)] == 1     # D
    # And every day against the definition, finding by finding.
    rows = list(Finding.objects.filter(project=shop).values("first_seen", "resolved_at"))
    for p in series:
        expected = sum(
            1 for r in rows
            if r["first_seen"].date() <= p.day
            and (r["resolved_at"] is None or r["resolved_at"].date() > p.day)
        )
        assert p.open == expected, p.day


def test_open_over_time_is_one_query(shop, now, django_assert_num_queries):
    with django_assert_num_queries(1):
        project_open_over_time(project=shop, days=365, today=now.date())


def test_risk_of_a_page_of_projects_is_one_grouped_query(team, shop, now,
                                                         django_assert_num_queries):
    projects = list(Project.objects.filter(team=team))
    with django_assert_num_queries(1):
        risks = project_risk_for_projects(projects=projects, today=now.date())
    billing = next(p for p in projects if p.name == "billing")
    assert risks[shop.pk].open_total == 4 and risks[shop.pk].overdue == 2
    assert risks[billing.pk].open_total == 1 and risks[billing.pk].kev == 1
    assert risks[billing.pk].highest_decision == "defer"


def test_risk_api_returns_summary_series_and_mttr(api, team, shop):
    body = api(team, "read").get(f"/api/v1/projects/{shop.pk}/risk").json()
    assert body["summary"]["open"] == 4 and body["summary"]["kev"] == 1
    assert body["summary"]["overdue"] == 2
    assert body["summary"]["by_decision"]["immediate"] == 1
    assert body["summary"]["by_severity"]["high"] == 2
    assert body["mttr"]["by_severity"]["high"] == {"days": 8.0, "resolved": 2}
    assert len(body["open_over_time"]) == 90 and body["open_over_time"][-1]["open"] == 4
    short = api(team, "read").get(f"/api/v1/projects/{shop.pk}/risk?days=7").json()
    assert len(short["open_over_time"]) == 7
    bad = api(team, "read").get(f"/api/v1/projects/{shop.pk}/risk?days=zero")
    assert bad.status_code == 400 and "days" in bad.json()["errors"]


def test_risk_api_is_team_scoped_and_needs_read(api, client, team, other_team, shop):
    assert api(other_team, "read").get(f"/api/v1/projects/{shop.pk}/risk").status_code == 404
    assert client.get(f"/api/v1/projects/{shop.pk}/risk").status_code in (401, 403)
    assert api(team, "sbom:write").get(f"/api/v1/projects/{shop.pk}/risk").status_code == 403


def test_projects_api_items_carry_risk_in_one_grouped_query(
    api, team, shop, django_assert_max_num_queries
):
    client = api(team, "read")
    client.get("/api/v1/projects")  # warm the key
    for i in range(5):
        Project.objects.create(team=team, name=f"extra-{i}")
    with django_assert_max_num_queries(7):
        body = client.get("/api/v1/projects").json()
    items = {p["name"]: p for p in body["results"]}
    assert items["shop"]["risk"]["open"] == 4
    assert items["shop"]["risk"]["highest_decision"] == "immediate"
    assert items["shop"]["risk"]["kev"] == 1 and items["shop"]["risk"]["overdue"] == 2
    assert items["extra-0"]["risk"]["open"] == 0 and "secret-project" not in items
    detail = client.get(f"/api/v1/projects/{shop.pk}").json()
    assert detail["risk"]["by_decision"]["scheduled"] == 1


def test_projects_page_has_a_risk_column(client, make_user, team, shop,
                                         django_assert_max_num_queries):
    client.force_login(make_user("alice", team=team))
    client.get("/projects/")
    for i in range(5):
        Project.objects.create(team=team, name=f"extra-{i}")
    with django_assert_max_num_queries(8):
        html = client.get("/projects/").content.decode()
    assert "Risk" in html and "1 immediate" in html
    assert "1 KEV" in html and "2 overdue" in html and "1 defer" in html
    assert "secret-project" not in html


def test_project_page_shows_risk_charts_and_findings(client, make_user, team, shop,
                                                     django_assert_max_num_queries):
    client.force_login(make_user("alice", team=team))
    with django_assert_max_num_queries(16):
        page = client.get(f"/projects/{shop.pk}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="risk-summary"' in html and "2 overdue" in html and "1 KEV" in html
    assert "Open findings, last 90 days" in html and "<polyline" in html
    assert "Mean time to remediate" in html and 'data-value="8.0"' in html
    # Open findings by default, the best rank first; closed ones on request.
    assert html.index("GHSA-aaaa") < html.index("GHSA-bbbb") < html.index("GHSA-cccc")
    assert "GHSA-dddd" in html and "GHSA-eeee" not in html
    assert "GHSA-zzzz-secret" not in html and "GHSA-iiii" not in html
    closed = client.get(f"/projects/{shop.pk}/?open=false", HTTP_HX_REQUEST="true",
                        HTTP_HX_TARGET="project-findings").content.decode()
    assert "GHSA-eeee" in closed and "GHSA-aaaa" not in closed and "<html" not in closed


def test_project_findings_paginate(client, make_user, team, now):
    proj = Project.objects.create(team=team, name="big")
    for i in range(30):
        finding(team, proj, first_seen=now - timedelta(days=1), decision="scheduled",
                rank=i + 1, vuln=f"GHSA-big-{i:03d}")
    client.force_login(make_user("alice", team=team))
    first = client.get(f"/projects/{proj.pk}/").content.decode()
    assert "GHSA-big-000" in first and "GHSA-big-029" not in first and "Page 1 of 2" in first
    second = client.get(f"/projects/{proj.pk}/?fpage=2").content.decode()
    assert "GHSA-big-029" in second and "Page 2 of 2" in second


def test_other_team_cannot_see_the_project_page(client, make_user, other_team, shop):
    client.force_login(make_user("mallory", team=other_team))
    assert client.get(f"/projects/{shop.pk}/").status_code == 404
