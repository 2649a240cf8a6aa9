"""Every service's result of a run (`RankResult.services`): trust, exposure and the path
from the internet, for the services the graph saw and for those a deployment declares that
send no traces (exposure unknown)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from trustrank.risk.context import ContextIndex
from trustrank.risk.graph import EnvironmentAnalysis
from trustrank.risk.results import ServiceResult


def service_results(
    index: ContextIndex, analyses: Mapping[str, EnvironmentAnalysis],
    reuse: Callable[[str, str, str], ServiceResult | None] | None = None,
) -> tuple[ServiceResult, ...]:
    """Every service's result; `reuse(environment, name, version)` gives the previous
    run's result for a service nothing it depends on changed since (else None)."""
    out = []
    for env in sorted(analyses):
        for name, svc in sorted(analyses[env].services.items()):
            deps = index.by_service.get((env, name), [])
            version = deps[0].project_version if deps else ""
            kept = reuse(env, name, version) if reuse is not None else None
            if kept is not None:
                out.append(kept)
                continue
            svc = index.service_context(env, name) or svc
            trust, _ = index.fused_trust(svc, version, None)
            out.append(ServiceResult(
                environment=env, name=name, trust=trust, identity_trust=svc.identity_trust,
                exposure=svc.exposure, exposure_reason=svc.exposure_reason, path=svc.path,
                hops=svc.hops,
            ))
    # Services a deployment declares that the graph never saw (they send no traces): first
    # class services of the result too, with an unknown exposure.
    for env, name in sorted(index.by_service.keys() - {
            (env, name) for env, a in analyses.items() for name in a.services}):
        deps = index.by_service[(env, name)]
        svc = index.untraced_service(env, name)
        trust, _ = index.fused_trust(svc, deps[0].project_version if deps else "", None)
        out.append(ServiceResult(
            environment=env, name=name, trust=trust, identity_trust=svc.identity_trust,
            exposure=svc.exposure, exposure_reason=svc.exposure_reason, path=svc.path,
            hops=svc.hops,
        ))
    return tuple(out)
