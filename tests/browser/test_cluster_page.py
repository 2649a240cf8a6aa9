"""In a real browser: the cluster list's card and the demo's GPU cluster page draw GPU use
over time and declared vs recommended priorities, with data, and no legend over an axis
label."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ingest import demo_cluster
from tests.conftest import DATA
from trustrank.cluster.models import Cluster
from trustrank.cluster.services.diagnoses import cluster_diagnose
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.objects import objects_load
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.prometheus_text import TEXT, prometheus_text_parse

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _demo_cluster(team: object) -> Cluster:
    folder = Path(DATA) / "demo"
    cluster = Cluster.objects.create(team=team, name=demo_cluster.CLUSTER)
    objects_load(cluster=cluster, snapshot=kubernetes_parse(
        body=(folder / demo_cluster.OBJECTS_FILE).read_bytes()))
    now_ms = int(time.time() * 1000)
    for name in demo_cluster.SCRAPE_FILES:
        text = (folder / name).read_text()
        for at in demo_cluster.scrape_slots(now=time.time()):
            scrape = prometheus_text_parse(body=demo_cluster.scrape_at(text, at=at),
                                           scraped_at_ms=now_ms, now_ms=now_ms, media_type=TEXT)
            series_store(cluster=cluster, series=list(scrape.series))
    cluster_diagnose(cluster_id=cluster.pk)
    return cluster


def _box(locator: object) -> dict[str, float]:
    box = locator.bounding_box()  # type: ignore[attr-defined]
    assert box is not None
    return box


def test_person_sees_gpu_use_and_priorities_drawn(
    team, make_user, web_server, browser_page, tmp_path
):
    make_user("alice", team=team)
    _demo_cluster(team)

    page = browser_page
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{web_server.url}/clusters/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")

    # The list page: a card for the cluster with both charts drawn, linking to its page.
    card = page.locator(f"section.cluster-card[aria-label='Cluster {demo_cluster.CLUSTER}']")
    gpu_use = card.locator(".gpu-use svg")
    card_lines = gpu_use.locator("polyline.line")
    assert card_lines.count() == 4
    for i in range(card_lines.count()):
        assert len(card_lines.nth(i).get_attribute("points").split()) >= 2
        assert _box(card_lines.nth(i))["width"] > 100
    card_chart = card.locator("svg.priorities-chart")
    assert card_chart.locator("circle.recommended").count() == 6
    assert _box(card_chart.locator("g.workload").first)["height"] > 0
    assert _box(gpu_use)["width"] > 300 and _box(card_chart)["width"] > 300
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    page.screenshot(path=str(tmp_path / "clusters.png"), full_page=True)
    card.locator("h2 a").click()
    page.wait_for_selector(f"h1:has-text('{demo_cluster.CLUSTER}')")

    utilisation = page.locator("h3:has-text('Utilisation') + svg")
    lines = utilisation.locator("polyline.line")
    assert lines.count() == 8
    for i in range(lines.count()):
        assert len(lines.nth(i).get_attribute("points").split()) >= 2
        assert _box(lines.nth(i))["width"] > 100  # an hour drawn across the plot
    # The legend is below the time axis' label, never over it or the plot.
    axis_label = _box(utilisation.locator("text:has-text('time (UTC)')"))
    legend = _box(utilisation.locator("g.legend"))
    assert legend["y"] >= axis_label["y"] + axis_label["height"] - 1
    names = utilisation.locator("g.legend text").all_text_contents()
    assert len(names) == 8 and all(name.startswith("ip-10-0-1-1") for name in names), names

    chart = page.locator("svg.priorities-chart")
    assert chart.locator("g.workload").count() == 6
    assert chart.locator("circle.recommended").count() == 6
    vllm = chart.locator("g.workload", has_text="vllm-chat")
    declared, recommended = _box(vllm.locator("circle.declared")), _box(
        vllm.locator("circle.recommended"))
    assert recommended["x"] > declared["x"]  # 1,000 declared, raised to 100,000
    assert "7 request a GPU" in page.locator(".pod-counts").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    page.screenshot(path=str(tmp_path / "cluster.png"), full_page=True)
