"""Properties over empty and tiny inputs (0–3 findings, 0–3 services), drawn by hypothesis:
a queue is ranked 1..n without gaps, every open finding once; no input is too small; an
incremental run from any state to any other equals a full run on the new state, however
many runs are chained, and carries a queue index equal to one built from scratch. The
generated graphs of test_properties are never this small: an empty queue followed by one
finding once made every incremental run of a team fail."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trustrank.risk import (
    CallEdge,
    Component,
    Deployment,
    Finding,
    ObservedComponent,
    ProjectVersion,
    RankInputs,
    RankResult,
    RootSpanOrigin,
    Service,
    ServiceLibraries,
    canonical_json,
    rank,
    rank_incremental,
)
from trustrank.risk.inputs import DECISIONS, HUMAN_IMPACTS
from trustrank.risk.queue import QueueIndex
from trustrank.risk.ranked_queue import held_of

SMALL = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples in every run: a failure is reproducible
    suppress_health_check=[HealthCheck.too_slow],
)

ENVS = ("prod", "stage")
NAMES = ("a", "b", "c")
VERSIONS = ("v0", "v1")
KEYS = ("pkg:pypi/x", "pkg:pypi/y")
VECTORS = ("", "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
           "CVSS:3.1/AV:L/AC:H/PR:L/UI:N/S:U/C:L/I:N/A:N")
SUB_KINDS = (("identity", "expired"), ("identity", "weak_key"),
             ("reliability", "broken_context"))
IDS = ("f1", "f2", "f3", "f10")
scores = st.floats(min_value=0, max_value=100, allow_nan=False)


@st.composite
def vulnerabilities(draw: st.DrawFn, fid: str) -> Finding:
    epss = draw(st.none() | st.floats(min_value=0, max_value=1))
    return Finding(
        id=fid, vuln_id=draw(st.sampled_from(("CVE-1", "CVE-2"))),
        severity=draw(st.sampled_from(("low", "critical", "unknown"))),
        cvss_score=draw(st.none() | st.floats(min_value=0, max_value=10)),
        cvss_vector=draw(st.sampled_from(VECTORS)), in_kev=draw(st.booleans()),
        kev_date=draw(st.none() | st.just(date(2024, 1, 2))), epss=epss,
        epss_date=None if epss is None else date(2026, 11, 30),
        project_version=draw(st.sampled_from((*VERSIONS, "nowhere"))),
        component_key=draw(st.sampled_from(KEYS)), baseline=draw(scores),
    )


@st.composite
def others(draw: st.DrawFn, fid: str) -> Finding:
    kind, sub_kind = draw(st.sampled_from(SUB_KINDS))
    return Finding(id=fid, kind=kind, sub_kind=sub_kind,  # type: ignore[arg-type]
                   severity="high", environment=draw(st.sampled_from(ENVS)),
                   service=draw(st.sampled_from(NAMES)), baseline=draw(scores))


@st.composite
def findings(draw: st.DrawFn) -> tuple[Finding, ...]:
    ids = draw(st.lists(st.sampled_from(IDS), max_size=3, unique=True))
    return tuple(draw(vulnerabilities(fid) | others(fid)) for fid in ids)


@st.composite
def inputs(draw: st.DrawFn) -> RankInputs:
    """0–3 services over one or two environments, their calls, origins, deployments and
    library evidence, both versions' components, and 0–3 findings."""
    services = draw(st.lists(st.tuples(st.sampled_from(ENVS), st.sampled_from(NAMES)),
                             max_size=3, unique=True))
    edges, origins, deployments, libraries = [], [], [], []
    for env, name in services:
        others_here = [n for e, n in services if e == env and n != name]
        for callee in draw(st.lists(st.sampled_from(others_here), unique=True)
                           if others_here else st.just([])):
            edges.append(CallEdge(environment=env, caller=name, callee=callee,
                                  calls_per_minute=draw(st.floats(0, 500)),
                                  mtls_share=draw(st.floats(0, 1)),
                                  sig=draw(st.sampled_from((0.0, 50.0, 100.0)))))
        if draw(st.booleans()):
            origins.append(RootSpanOrigin(
                environment=env, service=name,
                address_class=draw(st.sampled_from(("local", "internal", "internet")))))
        version = draw(st.none() | st.sampled_from(VERSIONS))
        if version is not None:
            deployments.append(Deployment(environment=env, service=name, project_version=version,
                                          human_impact=draw(st.sampled_from(HUMAN_IMPACTS))))
            traced = draw(st.booleans())
            libraries.append(ServiceLibraries(
                environment=env, service=name, traced=traced,
                observed=tuple(ObservedComponent(component_key=k, calls_per_minute=1.0,
                                                 evidence="scope")
                               for k in KEYS if traced and draw(st.booleans()))))
    return RankInputs(
        services=tuple(Service(environment=e, name=n,
                               ingress_override=draw(st.sampled_from((None, True, False))),
                               identity_strength=draw(st.none() | st.floats(20, 100)))
                       for e, n in services),
        edges=tuple(edges), origins=tuple(origins), deployments=tuple(deployments),
        project_versions=tuple(ProjectVersion(key=v, sbom_signed=draw(st.booleans()))
                               for v in VERSIONS),
        components=tuple(Component(project_version=v, key=k,
                                   hashes_present=draw(st.booleans()))
                         for v in VERSIONS for k in KEYS if draw(st.booleans())),
        libraries=tuple(libraries), findings=draw(findings()),
    )


