"""The ranked finding's layout: seven fields, what it shares with other findings held by
reference (a run keeps a million ranked findings, and an incremental run renumbers as
many), and every value still readable by its name, with the JSON it always had."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tests.risk.generate import generate
from trustrank.risk import Finding, rank
from trustrank.risk.results import (
    CONTEXT_FIELDS,
    FACTS_FIELDS,
    RankedFinding,
    finding_json,
)


def test_a_ranked_finding_holds_seven_fields() -> None:
    assert RankedFinding._fields == (
        "finding_id", "rank", "score", "decision", "facts", "context", "finding")


@pytest.mark.parametrize("seed", range(4))
def test_every_value_is_read_by_its_name(seed: int) -> None:
    result = rank(inputs=generate(seed, findings=200))
    assert result.findings
    for r in result.findings:
        f = r.finding
        assert r.finding_id is f.id
        assert (r.kind, r.component_key, r.baseline) == (f.kind, f.component_key, f.baseline)
        assert tuple(getattr(r, name) for name in FACTS_FIELDS) == r.facts
        assert tuple(getattr(r, name) for name in CONTEXT_FIELDS) == r.context
        assert r.explanation == r.finding_factors + r.context_factors


def test_the_json_of_a_ranked_finding_names_every_value() -> None:
    result = rank(inputs=generate(1, findings=60))
    for r in result.findings:
        out = finding_json(r)
        assert set(out) == {
            "finding_id", "rank", "score", "decision", "kind", "component_key", "baseline",
            "exploitation", "automatable", "deployed", "environment", "service",
            "project_version", "exposure", "reachability", "human_impact", "trust", "path",
            "explanation",
        }
        for name, value in out.items():
            if name == "path":
                assert value == list(r.path)
            elif name != "explanation":
                assert value == getattr(r, name), name
        assert len(out["explanation"]) == len(r.explanation)


def test_findings_of_one_context_and_advisory_share_their_tuples() -> None:
    """A full run's ranked findings hold the very `facts` and `context` objects of the
    queue's columns: one per distinct advisory facts and deployment context, none per
    finding."""
    result = rank(inputs=generate(2, findings=300))
    mids = {id(m) for m in result.columns.mids}
    tails = {id(t) for t in result.columns.tails}
    assert all(id(r.facts) in mids and id(r.context) in tails for r in result.findings)
    assert len({id(r.context) for r in result.findings}) < len(result.findings) / 2


def test_findings_deployed_nowhere_share_a_context_per_baseline_keeping_its_sign() -> None:
    inputs = generate(3, findings=40)
    nowhere = [Finding(id=f"n{i}", vuln_id="CVE-1", severity="high",
                       project_version="gone@1", component_key="pkg:pypi/x",
                       baseline=b) for i, b in enumerate((12.5, 12.5, 0.0, -0.0))]
    result = rank(inputs=replace(inputs, findings=(*inputs.findings, *nowhere)))
    by_id = {r.finding_id: r for r in result.findings}
    a, b, zero, negative_zero = (by_id[f"n{i}"] for i in range(4))
    assert not a.deployed
    assert a.context is b.context
    assert a.context_factors[-1].value == 12.5
    assert zero.context is not negative_zero.context
    assert math.copysign(1.0, zero.context_factors[-1].value) == 1.0
    assert math.copysign(1.0, negative_zero.context_factors[-1].value) == -1.0
