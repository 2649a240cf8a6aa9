"""What changed between two gathers (`inputs.changed_between`), found from the records that
differ, against its definition: a version is named when the deployments or records
with its key differ as sets, a service when the (environment, service, version, impact)
of the deployments differ as sets. Random deployments and versions changed at random;
the only difference allowed is the one the function's docstring names (a service named
too, never one missed)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from trustrank.ranking.inputs import Gathered, changed_between
from trustrank.ranking.inputs.deployments import read_again
from trustrank.risk import inputs as ri


def _gathered(deployments: list[ri.Deployment], versions: list[ri.ProjectVersion]) -> Gathered:
    inputs = ri.RankInputs(deployments=tuple(deployments), project_versions=tuple(versions))
    return Gathered(inputs=inputs, finding_ids={}, window_minutes=60.0)


def _by_definition(old: Gathered, new: Gathered) -> tuple[set[str], set[tuple[str, str]]]:
    def by_version(inputs: ri.RankInputs) -> dict[str, set[object]]:
        out: dict[str, set[object]] = {}
        for d in inputs.deployments:
            out.setdefault(d.project_version, set()).add(d)
        for p in inputs.project_versions:
            out.setdefault(p.key, set()).add(p)
        return out

    a, b = by_version(old.inputs), by_version(new.inputs)
    versions = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    four_a = {(d.environment, d.service, d.project_version, d.human_impact)
              for d in old.inputs.deployments}
    four_b = {(d.environment, d.service, d.project_version, d.human_impact)
              for d in new.inputs.deployments}
    return versions, {(k[0], k[1]) for k in four_a ^ four_b}


@pytest.mark.parametrize("seed", range(40))
def test_changes_found_from_the_records_that_differ_are_the_defined_ones(seed):
    rng = random.Random(seed)
    impacts = ["low", "medium", "high", "very high"]

    def deployment(k: int) -> ri.Deployment:
        return ri.Deployment(environment=rng.choice(["prod", "stage"]), service=f"svc-{k}",
                             project_version=str(rng.randint(1, 12)),
                             human_impact=rng.choice(impacts), source=rng.choice(["API", ""]))

    deployments = [deployment(k) for k in range(rng.randint(0, 30))]
    versions = [ri.ProjectVersion(key=str(k), sbom_signed=rng.random() < 0.3)
                for k in range(1, 13)]
    old = _gathered(deployments, versions)
    now = list(deployments)
    for _ in range(rng.randint(0, 4)):
        kind = rng.randrange(7)
        if kind == 0 and now:
            now.pop(rng.randrange(len(now)))
        elif kind == 1:
            now.append(deployment(100 + rng.randrange(5)))
        elif kind == 2 and now:
            k = rng.randrange(len(now))
            now[k] = replace(now[k], human_impact=rng.choice(impacts))
        elif kind == 3 and now:
            k = rng.randrange(len(now))
            now[k] = replace(now[k], source="page", project_version_name="shop@2")
        elif kind == 4:
            k = rng.randrange(len(versions))
            versions = [*versions[:k], replace(versions[k], sbom_signed=not versions[k]
                                                .sbom_signed), *versions[k + 1:]]
        elif kind == 5:
            versions = [*versions, ri.ProjectVersion(key=str(50 + rng.randrange(3)))]
        elif kind == 6 and versions:
            versions = versions[1:]
    new = _gathered(now, versions)
    assert changed_between(old, new) == _by_definition(old, new)
    # Equal records in new tuples: nothing changed.
    assert changed_between(old, _gathered(list(deployments), list(old.inputs.project_versions))
                           ) == (set(), set())


def test_a_service_deployed_twice_alike_is_named_when_one_of_them_goes():
    """The one difference from the definition: two deployments of one service name that
    agree on environment, version and impact (two namespaces); one goes, and the service
    is named though its (environment, service, version, impact) is still deployed."""
    a = ri.Deployment(environment="prod", service="api", project_version="1", source="API")
    b = ri.Deployment(environment="prod", service="api", project_version="1", source="page")
    old, new = _gathered([a, b], []), _gathered([a], [])
    assert _by_definition(old, new) == ({"1"}, set())
    assert changed_between(old, new) == ({"1"}, {("prod", "api")})


def _gathered_from_rows(rows: list[tuple], versions: list[ri.ProjectVersion]) -> Gathered:
    """A gather as `deployments_read` makes it: the rows read, and their records."""
    from trustrank.ranking.inputs.deployments import DeploymentsRead, _record

    read = DeploymentsRead(list(rows), tuple(map(_record, rows)),
                           frozenset(r[2] for r in rows))
    inputs = ri.RankInputs(deployments=read.records, project_versions=tuple(versions))
    return Gathered(inputs=inputs, finding_ids={}, window_minutes=60.0, deployed=read)


@pytest.mark.parametrize("seed", range(40))
def test_changes_found_from_the_rows_read_are_the_defined_ones(seed):
    """Two gathers that kept the rows they read: the deployments' changes come from the
    rows that differ, and are those the records' definition gives."""
    rng = random.Random(1000 + seed)
    impacts = ["low", "medium", "high", "very high"]

    def row(k: int) -> tuple:
        return (rng.choice(["prod", "stage"]), f"svc-{k}", rng.randint(1, 12),
                rng.choice(impacts), rng.choice(["api", "sbom"]), "shop", "1.0")

    rows = [row(k) for k in range(rng.randint(0, 30))]
    versions = [ri.ProjectVersion(key=str(k)) for k in range(1, 13)]
    now = list(rows)
    for _ in range(rng.randint(0, 4)):
        kind = rng.randrange(4)
        if kind == 0 and now:
            now.pop(rng.randrange(len(now)))
        elif kind == 1:
            now.append(row(100 + rng.randrange(5)))
        elif kind == 2 and now:
            k = rng.randrange(len(now))
            now[k] = (*now[k][:3], rng.choice(impacts), *now[k][4:])
        elif kind == 3 and now:
            k = rng.randrange(len(now))
            now[k] = (*now[k][:4], "manual", "shop", "2.0")
    old, new = _gathered_from_rows(rows, versions), _gathered_from_rows(now, versions)
    assert changed_between(old, new) == _by_definition(old, new)
    # The rows read again after the old ones, as a gather reads them: compared in place
    # when as many, by their records otherwise; the same changes either way.
    again = read_again(old.deployed, list(now))
    assert again.records == new.deployed.records
    assert again.version_ids == new.deployed.version_ids
    assert (again.base is old.deployed.rows) == (len(now) == len(rows) and now != rows)
    if again.base is not None:
        assert list(again.differ) == [k for k in range(len(now)) if now[k] != rows[k]]
        assert all(again.records[k] is old.deployed.records[k]
                   for k in range(len(now)) if k not in again.differ)
    read = replace(new, deployed=again, inputs=replace(new.inputs, deployments=again.records))
    assert changed_between(old, read) == _by_definition(old, new)


