"""Benchmark: match 10,000 components against 100,000 generated OSV advisories.

Advisories follow the OSV schema with the range shapes real databases use: GHSA-style npm
and Maven ECOSYSTEM ranges (often several intervals), PyPI ranges plus long `versions`
lists, Go SEMVER ranges with pseudo-versions, `last_affected` ceilings, withdrawn records
and aliases. Components are drawn from the same package universe (about half of them
named by some advisory) with versions inside, outside and between the ranges, and a few
unparseable ones.

Timed: building the package index and matching every component (what a project-version
match does after loading advisories). Not timed: generating the data.

    python bench/match.py [--components 10000] [--advisories 100000] [--seed 1]

Last line: {"seconds": …, "peak_mb": …}
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trustrank.vulns.engine.matching import (
    AdvisoryIndex,
    AdvisoryRef,
    ComponentRef,
    Verdict,
    affected_from_osv,
)

ECOSYSTEMS = [
    ("npm", "npm", 0.35),
    ("PyPI", "pypi", 0.25),
    ("Maven", "maven", 0.25),
    ("Go", "golang", 0.15),
]


def version(rng: random.Random, eco: str) -> str:
    major, minor, patch = rng.randint(0, 12), rng.randint(0, 30), rng.randint(0, 40)
    if eco == "Maven":
        return rng.choice(
            [
                f"{major}.{minor}.{patch}",
                f"{major}.{minor}",
                f"{major}.{minor}.{patch}.Final",
                f"{major}.{minor}.{patch}-RC1",
            ]
        )
    if eco == "PyPI":
        return rng.choice(
            [
                f"{major}.{minor}.{patch}",
                f"{major}.{minor}",
                f"{major}.{minor}rc1",
                f"{major}.{minor}.post1",
            ]
        )
    if eco == "Go":
        if rng.random() < 0.2:
            return f"0.0.0-2022{rng.randint(10, 12)}{rng.randint(10, 28)}120000-{rng.getrandbits(48):012x}"
        return f"{major}.{minor}.{patch}"
    return rng.choice(
        [f"{major}.{minor}.{patch}", f"{major}.{minor}.{patch}-beta.{rng.randint(1, 9)}"]
    )


def sorted_versions(rng: random.Random, eco: str, n: int) -> list[str]:
    # Monotone numbers so events are increasing, as real advisories are.
    out, major = [], rng.randint(0, 3)
    for _ in range(n):
        major += rng.randint(0, 2)
        minor = rng.randint(0, 20)
        out.append(f"{major}.{minor}.{rng.randint(0, 30)}")
    return out


def package_name(eco: str, i: int) -> tuple[str, str]:
    """(OSV name, purl without version)."""
    if eco == "npm":
        return (
            (f"@scope{i % 97}/pkg-{i}", f"pkg:npm/%40scope{i % 97}/pkg-{i}")
            if i % 5 == 0
            else (f"pkg-{i}", f"pkg:npm/pkg-{i}")
        )
    if eco == "PyPI":
        return f"Py_Pkg.{i}", f"pkg:pypi/py-pkg-{i}"
    if eco == "Maven":
        return f"org.example{i % 50}:artifact-{i}", f"pkg:maven/org.example{i % 50}/artifact-{i}"
    return f"github.com/org{i % 300}/mod{i}", f"pkg:golang/github.com/org{i % 300}/mod{i}"


def make_advisory(rng: random.Random, n: int, eco: str, name: str) -> dict:
    range_type = "SEMVER" if eco == "Go" or (eco == "npm" and rng.random() < 0.2) else "ECOSYSTEM"
    points = sorted_versions(rng, eco, rng.choice([2, 2, 2, 4, 4, 6]))
    events = []
    if rng.random() < 0.5:
        events.append({"introduced": "0"})
        points = points[1:]
    for j, v in enumerate(points):
        if j % 2 == 0 and events and "introduced" in events[-1]:
            events.append({"last_affected" if rng.random() < 0.1 else "fixed": v})
        elif j % 2 == 0 or not events:
            events.append({"introduced": v})
        else:
            events.append({"fixed": v})
    affected = {
        "package": {"ecosystem": eco, "name": name},
        "ranges": [{"type": range_type, "events": events}],
    }
    if eco == "PyPI" and rng.random() < 0.6:
        affected["versions"] = [f"{rng.randint(0, 9)}.{k}.0" for k in range(rng.randint(10, 80))]
    doc = {
        "id": f"GHSA-{n:04x}-{n * 7 % 9973:04x}-bench",
        "modified": "2025-01-01T00:00:00Z",
        "aliases": [f"CVE-2024-{n:05d}"],
        "affected": [affected],
    }
    if rng.random() < 0.01:
        doc["withdrawn"] = "2025-02-01T00:00:00Z"
    return doc


def generate(n_adv: int, n_comp: int, seed: int) -> tuple[list[AdvisoryRef], list[ComponentRef]]:
    rng = random.Random(seed)
    weights = [w for _, _, w in ECOSYSTEMS]
    n_packages = n_adv // 3
    packages = []
    for i in range(n_packages):
        eco, _ptype, _ = rng.choices(ECOSYSTEMS, weights)[0]
        packages.append((eco, *package_name(eco, i)))
    advisories = []
    for n in range(n_adv):
        eco, name, _ = packages[rng.randrange(n_packages)]
        doc = make_advisory(rng, n, eco, name)
        advisories.append(
            AdvisoryRef(
                id=doc["id"],
                aliases=tuple(doc["aliases"]),
                affected=tuple(affected_from_osv(a) for a in doc["affected"]),
                withdrawn="withdrawn" in doc,
            )
        )
    components = []
    for c in range(n_comp):
        if rng.random() < 0.5:
            eco, _, purl = packages[rng.randrange(n_packages)]
        else:
            eco = rng.choices(ECOSYSTEMS, weights)[0][0]
            purl = package_name(eco, n_packages + c)[1]
        v = version(rng, eco) if rng.random() > 0.01 else "not-a-version"
        if eco == "Go" and not v.startswith("v"):
            v = "v" + v
        components.append(ComponentRef(c, f"{purl}@{v}", v))
    return advisories, components


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--components", type=int, default=10_000)
    parser.add_argument("--advisories", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    advisories, components = generate(args.advisories, args.components, args.seed)
    start = time.perf_counter()
    index = AdvisoryIndex.build(advisories)
    matches = index.match(components)
    seconds = time.perf_counter() - start
    affected = sum(1 for m in matches if m.verdict is Verdict.AFFECTED)
    unknown = sum(1 for m in matches if m.verdict is Verdict.UNKNOWN)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(components)} components x {len(advisories)} advisories: {len(matches)} matches "
        f"({affected} affected, {unknown} unknown) in {seconds:.3f} s; peak RSS {peak_mb:.0f} MB"
    )
    print(json.dumps({"seconds": round(seconds, 3), "peak_mb": round(peak_mb, 1)}))


if __name__ == "__main__":
    main()