@st.composite
def successors(draw: st.DrawFn, before: RankInputs) -> RankInputs:
    """The next state: each collection either the previous one (the very object, as a
    gather that found it unchanged passes it) or drawn anew."""
    fresh = draw(inputs())
    return RankInputs(**{
        name: getattr(before, name) if draw(st.booleans()) else getattr(fresh, name)
        for name in RankInputs.__slots__
    })


def _changes(a: RankInputs, b: RankInputs) -> dict[str, Any]:
    """What a caller names for `rank_incremental` (the ranking run's `_changed_since` and
    its gather's changed findings): versions whose components, deployments or provenance
    changed, services whose library evidence or deployment changed, findings new, changed
    or gone, and the new records of those still open."""

    def by_version(x: RankInputs) -> dict[str, set[Any]]:
        out: dict[str, set[Any]] = {}
        for item in (*x.components, *x.deployments):
            out.setdefault(item.project_version, set()).add(item)
        for p in x.project_versions:
            out.setdefault(p.key, set()).add(p)
        return out

    va, vb = by_version(a), by_version(b)
    la = {(x.environment, x.service): x for x in a.libraries}
    lb = {(x.environment, x.service): x for x in b.libraries}
    da = {(d.environment, d.service): d for d in a.deployments}
    db = {(d.environment, d.service): d for d in b.deployments}
    fa, fb = {f.id: f for f in a.findings}, {f.id: f for f in b.findings}
    changed = {fid for fid in fa.keys() | fb.keys() if fa.get(fid) != fb.get(fid)}
    return {
        "changed_project_versions": {v for v in va.keys() | vb.keys()
                                     if va.get(v) != vb.get(v)},
        "changed_services": {s for s in la.keys() | lb.keys() if la.get(s) != lb.get(s)}
        | {s for s in da.keys() | db.keys() if da.get(s) != db.get(s)},
        "changed_findings": changed,
        "changed_records": [fb[fid] for fid in sorted(changed) if fid in fb],
    }


def _assert_well_ranked(result: RankResult, given: RankInputs) -> None:
    assert [r.rank for r in result.findings] == list(range(1, len(given.findings) + 1))
    assert sorted(r.finding_id for r in result.findings) == sorted(f.id for f in given.findings)
    decisions = [DECISIONS.index(r.decision) for r in result.findings]
    assert decisions == sorted(decisions, reverse=True)
    for r in result.findings:
        assert 0 <= r.score <= 100
        assert r.finding == next(f for f in given.findings if f.id == r.finding_id)


