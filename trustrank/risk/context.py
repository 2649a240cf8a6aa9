"""Where a finding runs: the deployment contexts of its project version, with exposure,
reachability, human impact and fused trust, and the score points they add.

A vulnerability in a project version that several services run is ranked by its most
urgent deployment. Contexts are computed once per (project version, component) and pruned
to those no other context beats on every factor, so scoring a finding is a few table
lookups whatever the number of deployments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import NamedTuple

from trustrank.risk.factors import FactorSource, InputLookups, group_keys, points_of
from trustrank.risk.graph import EnvironmentAnalysis, ServiceContext
from trustrank.risk.inputs import (
    EXPLOITATIONS,
    EXPOSURES,
    HUMAN_IMPACTS,
    Deployment,
    Exposure,
    ExposureValue,
    HumanImpact,
    ObservedComponent,
    RankInputs,
    RankSettings,
    Reachability,
    ssvc_exposure,
)
from trustrank.risk.scoring import (
    REACHABILITY_VALUES,
    Factor,
)
from trustrank.risk.ssvc import load_deployer_table


class DeploymentContext(NamedTuple):
    """One place a finding may run. `decisions[2·e + a]` is the Deployer decision rank for
    exploitation index e (none, public poc, active) and automatable a (0/1). A NamedTuple:
    a large run builds about one per (version, component, deployment)."""

    environment: str
    service: str
    project_version: str
    deployed: bool
    exposure: ExposureValue
    reachability: Reachability
    human_impact: HumanImpact
    trust: float
    points: float
    decisions: tuple[int, ...]
    factors: tuple[Factor, ...]
    path: tuple[str, ...]
    # The context's part of the SSVC level (`scoring.ssvc_level`): exposure and human
    # impact steps. The most urgent context is the one the queue would put first.
    level: int
    # The fields a ranked finding copies, in `RankedFinding` order: one splat per finding.
    tail: tuple[object, ...]


def _make_context(
    environment: str, service: str, project_version: str, deployed: bool,
    exposure: ExposureValue, reachability: Reachability, human_impact: HumanImpact,
    trust: float, points: float, decisions: tuple[int, ...], factors: tuple[Factor, ...],
    path: tuple[str, ...], level: int,
) -> DeploymentContext:
    return DeploymentContext(
        environment, service, project_version, deployed, exposure, reachability,
        human_impact, trust, points, decisions, factors, path, level,
        (deployed, environment, service, project_version, exposure, reachability,
         human_impact, trust, path, factors),
    )


def _best_by_slot(contexts: tuple[DeploymentContext, ...]) -> tuple[DeploymentContext, ...]:
    """The most urgent context for each exploitation/automatable slot, as the queue orders:
    highest decision, then highest SSVC level, then most points, the first of equals. A
    finding's own points and level add the same to every context, so this choice does not
    depend on the finding."""
    if len(contexts) == 1:
        return contexts * 6
    out = []
    for slot in range(6):
        best = contexts[0]
        for c in contexts[1:]:
            if (c.decisions[slot], c.level, c.points) > (
                    best.decisions[slot], best.level, best.points):
                best = c
        out.append(best)
    return tuple(out)


class ContextIndex(FactorSource):
    """Lookups from the inputs plus the graph analyses; builds and caches contexts."""

    def __init__(
        self,
        *,
        inputs: RankInputs,
        analyses: Mapping[str, EnvironmentAnalysis],
        settings: RankSettings,
        lookups: InputLookups | None = None,
    ) -> None:
        super().__init__(inputs=inputs, settings=settings, lookups=lookups)
        self.analyses = analyses
        self.by_version: dict[str, list[Deployment]] = self.lookups.by_version
        self.by_service: dict[tuple[str, str], list[Deployment]] = self.lookups.by_service
        table = load_deployer_table()
        self._decisions: dict[tuple[Exposure, HumanImpact], tuple[int, ...]] = {
            (x, h): tuple(
                ("defer", "scheduled", "out-of-cycle", "immediate").index(
                    table[(e, x, bool(a), h)]
                )
                for e in EXPLOITATIONS
                for a in (0, 1)
            )
            for x in EXPOSURES
            for h in HUMAN_IMPACTS
        }
        self.cache: dict[tuple[str, str | None, str, str], tuple[DeploymentContext, ...]] = {}
        self._parts: dict[str, list[_Part]] = {}
        self._shared: dict[tuple[object, ...], tuple[DeploymentContext, ...]] = {}
        self._untraced: dict[tuple[str, str], ServiceContext] = {}

    # --- contexts --------------------------------------------------------------------

    def service_context(self, environment: str, service: str) -> ServiceContext | None:
        """The service's graph context; for a service a deployment declares that sends no
        traces, one whose exposure is unknown (a first-class service of the ranking, not
        "deployed nowhere")."""
        analysis = self.analyses.get(environment)
        svc = analysis.services.get(service) if analysis else None
        if svc is not None and svc.observed:
            return svc
        if (environment, service) not in self.by_service or self.libraries.get(
                (environment, service), (False, {}))[0]:
            return svc
        return self.untraced_service(environment, service, svc)

    def untraced_service(
        self, environment: str, service: str, svc: ServiceContext | None = None
    ) -> ServiceContext:
        """A declared service that sends no traces: exposure unknown, or controlled when
        the operator marked it not an entry point (nothing then reaches it from the
        internet, but with no traces its internal callers cannot be ruled out). What the
        graph knows of it otherwise (an attested identity, trust from callers) is kept."""
        key = (environment, service)
        got = self._untraced.get(key)
        if got is None:
            base = svc or ServiceContext(
                environment=environment, name=service, exposure="unknown", exposure_reason="",
                path=(), hops=(), identity_trust=0.0, trust_anchor="", trust_depth=0,
                identity="",
            )
            reason = f"service declared in {environment}, sends no traces"
            if base.not_entry_point:
                got = replace(base, exposure="controlled", observed=False, exposure_reason=(
                    f"{base.not_entry_point}; {reason}, so internal callers are possible"))
            else:
                got = replace(base, exposure="unknown", observed=False, exposure_reason=reason)
            self._untraced[key] = got
        return got

    def decisions_of(self, exposure: ExposureValue, impact: HumanImpact) -> tuple[int, ...]:
        return self._decisions[(ssvc_exposure(exposure, self.settings), impact)]

    def level_of(self, exposure: ExposureValue, impact: HumanImpact) -> int:
        """The context's part of the SSVC level."""
        return (EXPOSURES.index(ssvc_exposure(exposure, self.settings))
                + HUMAN_IMPACTS.index(impact))

    def _context(
        self, d: Deployment | None, environment: str, service: str, project_version: str,
        component_key: str | None,
    ) -> DeploymentContext:
        s = self.settings
        svc = self.service_context(environment, service) if service else None
        reach: Reachability
        if svc is None:
            exposure: ExposureValue = s.undeployed_exposure
            exposure_factor, reach, reach_factor = self._undeployed
            path: tuple[str, ...] = ()
        else:
            exposure = svc.exposure
            exposure_factor = self._exposure_factor(svc)
            path = svc.path
            if component_key is None:
                reach, reach_factor = "not applicable", self._not_applicable
            else:
                reach, reach_factor = self.reachability(environment, service, component_key)
        impact: HumanImpact = d.human_impact if d else s.default_human_impact
        impact_factor = self._impact_factor(d)
        trust, trust_factor = self.fused_trust(svc, project_version, component_key)
        return _make_context(
            environment,
            service,
            project_version,
            svc is not None,
            exposure,
            reach,
            impact,
            trust,
            round(exposure_factor.effect + reach_factor.effect + impact_factor.effect
                  + trust_factor.effect, 4),
            self.decisions_of(exposure, impact),
            (exposure_factor, reach_factor, impact_factor, trust_factor),
            path,
            self.level_of(exposure, impact),
        )

    def _version_parts(self, project_version: str) -> list[_Part]:
        """What every component of a version shares on each deployment."""
        parts = self._parts.get(project_version)
        if parts is not None:
            return parts
        parts = []
        for d in self.by_version.get(project_version, ()):
            svc = self.service_context(d.environment, d.service)
            if svc is None:
                continue
            traced, observed = self.libraries.get((d.environment, d.service), (False, {}))
            exposure_factor = self._exposure_factor(svc)
            impact_factor = self._impact_factor(d)
            parts.append(_Part(
                d, svc, traced, observed, exposure_factor, impact_factor,
                exposure_factor.effect + impact_factor.effect,
                self.decisions_of(svc.exposure, d.human_impact),
                self.level_of(svc.exposure, d.human_impact), {},
            ))
        self._parts[project_version] = parts
        return parts

    def _version_contexts(
        self, project_version: str, component_key: str | None
    ) -> tuple[DeploymentContext, ...]:
        """The contexts of one (version, component). Two passes: numbers first for every
        deployment, factor objects only for the few that survive pruning."""
        parts = self._version_parts(project_version)
        if not parts:
            return (self._context(None, "", "", project_version, component_key),)
        facts = self._code_facts(project_version, component_key)
        hits: set[int] = set()
        # Evidence naming only the component's group: reachability unknown (no points),
        # as FactorSource.reachability says.
        group_only: set[int] = set()
        if component_key:
            groups = None
            for i, part in enumerate(parts):
                observed = part.observed
                if observed:
                    if component_key in observed:
                        hits.add(i)
                        continue
                    if groups is None:
                        groups = group_keys(component_key)
                    for g in groups:
                        if g in observed:
                            group_only.add(i)
                            break
        # Most components of a version are observed on none of its deployments; their
        # contexts then differ only by code provenance, so they share one computed tuple.
        shared_key = None
        if not hits and not group_only:
            shared_key = (project_version, facts, component_key is None)
            shared = self._shared.get(shared_key)
            if shared is not None:
                return shared
        w = self.settings.weights.reachability
        observed_pts = points_of(w, REACHABILITY_VALUES["observed"])
        unobserved_pts = points_of(w, REACHABILITY_VALUES["not observed"])
        best: dict[tuple[tuple[int, ...], int], tuple[float, int, float, Factor]] = {}
        for i, part in enumerate(parts):
            trust_pair = part.trust.get(facts)
            if trust_pair is None:
                trust_pair = part.trust[facts] = self.fused_trust(
                    part.svc, project_version, component_key)
            trust, trust_factor = trust_pair
            points = part.points + trust_factor.effect
            if component_key is not None:
                if i in hits:
                    points += observed_pts
                elif i in group_only:
                    pass
                elif part.traced:
                    points += unobserved_pts
            known = best.get((part.decisions, part.level))
            if known is None or points > known[0]:
                best[(part.decisions, part.level)] = (points, i, trust, trust_factor)
        kept = _non_dominated(best)
        out = []
        for points, i, trust, trust_factor in kept:
            part = parts[i]
            svc = part.svc
            reach: Reachability
            if component_key is None:
                reach, reach_factor = "not applicable", self._not_applicable
            else:
                reach, reach_factor = self.reachability(svc.environment, svc.name,
                                                        component_key)
            out.append(_make_context(
                svc.environment, svc.name, project_version, True, svc.exposure,
                reach, part.d.human_impact, trust, points, part.decisions,
                (part.exposure_factor, reach_factor, part.impact_factor, trust_factor),
                svc.path, part.level,
            ))
        result = tuple(out)
        if shared_key is not None:
            self._shared[shared_key] = result
        return result

    def best_contexts(
        self, *, project_version: str, component_key: str | None, environment: str = "",
        service: str = "",
    ) -> tuple[DeploymentContext, ...]:
        """A finding's most urgent context for each of the six exploitation/automatable
        slots (`VulnFacts.slot`). With `service`, only that deployment; otherwise every
        deployment of the version (none: one undeployed context)."""
        key = (project_version, component_key, environment, service)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        if service:
            deps = [d for d in self.by_service.get((environment, service), ())
                    if not project_version or d.project_version == project_version]
            # Several versions on one service (a rollout): the highest human impact counts.
            d = max(deps, key=lambda d: HUMAN_IMPACTS.index(d.human_impact), default=None)
            out: tuple[DeploymentContext, ...] = (
                self._context(d, environment, service, project_version
                              or (d.project_version if d else ""), component_key),
            )
        else:
            out = self._version_contexts(project_version, component_key)
        best = self.cache[key] = _best_by_slot(out)
        return best


