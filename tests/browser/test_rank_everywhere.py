"""In a real browser: the findings list opens in rank order with its rank and decision
columns, and the top-ranked service's page lists its vulnerability findings."""

from __future__ import annotations

import pytest

from tests.ranking.scenario import build
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.runs import ranking_run_execute

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_findings_open_in_rank_order_and_the_service_page_lists_its_findings(
    team, make_user, web_server, browser_page, tmp_path
):
    make_user("alice", team=team, role="viewer")
    data = build(team)
    # A run row executed in-process: no message goes to a broker from this test.
    run = RankingRun.objects.create(team=team, trigger="test")
    assert ranking_run_execute(run_id=run.pk) == "done"
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    etcd = Finding.objects.get(team=team, cve_id="CVE-2020-15115")
    assert (log4j.rank, etcd.rank) == (1, 2)

    page = browser_page
    page.goto(f"{web_server.url}/findings/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    page.wait_for_selector("table.findings tbody tr[data-finding]")
    headers = page.locator("table.findings thead th").all_inner_texts()
    assert headers[:2] == ["Rank", "Decision"]
    rows = page.locator("table.findings tbody tr[data-finding]")
    assert [rows.nth(i).get_attribute("data-finding") for i in range(rows.count())] == [
        str(log4j.pk), str(etcd.pk)
    ]
    assert page.locator("table.findings td.rank").all_inner_texts() == ["1", "2"]
    first = rows.nth(0)
    assert first.locator("td.decision").inner_text() == "immediate"
    assert "Immediate: exploited in the wild" in first.locator("[data-testid=rank-why]").inner_text()
    assert page.locator("select[name=ordering]").input_value() == "rank"
    page.screenshot(path=str(tmp_path / "findings-rank-order.png"))

    page.goto(f"{web_server.url}/services/{data['gateway'].pk}/")  # type: ignore[attr-defined]
    section = page.locator("[data-testid=service-findings]")
    section.locator("tr[data-finding]").first.wait_for()
    row = section.locator(f"tr[data-finding='{log4j.pk}']")
    assert row.locator("td.rank").inner_text() == "1"
    assert row.locator("td.decision").inner_text() == "immediate"
    assert log4j.vuln_id in row.inner_text() and "log4j-core" in row.inner_text()
    assert "No open findings" not in section.inner_text()
    row.locator(f"a[href='/findings/{log4j.pk}/']").click()
    page.wait_for_selector("[data-testid=rank-sentence]")
    page.screenshot(path=str(tmp_path / "service-findings.png"))
