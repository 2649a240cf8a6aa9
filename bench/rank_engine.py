"""Benchmark: the pure ranking engine on a large in-memory estate.

10,000 services and 50,000 call edges over two environments, 2,000 deployed project
versions of 100 components each (every version runs on about five services), library
evidence for most services, and 1,000,000 open findings drawn from 30,000 advisories (so
advisory facts repeat, as they do in real estates). About 3 % of findings name a version
deployed nowhere, 2 % are identity or reliability findings.

Timed: the graph analysis alone (exposure, paths, formula-1 trust for every
environment), then a full `rank` (analysis, contexts, scoring, sorting; input digest
included), then an incremental run after one version's SBOM changed, twice: named by its
version only, and as the ranking run calls it (with the changed findings and their
records, inputs digest included: `incremental_changed_*`). Not timed: generating the
inputs.

    python bench/rank_engine.py [--findings 1000000] [--seed 1] [--profile]

Last line: {"seconds": …, "cpu_seconds": …, "findings": …, "peak_mb": …, …} (seconds are
wall-clock; cpu_seconds is this process's CPU time, the fairer figure on a shared machine).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import resource
import sys
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trustrank.risk import (
    CallEdge,
    Component,
    Deployment,
    Finding,
    ObservedComponent,
    ProjectVersion,
    RankInputs,
    RootSpanOrigin,
    Service,
    ServiceLibraries,
    analyse,
    rank,
    rank_incremental,
)

VECTORS = [
    "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
    "CVSS:3.1/AV:N/AC:H/PR:L/UI:N/S:U/C:L/I:N/A:N",
    "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H",
    "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",
    "",
]
IMPACTS = ["low", "medium", "medium", "high", "very high"]


def build(*, findings: int, seed: int, services: int = 10_000, edges: int = 50_000,
          versions: int = 2_000, components: int = 100) -> RankInputs:
    rng = random.Random(seed)
    envs = ["prod", "staging"]
    per_env = services // len(envs)
    svc, edge_list, origins, deps, libs = [], [], [], [], []
    version_keys = [f"app{i}@1.{i % 7}" for i in range(versions)]
    comp_keys = {v: [f"pkg:maven/org.example.g{rng.randrange(400)}/a{rng.randrange(5000)}"
                     for _ in range(components)] for v in version_keys}
    for env in envs:
        names = [f"svc-{i:05d}" for i in range(per_env)]
        for i, name in enumerate(names):
            strength = rng.uniform(50, 100) if rng.random() < 0.1 else None
            svc.append(Service(environment=env, name=name, identity_strength=strength,
                               ingress_override=True if rng.random() < 0.002 else None))
            if rng.random() < 0.01:
                origins.append(RootSpanOrigin(environment=env, service=name,
                                              address_class="internet", spans=100))
            v = version_keys[(i + (env == "staging") * 7) % versions]
            deps.append(Deployment(environment=env, service=name, project_version=v,
                                   human_impact=rng.choice(IMPACTS)))  # type: ignore[arg-type]
            traced = rng.random() < 0.8
            observed = tuple(
                ObservedComponent(component_key=k, calls_per_minute=rng.uniform(1, 900),
                                  evidence="scope io.opentelemetry.example-1.0")
                for k in rng.sample(comp_keys[v], 20)
            ) if traced else ()
            libs.append(ServiceLibraries(environment=env, service=name, traced=traced,
                                         observed=observed))
        for _ in range(edges // len(envs)):
            a, b = rng.sample(range(per_env), 2)
            # Mostly "downhill" calls, like tiers of a real estate, plus some back edges.
            a, b = (min(a, b), max(a, b)) if rng.random() < 0.9 else (a, b)
            edge_list.append(CallEdge(environment=env, caller=names[a], callee=names[b],
                                      calls_per_minute=rng.uniform(0, 1000),
                                      error_rate=rng.random() / 20, mtls_share=rng.random(),
                                      sig=rng.choice([0.0, 60.0, 90.0, 100.0])))
    comps = [Component(project_version=v, key=k, hashes_present=rng.random() < 0.7,
                       supplier_known=rng.random() < 0.5)
             for v in version_keys for k in comp_keys[v]]
    pvs = [ProjectVersion(key=v, sbom_signed=rng.random() < 0.3) for v in version_keys]
    advisories = []
    for i in range(30_000):
        epss = rng.random() ** 4
        advisories.append(dict(
            vuln_id=f"CVE-20{rng.randrange(10, 26)}-{i:05d}",
            severity=rng.choice(["low", "medium", "high", "critical"]),
            cvss_score=round(rng.uniform(2, 10), 1), cvss_vector=rng.choice(VECTORS),
            in_kev=rng.random() < 0.02, kev_date=date(2024, 3, 1), epss=round(epss, 5),
            epss_percentile=round(epss ** 0.25, 5), epss_date=date(2026, 11, 30),
        ))
    out = []
    for i in range(findings):
        r = rng.random()
        if r < 0.02:
            env = rng.choice(envs)
            out.append(Finding(id=f"F{i:07d}", kind="identity", sub_kind="expired",
                               severity="high", environment=env,
                               service=f"svc-{rng.randrange(per_env):05d}", baseline=40.0))
            continue
        v = rng.choice(version_keys)
        if r < 0.05:
            v = f"old{rng.randrange(300)}@0.1"
        adv = rng.choice(advisories)
        out.append(Finding(id=f"F{i:07d}", project_version=v,
                           component_key=rng.choice(comp_keys.get(v) or comp_keys[version_keys[0]]),
                           baseline=round(rng.uniform(0, 100), 2), **adv))  # type: ignore[arg-type]
    return RankInputs(services=tuple(svc), edges=tuple(edge_list), origins=tuple(origins),
                      deployments=tuple(deps), project_versions=tuple(pvs),
                      components=tuple(comps), libraries=tuple(libs), findings=tuple(out))


def peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--findings", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="print the costliest calls of the ranking run's path")
    args = parser.parse_args()

    t = time.perf_counter()
    inputs = build(findings=args.findings, seed=args.seed)
    print(f"generated {len(inputs.services)} services, {len(inputs.edges)} edges, "
          f"{len(inputs.findings)} findings in {time.perf_counter() - t:.1f}s; "
          f"rss {peak_mb()} MB", file=sys.stderr)
    mb_inputs = peak_mb()

    from trustrank.risk.inputs import RankSettings

    settings = RankSettings()
    t = time.perf_counter()
    analyse(inputs=inputs, settings=settings)
    graph_seconds = time.perf_counter() - t

    # CPU time beside wall time: on a shared machine the wall clock mostly measures the
    # neighbours.
    t, c = time.perf_counter(), time.process_time()
    result = rank(inputs=inputs, settings=settings)
    seconds, cpu_seconds = time.perf_counter() - t, time.process_time() - c

    version = inputs.project_versions[0].key
    changed = replace(inputs, components=tuple(
        replace(c, hashes_present=True) if c.project_version == version else c
        for c in inputs.components))
    t, c = time.perf_counter(), time.process_time()
    rank_incremental(previous=result, inputs=changed, settings=settings,
                     changed_project_versions={version}, with_digest=False)
    incremental, incremental_cpu = time.perf_counter() - t, time.process_time() - c

    # The ranking run's path (`ranking/services/runs.py`): the gather names the findings
    # written since the previous one (here: every finding of the changed version, as a
    # reconcile of its SBOM would write them) and gives their records; the run passes
    # both, with the versions and services whose inputs changed, and the inputs digest
    # is made (updated from the previous one's parts).
    touched = [f for f in inputs.findings if f.project_version == version]
    # The gather reads deployments, versions, components and libraries anew (equal records
    # in new collections); the graph's collections it reuses when their rows are unchanged.
    changed = replace(changed, **{name: tuple(list(getattr(changed, name))) for name in (
        "deployments", "project_versions", "components", "libraries")})
    # The run knows each finding's previous place from its stored rows.
    place_of = {r.finding_id: i for i, r in enumerate(result.findings)}.get
    profile = cProfile.Profile() if args.profile else None
    t, c = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    after = rank_incremental(previous=result, inputs=changed, settings=settings,
                             changed_project_versions={version},
                             changed_findings={f.id for f in touched}, changed_records=touched,
                             previous_places=place_of)
    if profile is not None:
        profile.disable()
    changed_seconds, changed_cpu = time.perf_counter() - t, time.process_time() - c
    if profile is not None:
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)

    top = result.findings[0]
    print(f"graph analysis {graph_seconds:.2f}s; rank {seconds:.2f}s; incremental "
          f"{incremental:.2f}s; with changed findings {changed_seconds:.3f}s; first: "
          f"{top.finding_id} {top.decision} {top.score}", file=sys.stderr)
    print(json.dumps({
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "graph_seconds": round(graph_seconds, 3),
        "incremental_seconds": round(incremental, 2),
        "incremental_cpu_seconds": round(incremental_cpu, 2),
        "incremental_changed_seconds": round(changed_seconds, 3),
        "incremental_changed_cpu_seconds": round(changed_cpu, 3),
        "incremental_changed_findings": len(touched),
        # Places whose ranked finding is new or renumbered (the queue stores dense ranks:
        # findings that rise renumber every place down to where they were).
        "incremental_changed_places": len(after.changed_places or ()),
        "findings": len(result.findings),
        "peak_mb": peak_mb(),
        "inputs_mb": mb_inputs,
    }))


if __name__ == "__main__":
    main()