class _Part(NamedTuple):
    d: Deployment
    svc: ServiceContext
    traced: bool
    observed: dict[str, ObservedComponent]
    exposure_factor: Factor
    impact_factor: Factor
    points: float
    decisions: tuple[int, ...]
    level: int
    # Fused trust by provenance facts: at most eight per deployment.
    trust: dict[tuple[bool, float, float], tuple[float, Factor]]


def _non_dominated(
    best: dict[tuple[tuple[int, ...], int], tuple[float, int, float, Factor]],
) -> list[tuple[float, int, float, Factor]]:
    """Drop deployments that can never be a finding's most urgent one: another has a
    decision at least as urgent for every exploitation/automatable combination, at least
    the SSVC level and at least as many points. `best` already holds the first
    highest-scoring deployment per decision vector and level (deployments come sorted by
    environment and service), so the choice is the one a full evaluation would make. Kept
    in deployment order."""
    if len(best) == 1:
        return list(best.values())
    items = list(best.items())
    kept = [
        c for (vector, level), c in items
        if not any(
            other is not c and other[0] >= c[0] and other_level >= level
            and all(x >= y for x, y in zip(ov, vector, strict=True))
            for (ov, other_level), other in items
        )
    ]
    kept.sort(key=lambda c: c[1])
    return kept
