"""In a real browser: the service map colours services by trust and outlines exposed ones;
the home page shows the queue and its filters answer without a full reload."""

from __future__ import annotations

import re

import pytest

from tests.ranking.scenario import build
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.runs import ranking_run_execute

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _rank(team) -> None:
    # A run row executed in-process: no message goes to a broker from this test.
    run = RankingRun.objects.create(team=team, trigger="test")
    assert ranking_run_execute(run_id=run.pk) == "done"


def _rgb(css: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in re.findall(r"[\d.]+", css)[:3])


def _login(page, url: str) -> None:
    page.goto(url)
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")


def test_service_map_colours_by_trust_and_outlines_exposed(team, make_user, web_server,
                                                           browser_page, tmp_path):
    make_user("alice", team=team)
    build(team)
    _rank(team)
    page = browser_page
    _login(page, f"{web_server.url}/services/")
    page.wait_for_function("() => window.serviceMap && window.serviceMap.nodes().length === 3")
    nodes = page.evaluate(
        "Object.fromEntries(window.serviceMap.nodes().map(n => [n.data('kind') === 'internet' ?"
        " 'internet' : n.id(), {exposure: n.data('exposure'), trust: n.data('trust'),"
        " label: n.data('label'), border: n.style('border-color'),"
        " width: parseFloat(n.style('border-width')), bg: n.style('background-color')}]))"
    )
    by_label = {v["label"].split(" ")[0]: v for v in nodes.values()}
    gateway, etcd = by_label["payment-gateway"], by_label["etcd"]
    assert gateway["exposure"] == "open" and etcd["exposure"] == "small"
    assert gateway["width"] >= 4 and _rgb(gateway["border"]) == (179, 38, 30)
    assert etcd["width"] == 0
    # Trust 0 (no attested identity) takes the low end of the trust colours.
    assert gateway["trust"] == 0 and _rgb(gateway["bg"]) == (217, 72, 15)
    page.screenshot(path=str(tmp_path / "service-map-trust.png"))


def test_home_page_filters_swap_the_table(team, make_user, web_server, browser_page):
    make_user("alice", team=team)
    build(team)
    _rank(team)
    page = browser_page
    _login(page, f"{web_server.url}/")
    page.wait_for_selector("table.priorities")
    rows = page.locator("table.priorities tbody tr")
    assert rows.count() == 2 and "CVE-2021-44228" in rows.nth(0).inner_text()
    page.select_option("select[name=decision]", ["scheduled", "defer"])
    page.wait_for_function(
        "() => !document.querySelector('#priorities').innerText.includes('CVE-2021-44228')"
    )
    assert "decision=" in page.url and "CVE-2020-15115" in page.inner_text("#priorities")
    assert page.locator("h1:has-text('Priorities')").count() == 1
