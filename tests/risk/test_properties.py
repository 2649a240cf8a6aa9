"""Properties on generated graphs: more urgency never lowers a rank, lower trust never
lowers a rank, equal inputs give byte-identical results, incremental equals full."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.risk.generate import generate, shuffled
from trustrank.risk import (
    ObservedComponent,
    RankInputs,
    canonical_json,
    diff_results,
    rank,
    rank_incremental,
    result_digest,
)
from trustrank.risk.inputs import DECISIONS, HUMAN_IMPACTS, RankSettings, ssvc_exposure
from trustrank.risk.ranked_queue import held_of
from trustrank.risk.scoring import is_automatable, ssvc_level

SEEDS = range(8)


def _key(r):
    # The queue order (risk-2): decision, deployed, SSVC level, score.
    level = ssvc_level(exploitation=r.exploitation, exposure=ssvc_exposure(
        r.exposure, RankSettings()), automatable=r.automatable,
        human_impact=r.human_impact) if r.deployed else 0
    return (DECISIONS.index(r.decision), r.deployed, level, r.score)


def _by_id(result):
    return {r.finding_id: r for r in result.findings}


def _assert_not_lower(before, after, fid):
    """F's own sort key does not drop, and no finding whose row did not change passes it."""
    b, a = _by_id(before), _by_id(after)
    assert _key(a[fid]) >= _key(b[fid]), (fid, b[fid], a[fid])
    unchanged = {k for k in b if k != fid and _key(a[k]) == _key(b[k])}
    above_before = sum(1 for k in unchanged if b[k].rank < b[fid].rank)
    above_after = sum(1 for k in unchanged if a[k].rank < a[fid].rank)
    assert above_after <= above_before


def _with_finding(inputs: RankInputs, fid, **changes) -> RankInputs:
    return replace(inputs, findings=tuple(
        replace(f, **changes) if f.id == fid else f for f in inputs.findings))


def _vulns(inputs):
    return [f for f in inputs.findings if f.kind == "vulnerability"]


