"""The source document's case, and the queue's promises around it."""

from __future__ import annotations

from dataclasses import replace

from tests.risk.seed import ENV, seed_inputs
from trustrank.risk import Finding, rank


def _by_id(result):
    return {r.finding_id: r for r in result.findings}


def test_log4shell_in_the_exposed_payment_gateway_ranks_first_and_the_local_etcd_low():
    result = rank(inputs=seed_inputs())
    first = result.findings[0]
    assert first.finding_id == "log4shell"
    assert first.decision == "immediate"
    assert (first.exposure, first.reachability, first.exploitation, first.automatable) == (
        "open", "observed", "active", True)
    assert first.path == ("internet", "frontend", "payment-gateway")
    etcd = _by_id(result)["etcd-flaw"]
    assert etcd.rank == len(result.findings)
    assert etcd.exposure == "small" and etcd.path == ()
    # By CVSS alone the etcd flaw would be second.
    assert etcd.score < first.score


def test_explanation_names_its_sources():
    r = rank(inputs=seed_inputs()).findings[0]
    factors = {f.name: f for f in r.explanation}
    assert set(factors) >= {"severity", "exploitation", "epss", "automatable", "exposure",
                            "reachability", "human_impact", "trust"}
    assert "CVE-2021-44228" in factors["exploitation"].source
    assert "2021-12-10" in factors["exploitation"].source
    assert "2026-11-30" in factors["epss"].source
    assert "frontend → payment-gateway" in factors["exposure"].source
    assert "mTLS 100%" in factors["exposure"].source
    assert "203.0.113.7" in factors["exposure"].source
    assert "log4j-context-data" in factors["reachability"].source
    # The rate names its window (the seed has no per-minute buckets: the average).
    assert "called 10/s (average over 24 h)" in factors["reachability"].source
    assert "called 10/s (average over 24 h), mTLS 100%" in factors["exposure"].source
    assert all(f.confidence in ("high", "medium", "low") for f in r.explanation)
    assert r.score == round(50 + sum(f.effect for f in r.explanation), 4)


def test_expired_certificate_on_an_internet_facing_service_outranks_scheduled_cves():
    cert = Finding(id="cert-frontend", kind="identity", sub_kind="expired", severity="high",
                   environment=ENV, service="frontend", subject="sha256:ab12…",
                   baseline=40.0)
    trace = Finding(id="ctx-orders", kind="reliability", sub_kind="broken_context",
                    severity="low", environment=ENV, service="orders", baseline=5.0)
    result = rank(inputs=seed_inputs(extra_findings=(cert, trace)))
    order = [r.finding_id for r in result.findings]
    by = _by_id(result)
    assert by["cert-frontend"].decision == "out-of-cycle"
    assert order.index("cert-frontend") == 1
    assert all(order.index("cert-frontend") < order.index(f)
               for f in ("orders-medium", "frontend-high", "etcd-flaw"))
    assert by["cert-frontend"].reachability == "not applicable"
    assert "sha256:ab12…" in by["cert-frontend"].explanation[0].source
    assert by["ctx-orders"].decision in ("scheduled", "defer")


def test_versions_deployed_nowhere_keep_baseline_order_below_deployed_ones():
    base = {"severity": "critical", "cvss_score": 9.8, "epss": 0.01,
            "cvss_vector": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
            "component_key": "pkg:pypi/x", "project_version": "old@0.1"}
    lone_a = Finding(id="a-undeployed", baseline=90.0, **base)
    lone_b = Finding(id="b-undeployed", baseline=95.0, **base)
    result = rank(inputs=seed_inputs(extra_findings=(lone_a, lone_b)))
    by = _by_id(result)
    assert by["a-undeployed"].deployed is False
    assert by["a-undeployed"].score == 90.0
    assert by["b-undeployed"].rank < by["a-undeployed"].rank
    same = [r for r in result.findings if r.decision == by["a-undeployed"].decision]
    assert [r.deployed for r in same] == sorted((r.deployed for r in same), reverse=True)


def test_not_observed_lowers_but_never_drops_a_finding():
    inputs = seed_inputs()
    libs = tuple(replace(lib, observed=()) for lib in inputs.libraries)
    before = _by_id(rank(inputs=inputs))["log4shell"]
    after_result = rank(inputs=replace(inputs, libraries=libs))
    after = _by_id(after_result)["log4shell"]
    assert after.reachability == "not observed"
    assert after.score < before.score
    assert len(after_result.findings) == len(inputs.findings)


def test_services_report_trust_exposure_and_path():
    services = {(s.environment, s.name): s for s in rank(inputs=seed_inputs()).services}
    gw = services[(ENV, "payment-gateway")]
    assert gw.exposure == "open" and gw.path == ("internet", "frontend", "payment-gateway")
    assert gw.identity_trust == 0.855  # 0.9 · 0.95¹ · min(1, 100/100)
    assert services[(ENV, "etcd")].exposure == "small"


def test_duplicate_finding_ids_are_refused():
    import pytest

    inputs = seed_inputs()
    twice = replace(inputs, findings=(*inputs.findings, inputs.findings[0]))
    with pytest.raises(ValueError, match="unique"):
        rank(inputs=twice)
