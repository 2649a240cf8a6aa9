"""Random but reproducible engine inputs for property tests (seeded `random`)."""

from __future__ import annotations

import random
from datetime import date

from trustrank.risk import (
    CallEdge,
    Component,
    Deployment,
    ExternalPeer,
    Finding,
    ObservedComponent,
    ProjectVersion,
    RankInputs,
    RootSpanOrigin,
    Service,
    ServiceLibraries,
)
from trustrank.risk.inputs import EXPOSURES, HUMAN_IMPACTS

VECTORS = [
    "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
    "CVSS:3.1/AV:N/AC:H/PR:L/UI:N/S:U/C:L/I:N/A:N",
    "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H",
    "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",
    "CVSS:4.0/AV:N/AC:L/AT:P/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",
    "",
]
SUB_KINDS = [("identity", "expired"), ("identity", "expiring"), ("identity", "weak_key"),
             ("reliability", "broken_context")]
_ = EXPOSURES


def _rates(extra: random.Random) -> dict[str, float]:
    if extra.random() < 0.3:
        return {}
    return {"recent_calls_per_minute": extra.uniform(0, 600),
            "peak_calls_per_minute": extra.uniform(0, 6000)}


def generate(seed: int, *, services: int = 25, versions: int = 10, findings: int = 80,
             environments: int = 2) -> RankInputs:
    rng = random.Random(seed)
    # Rates and names for explanations only, drawn apart so the graphs stay as they were.
    extra = random.Random(seed + 7_919)
    envs = [f"env{i}" for i in range(environments)]
    svc: list[Service] = []
    edges: list[CallEdge] = []
    origins: list[RootSpanOrigin] = []
    peers: list[ExternalPeer] = []
    deployments: list[Deployment] = []
    libraries: list[ServiceLibraries] = []
    version_keys = [f"v{i}" for i in range(versions)]
    comps = {v: [f"pkg:pypi/lib{j}" for j in rng.sample(range(12), 5)] for v in version_keys}
    for env in envs:
        names = [f"s{i}" for i in range(services)]
        for name in names:
            override = rng.choice([None, None, None, True, False])
            strength = rng.choice([None, None, rng.uniform(20, 100)])
            svc.append(Service(environment=env, name=name, ingress_override=override,
                               ingress_candidate=rng.random() < 0.1,
                               identity_strength=strength,
                               identity=f"spiffe://{env}/{name}" if strength else ""))
            r = rng.random()
            if r < 0.06:
                origins.append(RootSpanOrigin(environment=env, service=name,
                                              address_class="internet", spans=rng.randint(1, 99)))
            elif r < 0.3:
                origins.append(RootSpanOrigin(environment=env, service=name,
                                              address_class=rng.choice(["local", "internal"])))
        for _i in range(services):
            a, b = rng.sample(names, 2)
            edges.append(CallEdge(environment=env, caller=a, callee=b,
                                  calls_per_minute=rng.uniform(0, 500),
                                  error_rate=rng.random() / 10, mtls_share=rng.random(),
                                  sig=rng.choice([0, 50, 80, 100, rng.uniform(0, 100)]),
                                  **_rates(extra)))
        peers.append(ExternalPeer(environment=env, name="partner"))
        edges.append(CallEdge(environment=env, caller="partner", callee=rng.choice(names)))
        for name in names:
            if rng.random() < 0.8:
                v = rng.choice(version_keys)
                deployments.append(Deployment(environment=env, service=name, project_version=v,
                                              human_impact=rng.choice(HUMAN_IMPACTS),
                                              source=extra.choice(["sbom upload", "API", ""]),
                                              project_version_name=f"{v}@1.{extra.randint(0, 9)}"))
                traced = rng.random() < 0.7
                observed = tuple(
                    ObservedComponent(component_key=k, calls_per_minute=rng.uniform(0, 100),
                                      evidence=f"scope opentelemetry.instrumentation.{k[9:]}",
                                      **_rates(extra))
                    for k in comps[v] if traced and rng.random() < 0.4
                )
                libraries.append(ServiceLibraries(environment=env, service=name, traced=traced,
                                                  observed=observed))
    extra_versions = [*version_keys, "undeployed1", "undeployed2"]
    comps["undeployed1"] = ["pkg:pypi/lib1"]
    comps["undeployed2"] = ["pkg:pypi/lib2"]
    components = [
        Component(project_version=v, key=k, hashes_present=rng.random() < 0.5,
                  supplier_known=rng.random() < 0.5)
        for v in extra_versions for k in comps[v]
    ]
    pvs = [ProjectVersion(key=v, sbom_signed=rng.random() < 0.3) for v in extra_versions]
    out: list[Finding] = []
    for i in range(findings):
        if rng.random() < 0.15:
            kind, sub = rng.choice(SUB_KINDS)
            out.append(Finding(id=f"f{i:04d}", kind=kind, sub_kind=sub,  # type: ignore[arg-type]
                               severity=rng.choice(["low", "medium", "high", "critical"]),
                               environment=rng.choice(envs),
                               service=f"s{rng.randrange(services)}",
                               baseline=rng.uniform(0, 100)))
            continue
        v = rng.choice(extra_versions)
        epss = rng.choice([None, rng.random() ** 3])
        out.append(Finding(
            id=f"f{i:04d}", vuln_id=f"CVE-2099-{rng.randrange(40):04d}",
            severity=rng.choice(["low", "medium", "high", "critical", "unknown"]),
            cvss_score=rng.choice([None, round(rng.uniform(0, 10), 1)]),
            cvss_vector=rng.choice(VECTORS), in_kev=rng.random() < 0.1,
            kev_date=date(2024, 1, 2) if rng.random() < 0.5 else None, epss=epss,
            epss_date=date(2026, 11, 30) if epss is not None else None,
            project_version=v, component_key=rng.choice(comps[v]),
            baseline=round(rng.uniform(0, 100), 2),
        ))
    return RankInputs(services=tuple(svc), edges=tuple(edges), peers=tuple(peers),
                      origins=tuple(origins), deployments=tuple(deployments),
                      project_versions=tuple(pvs), components=tuple(components),
                      libraries=tuple(libraries), findings=tuple(out))


def shuffled(inputs: RankInputs, seed: int) -> RankInputs:
    rng = random.Random(seed)

    def mix(items: tuple) -> tuple:  # type: ignore[type-arg]
        lst = list(items)
        rng.shuffle(lst)
        return tuple(lst)

    return RankInputs(**{name: mix(getattr(inputs, name)) for name in inputs.__slots__})
