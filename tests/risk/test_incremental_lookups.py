"""An incremental run updates the previous run's lookups (`factors.InputLookups`), its
services' results and the summed parts of its inputs digest by the versions and services
the caller names, instead of building them again over every record. Each test changes
something those lookups hold and checks the run against a full one: a lookup left stale
would give the previous score, trust or digest."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.risk.generate import generate
from trustrank.risk import (
    Deployment,
    ObservedComponent,
    RankInputs,
    RankResult,
    ServiceLibraries,
    canonical_json,
    rank,
    rank_incremental,
)
from trustrank.risk.factors import InputLookups
from trustrank.risk.inputs import RankSettings
from trustrank.risk.results import SummedPart
from trustrank.risk.service_results import service_places


def _anew(inputs: RankInputs) -> RankInputs:
    """Equal records in new collections, as the ranking run's gather reads deployments,
    versions, components and libraries every time: nothing is the previous object."""
    return replace(inputs, **{name: tuple(list(getattr(inputs, name))) for name in (
        "deployments", "project_versions", "components", "libraries")})


def _check(previous: RankResult, changed: RankInputs, **names: Any) -> RankResult:
    """The incremental run from `previous`, asserted equal to a full run in everything it
    keeps for the next one; with the changed findings named (none unless given), as the
    ranking run calls it."""
    names.setdefault("changed_findings", set())
    lookups_before = previous.lookups
    result = rank_incremental(previous=previous, inputs=changed, **names)
    full = rank(inputs=changed)
    assert canonical_json(result) == canonical_json(full)
    assert result.inputs_digest == full.inputs_digest
    assert result.lookups == InputLookups.build(changed)
    for name, (_records, part) in full.digest_parts.items():
        assert result.digest_parts[name][1] == part, name
    if result.service_places is not None:
        assert result.service_places == service_places(result.services)
    # The previous result is left as it was (a worker may rank from it again).
    assert previous.lookups is lookups_before
    return result


def _queue(result: RankResult) -> list[tuple[Any, ...]]:
    return [r[:-1] for r in result.findings]


def _service_trust(result: RankResult, env: str, name: str) -> float:
    return next(s.trust for s in result.services if (s.environment, s.name) == (env, name))


def test_a_full_run_keeps_its_lookups_and_summed_digest_parts():
    inputs = generate(3)
    result = rank(inputs=inputs)
    assert result.lookups == InputLookups.build(inputs)
    assert all(isinstance(result.digest_parts[name][1], SummedPart) for name in (
        "deployments", "project_versions", "components", "libraries"))


@pytest.mark.parametrize("seed", range(4))
def test_a_versions_components_change_reaches_scores_trust_and_digest(seed):
    inputs = generate(seed)
    previous = rank(inputs=inputs)
    version = next(d.project_version for d in inputs.deployments)
    changed = _anew(replace(inputs, components=tuple(
        replace(c, hashes_present=not c.hashes_present, supplier_known=not c.supplier_known)
        if c.project_version == version else c for c in inputs.components)))
    result = _check(previous, changed, changed_project_versions={version})
    # The change matters: a stale component lookup would keep the previous queue.
    assert _queue(result) != _queue(previous)
    d = next(d for d in inputs.deployments if d.project_version == version)
    assert _service_trust(result, d.environment, d.service) != _service_trust(
        previous, d.environment, d.service)


def test_a_version_signed_since_reaches_trust():
    inputs = generate(5)
    previous = rank(inputs=inputs)
    version = next(d.project_version for d in inputs.deployments)
    changed = _anew(replace(inputs, project_versions=tuple(
        replace(p, sbom_signed=not p.sbom_signed) if p.key == version else p
        for p in inputs.project_versions)))
    result = _check(previous, changed, changed_project_versions={version})
    assert (version in result.lookups.signed) != (version in previous.lookups.signed)


def _evidence_changed(inputs: RankInputs, d: Deployment, traced: bool) -> RankInputs:
    """`d`'s service now sends traces naming every component of its version, or none."""
    key = (d.environment, d.service)
    observed = tuple(ObservedComponent(component_key=c.key, calls_per_minute=5.0,
                                       evidence="scope test")
                     for c in inputs.components if c.project_version == d.project_version)
    return _anew(replace(inputs, libraries=(
        *[x for x in inputs.libraries if (x.environment, x.service) != key],
        ServiceLibraries(environment=d.environment, service=d.service, traced=traced,
                         observed=observed if traced else ()))))


@pytest.mark.parametrize("seed", range(4))
def test_a_services_library_evidence_change_reaches_reachability(seed):
    inputs = generate(seed)
    previous = rank(inputs=inputs)
    # The first deployed service whose new evidence moves some finding (a stale library
    # lookup would keep the previous queue).
    d, changed = next(
        (d, changed) for d in inputs.deployments for traced in (True, False)
        if _queue(rank(inputs=(changed := _evidence_changed(inputs, d, traced))))
        != _queue(previous))
    key = (d.environment, d.service)
    result = _check(previous, changed, changed_services={key})
    assert _queue(result) != _queue(previous)
    assert result.lookups.libraries[key] != previous.lookups.libraries.get(key)


