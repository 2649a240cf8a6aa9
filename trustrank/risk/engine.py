"""The ranking engine's entry points: `rank` for a full run, `rank_incremental` to reuse a
previous result, `analyse` for the graph part alone.

Order of the queue: the SSVC decision first (immediate > out-of-cycle > scheduled >
defer), then findings running somewhere before findings of versions deployed nowhere,
then the score (for undeployed findings: their baseline), then the finding id. So a more
urgent decision always ranks above a less urgent one, and equal inputs always give the
same order.

How the wiring should use it:
1. Full run: build `RankInputs`, call `rank(inputs=…, settings=…)`, store the result's
   findings (`results.finding_json`) and `inputs_digest` with the settings version.
2. Incremental run (one service's SBOM or one environment's traces changed): keep the
   previous `RankResult` in memory (or rebuild its `analyses` from stored ones), build the
   new inputs and call `rank_incremental(previous=…, inputs=…, settings=…,
   changed_project_versions={…}, changed_services={(env, name), …})`. Environments whose
   graph inputs hash the same reuse their analysis; only findings whose own record
   changed, whose version is named, or that run in a changed environment or on a changed
   service are scored again; the rest keep their previous score and factors, and ranks
   are reassigned by one sort.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from trustrank.risk.context import ContextIndex, DeploymentContext
from trustrank.risk.graph import EnvironmentAnalysis, analyse_environment, environment_digest
from trustrank.risk.inputs import (
    DECISIONS,
    EXPLOITATIONS,
    Finding,
    RankInputs,
    RankSettings,
)
from trustrank.risk.results import RankedFinding, RankResult, ServiceResult, inputs_digest
from trustrank.risk.scoring import Factor, VulnFacts, kind_decision, kind_facts, vuln_facts

_EXPL_INDEX = {e: i for i, e in enumerate(EXPLOITATIONS)}


def _environments(inputs: RankInputs) -> list[str]:
    names = {s.environment for s in inputs.services}
    names |= {e.environment for e in inputs.edges}
    return sorted(names)


def analyse(
    *,
    inputs: RankInputs,
    settings: RankSettings,
    previous: Mapping[str, EnvironmentAnalysis] | None = None,
) -> dict[str, EnvironmentAnalysis]:
    """Graph analysis (exposure, paths, identity trust) per environment. An environment
    whose graph inputs hash as in `previous` reuses the previous analysis."""
    out: dict[str, EnvironmentAnalysis] = {}
    for env in _environments(inputs):
        old = (previous or {}).get(env)
        if old is not None and old.digest == environment_digest(
            environment=env, services=inputs.services, edges=inputs.edges, peers=inputs.peers,
            origins=inputs.origins, settings_version=settings.version,
        ):
            out[env] = old
            continue
        out[env] = analyse_environment(
            environment=env, services=inputs.services, edges=inputs.edges, peers=inputs.peers,
            origins=inputs.origins, decay=settings.decay, trust_floor=settings.trust_floor,
            settings_version=settings.version,
        )
    return out


class _Scorer:
    def __init__(self, index: ContextIndex, settings: RankSettings) -> None:
        self.index = index
        self.settings = settings
        self.vuln_cache: dict[tuple[object, ...], VulnFacts] = {}
        self.zeroed: dict[tuple[Factor, ...], tuple[Factor, ...]] = {}

    def score(self, f: Finding) -> tuple[tuple[object, ...], RankedFinding]:
        """(sort key, ranked finding with rank 0)."""
        if f.kind == "vulnerability":
            vkey = (f.vuln_id, f.in_kev, f.kev_date, f.epss, f.epss_percentile, f.epss_date,
                    f.cvss_score, f.cvss_vector, f.severity)
            facts = self.vuln_cache.get(vkey)
            if facts is None:
                facts = self.vuln_cache[vkey] = vuln_facts(f, self.settings)
            slot = 2 * _EXPL_INDEX[facts.exploitation] + facts.automatable
            contexts = self.index.contexts(
                project_version=f.project_version, component_key=f.component_key,
                environment=f.environment, service=f.service,
            )
            best: DeploymentContext = contexts[0]
            best_d = best.decisions[slot]
            best_s = facts.points + best.points
            for c in contexts[1:]:
                d, s = c.decisions[slot], facts.points + c.points
                if (d, s) > (best_d, best_s):
                    best, best_d, best_s = c, d, s
        else:
            facts = kind_facts(f, self.settings)
            best = self.index.contexts(
                project_version=f.project_version, component_key=None,
                environment=f.environment, service=f.service,
            )[0]
            best_d = DECISIONS.index(kind_decision(
                kind=f.kind, sub_kind=f.sub_kind, exposure=best.exposure,
                human_impact=best.human_impact,
            ))
            best_s = facts.points + best.points
        factors = facts.factors + best.factors
        if best.deployed:
            score = round(min(100.0, max(0.0, 50.0 + best_s)), 4)
        else:
            # Deployed nowhere: the static score keeps the order it had; the factors stay
            # listed with no effect so the page still says what is known.
            score = round(min(100.0, max(0.0, f.baseline)), 4)
            zeroed = self.zeroed.get(factors)
            if zeroed is None:
                zeroed = self.zeroed[factors] = tuple(
                    Factor(x.name, x.value, 0.0, x.source, x.confidence) for x in factors
                )
            factors = (*zeroed, Factor("baseline", f.baseline, 0.0,
                                       "static score (deployed nowhere)", "high"))
        ranked = RankedFinding(
            f.id, 0, score, DECISIONS[best_d], f.kind, best.deployed, best.environment,
            best.service, best.project_version or f.project_version, f.component_key,
            best.exposure, best.reachability, facts.exploitation, facts.automatable,
            best.human_impact, best.trust, f.baseline, best.path, factors, f,
        )
        return (-best_d, not best.deployed, -score, f.id), ranked


def _services(index: ContextIndex, analyses: Mapping[str, EnvironmentAnalysis]) -> tuple[
        ServiceResult, ...]:
    out = []
    for env in sorted(analyses):
        for name, svc in sorted(analyses[env].services.items()):
            deps = index.by_service.get((env, name), [])
            version = deps[0].project_version if deps else ""
            trust, _ = index.fused_trust(svc, version, None)
            out.append(ServiceResult(
                environment=env, name=name, trust=trust, identity_trust=svc.identity_trust,
                exposure=svc.exposure, exposure_reason=svc.exposure_reason, path=svc.path,
                hops=svc.hops,
            ))
    return tuple(out)


def _assemble(
    keyed: Iterable[tuple[tuple[object, ...], RankedFinding]],
) -> tuple[RankedFinding, ...]:
    ordered = sorted(keyed, key=lambda kr: kr[0])
    return tuple(r._replace(rank=i) for i, (_, r) in enumerate(ordered, start=1))


def _check_ids(findings: Collection[Finding]) -> None:
    if len({f.id for f in findings}) != len(findings):
        raise ValueError("finding ids must be unique")


def rank(
    *,
    inputs: RankInputs,
    settings: RankSettings | None = None,
    analyses: Mapping[str, EnvironmentAnalysis] | None = None,
    with_digest: bool = True,
) -> RankResult:
    """Rank every finding of `inputs`. Pure: the same inputs and settings give a
    byte-identical `results.canonical_json`. `analyses` may pass a cached graph analysis
    (see `analyse`); `with_digest=False` skips hashing the inputs (tests, benchmarks)."""
    settings = settings or RankSettings()
    _check_ids(inputs.findings)
    analyses = analyse(inputs=inputs, settings=settings, previous=analyses)
    index = ContextIndex(inputs=inputs, analyses=analyses, settings=settings)
    scorer = _Scorer(index, settings)
    findings = _assemble(scorer.score(f) for f in inputs.findings)
    return RankResult(
        settings_version=settings.version,
        inputs_digest=inputs_digest(inputs=inputs, settings=settings) if with_digest else "",
        findings=findings,
        services=_services(index, analyses),
        analyses=analyses,
    )


def rank_incremental(
    *,
    previous: RankResult,
    inputs: RankInputs,
    settings: RankSettings | None = None,
    changed_project_versions: Collection[str] = (),
    changed_services: Collection[tuple[str, str]] = (),
    with_digest: bool = True,
) -> RankResult:
    """Rank again reusing `previous` where nothing it depends on changed; the result is the
    same as `rank(inputs=…)` provided the caller names every project version whose SBOM,
    components or deployments changed and every service whose library evidence or
    deployment changed (graph changes are detected by the environment digests)."""
    settings = settings or RankSettings()
    if previous.settings_version != settings.version:
        return rank(inputs=inputs, settings=settings, with_digest=with_digest)
    _check_ids(inputs.findings)
    analyses = analyse(inputs=inputs, settings=settings, previous=previous.analyses)
    dirty_envs = {
        env for env, a in analyses.items()
        if previous.analyses.get(env) is not a
    } | (previous.analyses.keys() - analyses.keys())
    index = ContextIndex(inputs=inputs, analyses=analyses, settings=settings)
    services = set(changed_services)
    dirty_versions = set(changed_project_versions)
    for d in inputs.deployments:
        if d.environment in dirty_envs or (d.environment, d.service) in services:
            dirty_versions.add(d.project_version)
    old = {r.finding_id: r for r in previous.findings}
    scorer = _Scorer(index, settings)
    keyed: list[tuple[tuple[object, ...], RankedFinding]] = []
    for f in inputs.findings:
        r = old.get(f.id)
        if (
            r is not None
            and (r.finding is f or r.finding == f)
            and f.project_version not in dirty_versions
            # An identity finding names a service, not a version; its trust still reads the
            # provenance of the version that service ran.
            and r.project_version not in dirty_versions
            and f.environment not in dirty_envs
            and (f.environment, f.service) not in services
        ):
            keyed.append(((-DECISIONS.index(r.decision), not r.deployed, -r.score, f.id), r))
        else:
            keyed.append(scorer.score(f))
    return RankResult(
        settings_version=settings.version,
        inputs_digest=inputs_digest(inputs=inputs, settings=settings) if with_digest else "",
        findings=_assemble(keyed),
        services=_services(index, analyses),
        analyses=analyses,
    )
