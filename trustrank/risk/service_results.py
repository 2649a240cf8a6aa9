"""Every service's result of a run (`RankResult.services`): trust, exposure and the path
from the internet, for the services the graph saw and for those a deployment declares that
send no traces (exposure unknown)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from trustrank.risk.context import ContextIndex
from trustrank.risk.graph import EnvironmentAnalysis, ServiceContext
from trustrank.risk.results import ServiceResult


def _result(index: ContextIndex, env: str, name: str, svc: ServiceContext,
            version: str) -> ServiceResult:
    trust, _ = index.fused_trust(svc, version, None)
    return ServiceResult(
        environment=env, name=name, trust=trust, identity_trust=svc.identity_trust,
        exposure=svc.exposure, exposure_reason=svc.exposure_reason, path=svc.path,
        hops=svc.hops,
    )


def _seen(index: ContextIndex, analyses: Mapping[str, EnvironmentAnalysis], env: str,
          name: str) -> ServiceResult:
    """The result of a service the graph saw."""
    deps = index.by_service.get((env, name), [])
    svc = index.service_context(env, name) or analyses[env].services[name]
    return _result(index, env, name, svc, deps[0].project_version if deps else "")


def _declared(index: ContextIndex, env: str, name: str) -> ServiceResult:
    """The result of a service only a deployment declares."""
    deps = index.by_service[(env, name)]
    return _result(index, env, name, index.untraced_service(env, name),
                   deps[0].project_version if deps else "")


def service_results(
    index: ContextIndex, analyses: Mapping[str, EnvironmentAnalysis],
    reuse: Callable[[str, str, str], ServiceResult | None] | None = None,
) -> tuple[ServiceResult, ...]:
    """Every service's result; `reuse(environment, name, version)` gives the previous
    run's result for a service nothing it depends on changed since (else None)."""
    out = []
    for env in sorted(analyses):
        for name in sorted(analyses[env].services):
            deps = index.by_service.get((env, name), [])
            version = deps[0].project_version if deps else ""
            kept = reuse(env, name, version) if reuse is not None else None
            out.append(kept if kept is not None else _seen(index, analyses, env, name))
    # Services a deployment declares that the graph never saw (they send no traces): first
    # class services of the result too, with an unknown exposure.
    for env, name in sorted(index.by_service.keys() - {
            (env, name) for env, a in analyses.items() for name in a.services}):
        out.append(_declared(index, env, name))
    return tuple(out)


def service_places(services: Sequence[ServiceResult]) -> dict[tuple[str, str], int]:
    """(environment, name) -> place in `services`."""
    return {(s.environment, s.name): i for i, s in enumerate(services)}


def service_results_updated(
    index: ContextIndex, analyses: Mapping[str, EnvironmentAnalysis],
    previous: Sequence[ServiceResult], places: Mapping[tuple[str, str], int],
    before: Mapping[str, EnvironmentAnalysis], before_services: Collection[tuple[str, str]],
    changed: Collection[tuple[str, str]],
) -> tuple[ServiceResult, ...] | None:
    """`service_results` when only the services `changed` may differ from `previous`
    (whose places are `places`; made under the analyses `before`, with deployments on
    `before_services`) and no environment came or went: the others keep their results
    and places, each of these is made again in its place. None when one of them came,
    went or moved between the graph's services and the declared ones (their order then
    changes: `service_results` makes them all)."""
    if before.keys() != analyses.keys():
        return None
    out = list(previous)
    for key in changed:
        env, name = key
        a, b = before.get(env), analyses.get(env)
        seen = b is not None and name in b.services
        if seen != (a is not None and name in a.services):
            return None
        declared = not seen and key in index.by_service
        if declared != (not seen and key in before_services):
            return None
        if seen:
            out[places[key]] = _seen(index, analyses, env, name)
        elif declared:
            out[places[key]] = _declared(index, env, name)
    return tuple(out)
