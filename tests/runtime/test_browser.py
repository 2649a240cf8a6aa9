"""In a real browser: the service map draws the call graph; a click opens a service."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.utils import timezone
from opentelemetry.trace import SpanKind

from tests.runtime.helpers import SpanFactory
from trustrank.parsers.otlp import spans_from_request
from trustrank.runtime import services

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

GRAPH_LIBRARY = Path(__file__).resolve().parents[2] / "node_modules" / "cytoscape" / "dist"


def test_service_map_is_interactive(team, make_user, web_server, browser_page, tmp_path):
    assert GRAPH_LIBRARY.is_dir(), "the graph library is installed by `npm ci` (package.json)"
    make_user("alice", team=team)
    f = SpanFactory(env="shop")
    for i in range(30):
        t = f.trace_id()
        root = f.span(service="frontend", name="GET /", kind=SpanKind.SERVER, trace_id=t)
        call = f.span(service="frontend", name="GET cart", kind=SpanKind.CLIENT, trace_id=t,
                      parent=root)
        f.span(service="cart", name="GET /cart", kind=SpanKind.SERVER, trace_id=t, parent=call)
        if i % 3 == 0:
            f.span(service="cart", name="HGET", kind=SpanKind.CLIENT, trace_id=t, parent=call,
                   attributes={"db.system": "redis", "server.address": "redis"})
    services.traces_aggregate_store(team_id=team.id, batch=spans_from_request(f.request()),
                                    received_at=timezone.now())

    page = browser_page
    page.goto(f"{web_server.url}/services/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    page.wait_for_function("() => window.serviceMap && window.serviceMap.nodes().length === 4")
    cy = "window.serviceMap"
    labels = set(page.evaluate(f"{cy}.nodes().map(n => n.data('label'))"))
    assert labels == {"internet", "frontend", "cart", "redis"}
    assert page.evaluate(f"{cy}.nodes().filter(n => n.data('ingress') === 'yes')"
                         ".map(n => n.data('label'))") == ["frontend"]
    # Edge width follows the call rate: frontend->cart (30 calls) is thicker than cart->redis.
    widths = page.evaluate(
        f"Object.fromEntries({cy}.edges().map(e => [e.target().data('label'), "
        "parseFloat(e.style('width'))]))"
    )
    assert widths["cart"] > widths["redis"]
    # Zoom and pan are live.
    zoom = page.evaluate(f"{cy}.zoom()")
    box = page.locator("#service-map").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -400)
    page.wait_for_function(f"() => {cy}.zoom() !== {zoom}")
    page.screenshot(path=str(tmp_path / "service-map.png"))
    # A click on a service opens its page.
    position = page.evaluate(
        f"(() => {{ const p = {cy}.nodes().filter(n => n.data('label') === 'cart')[0]"
        ".renderedPosition(); return [p.x, p.y]; })()"
    )
    page.mouse.click(box["x"] + position[0], box["y"] + position[1])
    page.wait_for_selector("h1:has-text('cart')")
    assert "/services/" in page.url
    assert page.locator("text=frontend").first.is_visible()