@pytest.mark.parametrize("seed", range(30))
def test_versions_whose_components_differ_are_named_from_the_held_sboms(seed):
    """A version is named when its components differ as a set; gathers that kept their
    SBOMs' components compare only the SBOMs whose tuple is not the one held before, and
    name the same versions as a comparison of every version's records."""
    rng = random.Random(2000 + seed)

    def component(pv: int, k: int) -> ri.Component:
        return ri.Component(project_version=str(pv), key=f"pkg:npm/c{k}",
                            hashes_present=rng.random() < 0.5)

    old_sboms = {(100 + pv, pv): tuple(component(pv, k) for k in range(rng.randint(0, 4)))
                 for pv in range(1, 15)}
    new_sboms = dict(old_sboms)
    for _ in range(rng.randint(0, 5)):
        kind = rng.randrange(5)
        key = rng.choice(sorted(new_sboms)) if new_sboms else None
        if kind == 0 and key:  # an equal tuple read again: not a change
            new_sboms[key] = tuple(new_sboms[key])[::-1]
        elif kind == 1 and key:
            new_sboms[key] = (*new_sboms[key], component(key[1], 9))
        elif kind == 2 and key:
            del new_sboms[key]
        elif kind == 3:
            pv = 20 + rng.randrange(3)
            new_sboms[(200 + pv, pv)] = (component(pv, 1),)
        elif kind == 4 and key:  # a new SBOM of the same version, same components
            new_sboms[(key[0] + 1000, key[1])] = new_sboms.pop(key)

    def gathered(sboms: dict) -> Gathered:
        inputs = ri.RankInputs(components=tuple(c for held in sboms.values() for c in held))
        return Gathered(inputs=inputs, finding_ids={}, window_minutes=60.0, sboms=sboms)

    def by_version(sboms: dict) -> dict[str, set]:
        return {str(pv): set(held) for (_s, pv), held in sboms.items() if held}

    a, b = by_version(old_sboms), by_version(new_sboms)
    expected = {k for k in a.keys() | b.keys() if a.get(k, set()) != b.get(k, set())}
    assert changed_between(gathered(old_sboms), gathered(new_sboms))[0] == expected
    # Without the held SBOMs: the records compared give the same versions.
    plain = [replace(gathered(s), sboms=None) for s in (old_sboms, new_sboms)]
    assert changed_between(*plain)[0] == expected