@pytest.mark.parametrize("seed", SEEDS)
def test_raising_a_finding_own_factor_never_lowers_its_rank(seed):
    inputs = generate(seed)
    before = rank(inputs=inputs, with_digest=False)
    rng = random.Random(seed)
    for f in rng.sample(_vulns(inputs), 12):
        changes: list[dict[str, object]] = [{"in_kev": True}]
        if f.epss is not None:
            changes.append({"epss": min(1.0, f.epss + rng.uniform(0.001, 0.5))})
        if f.cvss_score is not None:
            changes.append({"cvss_score": min(10.0, f.cvss_score + rng.uniform(0.1, 3))})
        if not is_automatable(f.cvss_vector):
            changes.append({"cvss_vector": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"})
        for change in changes:
            after = rank(inputs=_with_finding(inputs, f.id, **change), with_digest=False)
            _assert_not_lower(before, after, f.id)
            assert _by_id(after)[f.id].rank <= _by_id(before)[f.id].rank, change


def _deployments_of(inputs, f):
    if f.service:
        return [d for d in inputs.deployments
                if (d.environment, d.service) == (f.environment, f.service)]
    return [d for d in inputs.deployments if d.project_version == f.project_version]


@pytest.mark.parametrize("seed", SEEDS)
def test_raising_exposure_reachability_or_impact_never_lowers_a_rank(seed):
    inputs = generate(seed)
    before = rank(inputs=inputs, with_digest=False)
    rng = random.Random(seed)
    checked = 0
    for f in rng.sample(_vulns(inputs), 20):
        deps = _deployments_of(inputs, f)
        if not deps:
            continue
        d = rng.choice(deps)
        checked += 1
        exposed = replace(inputs, services=tuple(
            replace(s, ingress_override=True) if (s.environment, s.name) == (d.environment,
                                                                              d.service) else s
            for s in inputs.services))
        # Only on a service that sends traces already: evidence from an untraced one would
        # also reveal its exposure, which may be smaller than the unknown's "open"
        # (risk-2: unknown exposure counts as open, see test_untraced.py).
        reached = replace(inputs, libraries=tuple(
            replace(lib, traced=True, observed=(*lib.observed, ObservedComponent(
                component_key=f.component_key, calls_per_minute=10, evidence="test")))
            if (lib.environment, lib.service) == (d.environment, d.service) and lib.traced
            else lib
            for lib in inputs.libraries))
        step = min(3, HUMAN_IMPACTS.index(d.human_impact) + 1)
        impacted = replace(inputs, deployments=tuple(
            replace(x, human_impact=HUMAN_IMPACTS[step]) if x == d else x
            for x in inputs.deployments))
        for changed in (exposed, reached, impacted):
            _assert_not_lower(before, rank(inputs=changed, with_digest=False), f.id)
    assert checked


@pytest.mark.parametrize("seed", SEEDS)
def test_lower_trust_never_lowers_a_rank(seed):
    inputs = generate(seed)
    before = rank(inputs=inputs, with_digest=False)
    rng = random.Random(seed)
    anchors = [s for s in inputs.services if s.identity_strength is not None]
    variants = [
        replace(inputs, services=tuple(
            replace(s, identity_strength=None) if s == victim else s for s in inputs.services))
        for victim in rng.sample(anchors, min(3, len(anchors)))
    ]
    variants.append(replace(inputs, edges=tuple(replace(e, sig=e.sig / 2)
                                                for e in inputs.edges)))
    variants.append(replace(inputs, project_versions=tuple(
        replace(v, sbom_signed=False) for v in inputs.project_versions)))
    variants.append(replace(inputs, components=tuple(
        replace(c, hashes_present=False, supplier_known=False) for c in inputs.components)))
    for changed in variants:
        after = rank(inputs=changed, with_digest=False)
        services_after = {(s.environment, s.name): s.trust for s in after.services}
        for s in before.services:
            assert services_after[(s.environment, s.name)] <= s.trust + 1e-9
        # A finding's own trust may even rise: with one deployment less trusted, another
        # deployment can become its most urgent one. Its place never drops.
        for r in before.findings:
            _assert_not_lower(before, after, r.finding_id)


@pytest.mark.parametrize("seed", SEEDS)
def test_same_inputs_give_byte_identical_results_in_any_order(seed):
    inputs = generate(seed)
    first = rank(inputs=inputs)
    again = rank(inputs=inputs)
    mixed = rank(inputs=shuffled(inputs, seed + 100))
    assert canonical_json(first) == canonical_json(again) == canonical_json(mixed)
    assert first.inputs_digest == mixed.inputs_digest
    assert result_digest(first) == result_digest(mixed)
    other = rank(inputs=_with_finding(inputs, inputs.findings[0].id, baseline=-1.0))
    assert other.inputs_digest != first.inputs_digest


def test_every_finding_is_ranked_once_and_decisions_come_first():
    result = rank(inputs=generate(3, findings=300))
    assert [r.rank for r in result.findings] == list(range(1, 301))
    decisions = [DECISIONS.index(r.decision) for r in result.findings]
    assert decisions == sorted(decisions, reverse=True)
    for r in result.findings:
        assert 0 <= r.score <= 100
        assert r.explanation


@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_incremental_run_equals_a_full_run(seed, named):
    inputs = generate(seed)
    previous = rank(inputs=inputs)
    rng = random.Random(seed)
    version = rng.choice([v.key for v in inputs.project_versions])
    lib = rng.choice(inputs.libraries)
    edge = rng.choice([e for e in inputs.edges if e.environment == "env1"])
    target = rng.choice(_vulns(inputs))
    changed = replace(
        inputs,
        components=tuple(replace(c, hashes_present=not c.hashes_present)
                         if c.project_version == version else c for c in inputs.components),
        libraries=tuple(replace(x, traced=not x.traced) if x == lib else x
                        for x in inputs.libraries),
        edges=tuple(replace(e, sig=100 - e.sig) if e == edge else e for e in inputs.edges),
        findings=tuple(replace(f, in_kev=not f.in_kev) if f == target else f
                       for f in inputs.findings),
    )
    incremental = rank_incremental(
        previous=previous, inputs=changed, changed_project_versions={version},
        changed_services={(lib.environment, lib.service)},
        # Named: only the changed finding is compared, the others taken as they were.
        changed_findings={target.id} if named else None,
    )
    assert incremental.analyses["env0"] is previous.analyses["env0"]
    assert canonical_json(incremental) == canonical_json(rank(inputs=changed))


def test_diff_names_what_moved_and_why():
    inputs = generate(5)
    before = rank(inputs=inputs)
    target = next(f for f in _vulns(inputs) if not f.in_kev and before.findings[-1].finding_id
                  != f.id and _by_id(before)[f.id].rank > 10 and _by_id(before)[f.id].deployed)
    after = rank(inputs=_with_finding(inputs, target.id, in_kev=True, epss=0.97))
    moves = diff_results(before=before, after=after, limit=5)
    top = moves[0]
    assert top.finding_id == target.id
    assert top.moved > 0 and top.rank_after < top.rank_before
    names = [c.name for c in top.changes]
    assert "exploitation" in names and "epss" in names
    assert diff_results(before=before, after=before) == ()


@pytest.mark.parametrize("named", [False, True])
def test_incremental_run_handles_new_and_closed_findings(named):
    inputs = generate(11)
    previous = rank(inputs=inputs)
    closed = inputs.findings[3]
    new = replace(inputs.findings[5], id="brand-new", in_kev=True)
    changed = replace(inputs, findings=(*[f for f in inputs.findings if f is not closed], new))
    incremental = rank_incremental(
        previous=previous, inputs=changed,
        changed_findings={closed.id, "brand-new"} if named else None,
    )
    assert canonical_json(incremental) == canonical_json(rank(inputs=changed))
    ids = {r.finding_id for r in incremental.findings}
    assert "brand-new" in ids and closed.id not in ids


@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_incremental_merge_places_many_rescored_findings_like_a_full_run(seed, named):
    """Rescored findings land all over the queue (and at both ends): the merge by binary
    search gives the full run's order, and kept findings whose rank held are reused."""
    inputs = generate(seed, findings=400)
    previous = rank(inputs=inputs)
    rng = random.Random(seed)
    targets = {f.id for f in rng.sample(_vulns(inputs), 40)}
    targets |= {previous.findings[0].finding_id, previous.findings[-1].finding_id}
    changed = replace(inputs, findings=tuple(
        replace(f, in_kev=not f.in_kev, epss=rng.random()) if f.id in targets else f
        for f in inputs.findings))
    incremental = rank_incremental(previous=previous, inputs=changed,
                                   changed_findings=targets if named else None)
    assert canonical_json(incremental) == canonical_json(rank(inputs=changed))
    before = {r.finding_id: r for r in previous.findings}
    for r in incremental.findings:
        old = before[r.finding_id]
        if r.finding_id not in targets and old.rank == r.rank:
            assert r is old


def test_incremental_run_rejects_duplicate_ids():
    inputs = generate(2, findings=50)
    previous = rank(inputs=inputs)
    with pytest.raises(ValueError, match="unique"):
        rank_incremental(previous=previous, inputs=replace(
            inputs, findings=(*inputs.findings, inputs.findings[0])))


@pytest.mark.parametrize("seed", SEEDS)
def test_chained_incremental_runs_equal_full_runs_and_name_the_places_that_changed(seed):
    """Several incremental runs in a row, each from the last (the queue index carried
    along): findings changed, closed and new, a deployment's human impact, a version's
    components and an edge of the graph. Each equals a full run, names exactly the places
    whose finding differs, and leaves its predecessor usable as it was."""
    rng = random.Random(seed)
    inputs = generate(seed, findings=300)
    previous = rank(inputs=inputs)
    for step in range(5):
        vulns = _vulns(inputs)
        targets = rng.sample(vulns, 6)
        closed = targets[0]
        new = replace(targets[1], id=f"new-{step}", in_kev=not targets[1].in_kev)
        records = {f.id: replace(f, epss=rng.random(), in_kev=not f.in_kev)
                   for f in targets[2:]}
        deployment = rng.choice(inputs.deployments)
        version = rng.choice([v.key for v in inputs.project_versions])
        edge = rng.choice(inputs.edges)
        changed = replace(
            inputs,
            deployments=tuple(
                replace(d, human_impact=rng.choice(HUMAN_IMPACTS)) if d is deployment else d
                for d in inputs.deployments),
            components=tuple(replace(c, hashes_present=not c.hashes_present)
                             if c.project_version == version else c
                             for c in inputs.components) if step % 2 else inputs.components,
            edges=tuple(replace(e, sig=100 - e.sig) if e is edge and step == 3 else e
                        for e in inputs.edges),
            findings=(*[records.get(f.id, f) for f in inputs.findings if f is not closed], new),
        )
        named = {closed.id, new.id, *records}
        result = rank_incremental(
            previous=previous, inputs=changed,
            changed_project_versions={version, deployment.project_version},
            changed_services={(deployment.environment, deployment.service)},
            changed_findings=named, changed_records=[new, *records.values()],
        )
        assert canonical_json(result) == canonical_json(rank(inputs=changed))
        # The tuples held (an incremental queue reads each with its new rank).
        before, held = held_of(previous.findings), held_of(result.findings)
        differ = [i for i, r in enumerate(held) if i >= len(before) or before[i] is not r]
        assert list(result.changed_places) == differ
        # The predecessor's index is untouched: ranking from it again gives the same.
        again = rank_incremental(
            previous=previous, inputs=changed,
            changed_project_versions={version, deployment.project_version},
            changed_services={(deployment.environment, deployment.service)},
            changed_findings=named, changed_records=[new, *records.values()],
        )
        assert canonical_json(again) == canonical_json(result)
        inputs, previous = changed, result


@pytest.mark.parametrize("seed", SEEDS)
def test_a_graph_change_rescores_only_the_findings_of_the_services_it_changed(seed):
    """A trace window that changes an environment's graph without changing what the graph
    says of the services its findings run on (here: a service nobody calls appears) keeps
    every ranked finding as it was, where the environment's findings were all rescored."""
    inputs = generate(seed)
    previous = rank(inputs=inputs)
    first = next(s for s in inputs.services if s.environment == "env1")
    changed = replace(inputs, services=(*inputs.services, replace(first, name="lonely")))
    result = rank_incremental(previous=previous, inputs=changed, changed_findings=set())
    assert result.analyses["env1"] is not previous.analyses["env1"]
    assert canonical_json(result) == canonical_json(rank(inputs=changed))
    assert all(a is b for a, b in zip(result.findings, previous.findings, strict=True))
    assert list(result.changed_places) == []