@pytest.mark.parametrize("named", ["service", "versions", "both"])
def test_a_deployment_that_moves_to_another_version_however_it_is_named(named):
    """A service now runs another version. Named by its service alone or by its two
    versions alone, the run still makes the entries of both versions and the service
    again (every deployment of a named one, before and after, is followed)."""
    inputs = generate(7)
    previous = rank(inputs=inputs)
    d = inputs.deployments[0]
    other = next(v.key for v in inputs.project_versions if v.key != d.project_version)
    moved = replace(d, project_version=other, human_impact="very high")
    changed = _anew(replace(inputs, deployments=tuple(
        moved if x is d else x for x in inputs.deployments)))
    names: dict[str, Any] = {}
    if named in ("service", "both"):
        names["changed_services"] = {(d.environment, d.service)}
    if named in ("versions", "both"):
        names["changed_project_versions"] = {d.project_version, other}
    result = _check(previous, changed, **names)
    assert moved in result.lookups.by_service[(d.environment, d.service)]
    assert d not in result.lookups.by_version.get(d.project_version, [])


def test_a_deployment_of_a_service_the_graph_never_saw_adds_a_service_result():
    inputs = generate(2)
    previous = rank(inputs=inputs)
    version = inputs.project_versions[0].key
    changed = _anew(replace(inputs, deployments=(*inputs.deployments, Deployment(
        environment="env0", service="declared-only", project_version=version))))
    result = _check(previous, changed, changed_services={("env0", "declared-only")},
                    changed_project_versions={version})
    assert ("env0", "declared-only") in {(s.environment, s.name) for s in result.services}
    # Then it goes again.
    _check(result, _anew(inputs), changed_services={("env0", "declared-only")},
           changed_project_versions={version})


def test_a_closed_finding_reuses_the_lookups_as_they_are():
    inputs = generate(4)
    previous = rank(inputs=inputs)
    closed = inputs.findings[0]
    changed = _anew(replace(inputs, findings=inputs.findings[1:]))
    result = _check(previous, changed, changed_findings={closed.id})
    assert result.lookups is previous.lookups
    assert closed.id not in {r.finding_id for r in result.findings}


def test_a_settings_version_change_ranks_in_full_with_its_own_lookups():
    inputs = generate(6)
    previous = rank(inputs=inputs)
    version = next(d.project_version for d in inputs.deployments)
    changed = _anew(replace(inputs, components=tuple(
        replace(c, hashes_present=not c.hashes_present) if c.project_version == version
        else c for c in inputs.components)))
    settings = replace(RankSettings(), version="test-2")
    # Nothing named: a full run does not need it.
    result = rank_incremental(previous=previous, inputs=changed, settings=settings,
                              changed_findings=set())
    assert canonical_json(result) == canonical_json(rank(inputs=changed, settings=settings))
    assert result.lookups == InputLookups.build(changed)


def test_chained_runs_carry_the_lookups_along():
    """Several runs in a row, each from the last result: a version's components, a
    service's evidence and a deployment's impact changed in turn; each run equals a full
    one (the lookups carried along are never those of an earlier state)."""
    inputs = generate(9, findings=200)
    previous = rank(inputs=inputs)
    for step in range(6):
        d = inputs.deployments[step % len(inputs.deployments)]
        key = (d.environment, d.service)
        names: dict[str, Any]
        if step % 3 == 0:
            changed = replace(inputs, components=tuple(
                replace(c, hashes_present=not c.hashes_present)
                if c.project_version == d.project_version else c for c in inputs.components))
            names = {"changed_project_versions": {d.project_version}}
        elif step % 3 == 1:
            changed = replace(inputs, libraries=tuple(
                replace(x, traced=not x.traced) if (x.environment, x.service) == key else x
                for x in inputs.libraries))
            names = {"changed_services": {key}}
        else:
            changed = replace(inputs, deployments=tuple(
                replace(x, human_impact="low" if x.human_impact != "low" else "high")
                if x is d else x for x in inputs.deployments))
            names = {"changed_services": {key}, "changed_project_versions": {d.project_version}}
        changed = _anew(changed)
        previous = _check(previous, changed, **names)
        inputs = changed


def test_past_its_limit_an_incremental_run_names_how_many_it_would_rescore():
    """`rescore_above`: a run that would score more findings raises `RescoreTooLarge`
    with their count, before it scores any; at the limit it ranks as a full run does."""
    from trustrank.risk.incremental import RescoreTooLarge

    inputs = generate(2)
    previous = rank(inputs=inputs)
    ids = {f.id for f in inputs.findings}
    with pytest.raises(RescoreTooLarge) as raised:
        rank_incremental(previous=previous, inputs=inputs, changed_findings=ids,
                         rescore_above=len(ids) - 1)
    assert raised.value.count == len(ids)
    _check(previous, inputs, changed_findings=ids, rescore_above=len(ids))