def _decoded(index: QueueIndex) -> list[tuple[str, str, str, tuple[str, str]]]:
    """Each place's codes as the values they stand for (two indexes of one queue may
    number them differently)."""
    versions = {c: v for v, c in index.versions.items()}
    envs = {c: e for e, c in index.envs.items()}
    services = {c: s for s, c in index.services.items()}
    return [(versions[a], versions[b], envs[c], services[d]) for a, b, c, d in zip(
        index.record_version.tolist(), index.context_version.tolist(), index.env.tolist(),
        index.service.tolist(), strict=True)]


@SMALL
@given(inputs())
def test_a_full_run_ranks_every_finding_once_without_gaps(given_inputs):
    result = rank(inputs=given_inputs)
    _assert_well_ranked(result, given_inputs)
    assert len(result.queue_index.env) == len(given_inputs.findings)
    assert canonical_json(result) == canonical_json(rank(inputs=given_inputs))


@SMALL
@given(inputs(), st.integers(min_value=1, max_value=4))
def test_a_queue_index_made_in_parts_is_the_one_made_whole(given_inputs, part):
    """A full run makes its queue's index a part at a time while the queue is stored:
    any part size, an empty queue included, gives the index `rank` makes."""
    result = rank(inputs=given_inputs, with_index=False)
    assert result.queue_index is None
    *steps, index = QueueIndex.in_parts(result.findings, part=part)
    assert steps == [None] * -(-len(result.findings) // part)
    assert index is not None
    assert _decoded(index) == _decoded(rank(inputs=given_inputs).queue_index)


def test_nothing_at_all_ranks_to_an_empty_queue():
    result = rank(inputs=RankInputs())
    assert result.findings == () and result.services == ()
    assert canonical_json(rank_incremental(previous=result, inputs=RankInputs(),
                                           changed_findings=())) == canonical_json(result)
    index = [*QueueIndex.in_parts(())][-1]
    assert index is not None and len(index.env) == 0


@SMALL
@given(st.data())
def test_chained_incremental_runs_equal_full_runs(data):
    """Three runs in a row from any state to any other (empty to empty, empty to one, one
    to empty, …), each from the last incremental result as a worker keeps it: the same
    queue as a full run, the places named as changed exactly those whose finding differs,
    and a queue index equal to one built from the new queue."""
    state = data.draw(inputs())
    named_previous = unnamed_previous = rank(inputs=state, with_index=data.draw(st.booleans()))
    for _step in range(3):
        after = data.draw(successors(state))
        full = rank(inputs=after)
        changes = _changes(state, after)
        named = rank_incremental(previous=named_previous, inputs=after, **changes)
        assert canonical_json(named) == canonical_json(full)
        _assert_well_ranked(named, after)
        assert named.inputs_digest == full.inputs_digest
        before = held_of(named_previous.findings)
        assert list(named.changed_places) == [
            i for i, r in enumerate(held_of(named.findings))
            if i >= len(before) or before[i] is not r]
        assert _decoded(named.queue_index) == _decoded(QueueIndex.build(full.findings))
        # Every finding compared (a caller that did not name them).
        unnamed = rank_incremental(
            previous=unnamed_previous, inputs=after,
            changed_project_versions=changes["changed_project_versions"],
            changed_services=changes["changed_services"])
        assert canonical_json(unnamed) == canonical_json(full)
        state, named_previous, unnamed_previous = after, named, unnamed


@SMALL
@given(st.data())
def test_a_rejected_run_leaves_its_predecessor_usable(data):
    """Duplicate finding ids are refused; the previous result (and its queue index) a
    worker keeps is as it was, and the next run from it equals a full run."""
    state = data.draw(inputs())
    previous = rank(inputs=state)
    after = data.draw(successors(state))
    if after.findings:
        bad = replace(after, findings=(*after.findings, after.findings[0]))
        try:
            rank_incremental(previous=previous, inputs=bad)
        except ValueError as exc:
            assert "unique" in str(exc)
        else:
            raise AssertionError("duplicate finding ids were ranked")
    before = _decoded(previous.queue_index)
    nxt = rank_incremental(previous=previous, inputs=after, **_changes(state, after))
    assert canonical_json(nxt) == canonical_json(rank(inputs=after))
    assert _decoded(previous.queue_index) == before
    assert before == _decoded(QueueIndex.build(previous.findings))
