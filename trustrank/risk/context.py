"""Where a finding runs: the deployment contexts of its project version, with exposure,
reachability, human impact and fused trust, and the score points they add.

A vulnerability in a project version that several services run is ranked by its most
urgent deployment. Contexts are computed once per (project version, component) and pruned
to those no other context beats on every factor, so scoring a finding is a few table
lookups whatever the number of deployments.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from trustrank.risk.graph import EnvironmentAnalysis, ServiceContext
from trustrank.risk.inputs import (
    EXPLOITATIONS,
    EXPOSURES,
    HUMAN_IMPACTS,
    Component,
    Confidence,
    Deployment,
    Exposure,
    HumanImpact,
    ObservedComponent,
    RankInputs,
    RankSettings,
    Reachability,
)
from trustrank.risk.libraries import component_matches
from trustrank.risk.scoring import (
    EXPOSURE_VALUES,
    IMPACT_VALUES,
    REACHABILITY_VALUES,
    Factor,
)
from trustrank.risk.ssvc import load_deployer_table


@dataclass(frozen=True, slots=True)
class DeploymentContext:
    """One place a finding may run. `decisions[2·e + a]` is the Deployer decision rank for
    exploitation index e (none, public poc, active) and automatable a (0/1)."""

    environment: str
    service: str
    project_version: str
    deployed: bool
    exposure: Exposure
    reachability: Reachability
    human_impact: HumanImpact
    trust: float
    points: float
    decisions: tuple[int, ...]
    factors: tuple[Factor, ...]
    path: tuple[str, ...]


def _pts(weight: float, value: float) -> float:
    return round(weight * (value - 0.5), 4)


def _group_keys(component_key: str) -> list[str]:
    """The group keys that contain a component key, nearest first
    (`pkg:maven/g/a` → [`pkg:maven/g`])."""
    head, _, rest = component_key.partition("/")
    parts = rest.split("/")
    return [head + "/" + "/".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)]


class ContextIndex:
    """Lookups from the inputs plus the graph analyses; builds and caches contexts."""

    def __init__(
        self,
        *,
        inputs: RankInputs,
        analyses: Mapping[str, EnvironmentAnalysis],
        settings: RankSettings,
    ) -> None:
        self.settings = settings
        self.analyses = analyses
        self.by_version: dict[str, list[Deployment]] = defaultdict(list)
        self.by_service: dict[tuple[str, str], list[Deployment]] = defaultdict(list)
        for d in sorted(inputs.deployments, key=lambda d: (d.environment, d.service,
                                                           d.project_version)):
            self.by_version[d.project_version].append(d)
            self.by_service[(d.environment, d.service)].append(d)
        self.signed = {v.key for v in inputs.project_versions if v.sbom_signed}
        self.components: dict[tuple[str, str], Component] = {
            (c.project_version, c.key): c for c in inputs.components
        }
        # Version-level provenance for service trust: shares of components with each fact.
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for c in inputs.components:
            row = counts[c.project_version]
            row[0] += 1
            row[1] += c.hashes_present
            row[2] += c.supplier_known
        self.version_shares = {
            k: (h / n, s / n) for k, (n, h, s) in counts.items() if n
        }
        self.libraries: dict[tuple[str, str], tuple[bool, dict[str, ObservedComponent]]] = {}
        for lib in inputs.libraries:
            key = (lib.environment, lib.service)
            traced, observed = self.libraries.get(key, (False, {}))
            merged = dict(observed)
            for o in lib.observed:
                merged[o.component_key] = o
            self.libraries[key] = (traced or lib.traced or bool(lib.observed), merged)
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
        self._cache: dict[tuple[str, str, str, str], tuple[DeploymentContext, ...]] = {}

    # --- trust -----------------------------------------------------------------------

    def code_trust(self, project_version: str, component_key: str | None) -> tuple[float, str]:
        signed_w, hashes_w, supplier_w = self.settings.provenance_weights
        signed = project_version in self.signed
        if component_key is None:
            hashes, supplier = self.version_shares.get(project_version, (0.0, 0.0))
            source = f"SBOM signed: {'yes' if signed else 'no'}; components with hashes " \
                     f"{hashes:.0%}, with known supplier {supplier:.0%}"
        else:
            c = self.components.get((project_version, component_key))
            hashes = float(bool(c and c.hashes_present))
            supplier = float(bool(c and c.supplier_known))
            source = f"SBOM signed: {'yes' if signed else 'no'}; hashes: " \
                     f"{'yes' if hashes else 'no'}; supplier known: {'yes' if supplier else 'no'}"
        return signed_w * signed + hashes_w * hashes + supplier_w * supplier, source

    def fused_trust(
        self, svc: ServiceContext | None, project_version: str, component_key: str | None
    ) -> tuple[float, Factor]:
        s = self.settings
        code, code_source = self.code_trust(project_version, component_key)
        identity = svc.identity_trust if svc else 0.0
        trust = round(s.identity_trust_weight * identity + s.code_trust_weight * code, 6)
        if svc and svc.trust_anchor:
            anchor = (
                f"attested identity {svc.identity or svc.name}"
                if svc.trust_depth == 0
                else f"{svc.trust_depth} hop(s) from anchor {svc.trust_anchor}"
            )
            conf: Confidence = "high" if svc.trust_depth == 0 else "medium"
        else:
            anchor, conf = "no attested identity reaches it", "medium"
        source = f"identity trust {identity:.3f} ({anchor}); code trust {code:.2f} ({code_source})"
        return trust, Factor("trust", trust, _pts(s.weights.low_trust, 1.0 - trust), source, conf)

    # --- reachability ----------------------------------------------------------------

    def reachability(
        self, environment: str, service: str, component_key: str
    ) -> tuple[Reachability, Factor]:
        w = self.settings.weights.reachability
        traced, observed = self.libraries.get((environment, service), (False, {}))
        if not component_key:
            return "unknown", Factor("reachability", "unknown", 0.0,
                                     "finding names no component", "low")
        hit = observed.get(component_key)
        conf: Confidence = "high"
        if hit is None:
            for group in _group_keys(component_key):
                hit = observed.get(group)
                if hit is not None and component_matches(component_key, group):
                    conf = "medium"
                    break
        if hit is not None:
            source = (f"{hit.evidence} at {hit.calls_per_minute:g} calls/min on "
                      f"{environment}/{service}")
            return "observed", Factor("reachability", "observed",
                                      _pts(w, REACHABILITY_VALUES["observed"]), source, conf)
        if traced:
            return "not observed", Factor(
                "reachability", "not observed", _pts(w, REACHABILITY_VALUES["not observed"]),
                f"{environment}/{service} sends traces; none names {component_key}", "medium")
        return "unknown", Factor("reachability", "unknown", 0.0,
                                 f"{environment}/{service} sends no traces", "low")

    # --- contexts --------------------------------------------------------------------

    def _service(self, environment: str, service: str) -> ServiceContext | None:
        analysis = self.analyses.get(environment)
        return analysis.services.get(service) if analysis else None

    def _context(
        self, d: Deployment | None, environment: str, service: str, project_version: str,
        component_key: str | None,
    ) -> DeploymentContext:
        s = self.settings
        w = s.weights
        svc = self._service(environment, service) if service else None
        if svc is None:
            exposure: Exposure = s.undeployed_exposure
            reach: Reachability = "unknown"
            exposure_factor = Factor("exposure", exposure, 0.0,
                                     f"project version {project_version} runs on no known "
                                     "service; baseline order kept", "medium")
            reach_factor = Factor("reachability", reach, 0.0, "no deployment", "low")
        else:
            exposure = svc.exposure
            if exposure == "open":
                hops = "; ".join(
                    f"{h.source} → {h.target} ({h.via}"
                    + (f", {h.calls_per_minute:g}/min, mTLS {h.mtls_share:.0%}"
                       if h.mtls_share is not None else f", {h.detail}" if h.detail else "")
                    + ")"
                    for h in svc.hops
                )
                source, conf = f"ingress path: {hops}", "high"
                conf = "medium" if svc.hops[0].via == "ingress candidate" else "high"
            else:
                source, conf = svc.exposure_reason, "medium"
            exposure_factor = Factor("exposure", exposure,
                                     _pts(w.exposure, EXPOSURE_VALUES[exposure]), source,
                                     conf)  # type: ignore[arg-type]
            if component_key is None:
                reach, reach_factor = "not applicable", Factor(
                    "reachability", "not applicable", 0.0, "not a component finding", "high")
            else:
                reach, reach_factor = self.reachability(environment, service, component_key)
        impact: HumanImpact = d.human_impact if d else s.default_human_impact
        impact_factor = Factor(
            "human_impact", impact, _pts(w.human_impact, IMPACT_VALUES[impact]),
            f"deployment of {project_version} on {environment}/{service}"
            + (f" ({d.source})" if d.source else "") if d else "default (no deployment)",
            "high" if d else "low",
        )
        trust, trust_factor = self.fused_trust(svc, project_version, component_key)
        factors = (exposure_factor, reach_factor, impact_factor, trust_factor)
        return DeploymentContext(
            environment=environment,
            service=service,
            project_version=project_version,
            deployed=svc is not None,
            exposure=exposure,
            reachability=reach,
            human_impact=impact,
            trust=trust,
            points=round(sum(f.effect for f in factors), 4),
            decisions=self._decisions[(exposure, impact)],
            factors=factors,
            path=svc.path if svc else (),
        )

    def contexts(
        self, *, project_version: str, component_key: str | None, environment: str = "",
        service: str = "",
    ) -> tuple[DeploymentContext, ...]:
        """The non-dominated contexts of a finding. With `service`, only that deployment;
        otherwise every deployment of the version (none: one undeployed context)."""
        key = (project_version, component_key or "\x00", environment, service)
        cached = self._cache.get(key)
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
            deps = self.by_version.get(project_version, [])
            candidates = [
                self._context(d, d.environment, d.service, project_version, component_key)
                for d in deps
            ] or [self._context(None, "", "", project_version, component_key)]
            out = tuple(_non_dominated(candidates))
        self._cache[key] = out
        return out


def _non_dominated(contexts: list[DeploymentContext]) -> list[DeploymentContext]:
    """Drop contexts that another context matches or beats on every factor; the Deployer
    table and the score are monotone in each, so a dropped one can never rank higher."""

    def at_least(a: DeploymentContext, b: DeploymentContext) -> bool:
        return (
            a.deployed >= b.deployed
            and EXPOSURES.index(a.exposure) >= EXPOSURES.index(b.exposure)
            and HUMAN_IMPACTS.index(a.human_impact) >= HUMAN_IMPACTS.index(b.human_impact)
            and REACHABILITY_VALUES[a.reachability] >= REACHABILITY_VALUES[b.reachability]
            and a.trust <= b.trust
            and a.points >= b.points
        )

    kept: list[DeploymentContext] = []
    for c in contexts:  # sorted by (environment, service): the first of equals is kept
        if any(at_least(k, c) for k in kept):
            continue
        kept = [k for k in kept if not at_least(c, k)]
        kept.append(c)
    return kept
