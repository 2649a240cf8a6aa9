"""Formula 1: trust(child) = trust(parent) · 0.95^depth · min(1, sig/100), best path."""

from __future__ import annotations

import pytest

from trustrank.risk import CallEdge, Service
from trustrank.risk.graph import analyse_environment, propagate_trust


def _trust(anchors, edges):
    succ: dict[str, list[tuple[str, float]]] = {}
    for a, b, sig in edges:
        succ.setdefault(a, []).append((b, sig))
    return {k: v[0] for k, v in propagate_trust(anchors=anchors, succ=succ).items()}


def test_decay_grows_with_depth_and_sig_caps_at_100():
    t = _trust({"a": 0.8}, [("a", "b", 100), ("b", "c", 50), ("c", "d", 250)])
    assert t["a"] == pytest.approx(0.8)
    assert t["b"] == pytest.approx(0.8 * 0.95)  # 0.76
    assert t["c"] == pytest.approx(0.76 * 0.95**2 * 0.5)  # 0.34295
    assert t["d"] == pytest.approx(0.34295 * 0.95**3 * 1.0)  # sig 250 counts as 100


def test_a_long_chain_of_perfect_hops_loses_to_a_weaker_anchor_nearby():
    # Four hops from a perfect anchor: 0.95^(1+2+3+4) = 0.5987; a direct call from an
    # anchor of strength 70: 0.7 · 0.95 = 0.665. A flat 0.95 per hop would say 0.8145.
    edges = [("x", "p1", 100), ("p1", "p2", 100), ("p2", "p3", 100), ("p3", "t", 100),
             ("y", "t", 100)]
    t = _trust({"x": 1.0, "y": 0.7}, edges)
    assert t["t"] == pytest.approx(0.665)
    only_x = _trust({"x": 1.0}, edges[:4])
    assert only_x["t"] == pytest.approx(0.95**10)


def test_a_shallower_weaker_path_can_still_give_descendants_more():
    # n is best reached at depth 2 from a (0.857375), but b reaches it at depth 1 with
    # 0.8265, and from there its child decays less: 0.8265 · 0.95² = 0.745916 beats
    # 0.857375 · 0.95³ = 0.73509.
    edges = [("a", "m", 100), ("m", "n", 100), ("b", "n", 100), ("n", "c", 100)]
    full = propagate_trust(anchors={"a": 1.0, "b": 0.87}, succ={
        "a": [("m", 100)], "m": [("n", 100)], "b": [("n", 100)], "n": [("c", 100)]})
    assert full["n"][0] == pytest.approx(0.95 * 0.95**2)
    assert full["n"][2] == "a"
    assert full["c"][0] == pytest.approx(0.87 * 0.95 * 0.95**2)
    assert full["c"][2] == "b"
    assert _trust({"a": 1.0, "b": 0.87}, edges)["c"] == pytest.approx(0.74591625)


def test_zero_sig_hop_and_unreached_services_have_no_trust():
    t = _trust({"a": 1.0}, [("a", "b", 0)])
    assert "b" not in t


def test_anchor_keeps_its_own_strength_when_paths_give_less():
    t = _trust({"a": 1.0, "b": 0.5}, [("a", "b", 40)])
    assert t["b"] == pytest.approx(0.5)


def test_trust_in_the_environment_analysis_follows_call_direction():
    services = [Service(environment="e", name="gw", identity_strength=90),
                Service(environment="e", name="api"), Service(environment="e", name="db")]
    edges = [CallEdge(environment="e", caller="gw", callee="api", sig=80),
             CallEdge(environment="e", caller="db", callee="gw", sig=100)]
    a = analyse_environment(environment="e", services=services, edges=edges, peers=[],
                            origins=[])
    assert a.services["gw"].identity_trust == pytest.approx(0.9)
    assert a.services["api"].identity_trust == pytest.approx(0.9 * 0.95 * 0.8)
    assert a.services["api"].trust_anchor == "gw"
    assert a.services["api"].trust_depth == 1
    assert a.services["db"].identity_trust == 0.0
