"""The ranking engine's entry points: `rank` for a full run, `analyse` for the graph part
alone; `incremental.rank_incremental` reuses a previous result.

Order of the queue: the SSVC decision first (immediate > out-of-cycle > scheduled >
defer), then findings running somewhere before findings of versions deployed nowhere,
then the SSVC level (`scoring.ssvc_level`: the four Deployer inputs' steps above their
lowest value, summed; 0 for findings deployed nowhere), then the score (for undeployed
findings: their baseline), then the finding id, shorter first and equal lengths in string
order (numeric order for database ids; `queue_key.id_key`). So a more urgent decision
always ranks above a less urgent one, a finding whose SSVC inputs dominate another's (all
at least as high, one higher) always ranks above it whatever its trust, EPSS, severity or
reachability, and equal inputs always give the same order. `queue_key` packs the parts
before the id into one integer, the key the database orders the queue by.

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
   are reassigned by merging the rescored findings into the unchanged order.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import repeat
from math import copysign
from operator import attrgetter
from typing import Any

import numpy as np

from trustrank.risk.collector import collector_paused
from trustrank.risk.context import ContextIndex, DeploymentContext
from trustrank.risk.factors import InputLookups
from trustrank.risk.graph import EnvironmentAnalysis, analyse_environment, environment_digest
from trustrank.risk.inputs import (
    DECISIONS,
    Finding,
    RankInputs,
    RankSettings,
    ssvc_exposure,
)
from trustrank.risk.queue import QueueColumns, assemble
from trustrank.risk.queue_key import Key as _Key
from trustrank.risk.ranked_queue import with_rank
from trustrank.risk.results import (
    RankedFinding,
    RankResult,
    findings_hash_sum,
    inputs_digest,
)
from trustrank.risk.scoring import (
    EXPLOITATION_INDEX,
    Factor,
    VulnFacts,
    kind_decision,
    kind_facts,
    ssvc_level,
    vuln_facts,
)
from trustrank.risk.service_results import service_places, service_results

_Row = tuple[Any, ...]


def _environments(inputs: RankInputs) -> list[str]:
    names = {s.environment for s in inputs.services}
    names |= {e.environment for e in inputs.edges}
    return sorted(names)


_GRAPH_PARTS = ("services", "edges", "peers", "origins")


def analyse(
    *,
    inputs: RankInputs,
    settings: RankSettings,
    previous: Mapping[str, EnvironmentAnalysis] | None = None,
    previous_graph: Mapping[str, tuple[Any, bytes]] | None = None,
) -> dict[str, EnvironmentAnalysis]:
    """Graph analysis (exposure, paths, identity trust) per environment. An environment
    whose graph inputs hash as in `previous` reuses the previous analysis; when the graph
    collections are the very objects `previous_graph` names (a result's `digest_parts`:
    the gather found them unchanged; made under the same settings version), every previous
    analysis is reused unhashed."""
    if previous is not None and previous_graph and all(
        name in previous_graph and previous_graph[name][0] is getattr(inputs, name)
        for name in _GRAPH_PARTS
    ):
        return dict(previous)
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
        # The index's own cache, read directly: this lookup runs once per finding.
        self.context_cache = index.cache
        self.zeroed: dict[tuple[Factor, ...], tuple[Factor, ...]] = {}
        # A ranked finding's `facts` and, deployed nowhere, its `context`, one tuple per
        # distinct content: keyed by the identity of the factor tuple (or context) they
        # hold, which keeps that object alive, so its id is not reused while cached.
        self.facts: dict[tuple[Any, ...], _Row] = {}
        self.nowhere: dict[tuple[Any, ...], tuple[_Row, _Row]] = {}

    def _zeroed(self, factors: tuple[Factor, ...]) -> tuple[Factor, ...]:
        zeroed = self.zeroed.get(factors)
        if zeroed is None:
            zeroed = self.zeroed[factors] = tuple(
                Factor(x.name, x.value, 0.0, x.source, x.confidence) for x in factors
            )
        return zeroed

    def _facts_of(self, exploitation: Any, automatable: bool,
                  factors: tuple[Factor, ...]) -> _Row:
        key = (exploitation, automatable, id(factors))
        facts = self.facts.get(key)
        if facts is None:
            facts = self.facts[key] = (exploitation, automatable, factors)
        return facts

    def _nowhere(self, best: DeploymentContext, baseline: float) -> _Row:
        """The context of a finding deployed nowhere with `baseline` whose best context is
        `best`: its factors listed with no effect and the static score's, shared by the
        findings of equal baseline (by value and sign: -0.0 equals 0.0, yet is written
        differently)."""
        key = (id(best.tail), baseline, copysign(1.0, baseline))
        kept = self.nowhere.get(key)
        if kept is None:
            context_factors = (*self._zeroed(best.factors), Factor(
                "baseline", baseline, 0.0, "static score (deployed nowhere)", "high"))
            kept = self.nowhere[key] = (best.tail, (*best.tail[:-1], context_factors))
        return kept[1]

    def score(self, f: Finding) -> tuple[_Key, _Row]:
        """(sort key, the ranked finding's fields after `rank`: score, decision, facts,
        context, record)."""
        if f.kind == "vulnerability":
            vkey = (f.vuln_id, f.in_kev, f.kev_date, f.epss, f.epss_percentile, f.epss_date,
                    f.cvss_score, f.cvss_vector, f.severity, f.severity_source)
            facts = self.vuln_cache.get(vkey)
            if facts is None:
                facts = self.vuln_cache[vkey] = vuln_facts(f, self.settings)
            slot = facts.slot
            bests = self.context_cache.get(
                (f.project_version, f.component_key, f.environment, f.service))
            if bests is None:
                bests = self.index.best_contexts(
                    project_version=f.project_version, component_key=f.component_key,
                    environment=f.environment, service=f.service,
                )
            best: DeploymentContext = bests[slot]
            best_d = best.decisions[slot]
        else:
            facts = kind_facts(f, self.settings)
            best = self.index.best_contexts(
                project_version=f.project_version, component_key=None,
                environment=f.environment, service=f.service,
            )[0]
            best_d = DECISIONS.index(kind_decision(
                kind=f.kind, sub_kind=f.sub_kind,
                exposure=ssvc_exposure(best.exposure, self.settings),
                human_impact=best.human_impact,
            ))
        if best.deployed:
            score = round(min(100.0, max(0.0, 50.0 + (facts.points + best.points))), 4)
            row = (score, DECISIONS[best_d], self._facts_of(
                facts.exploitation, facts.automatable, facts.factors), best.tail, f)
        else:
            # Deployed nowhere: the static score keeps the order it had; the factors stay
            # listed with no effect so the page still says what is known.
            score = round(min(100.0, max(0.0, f.baseline)), 4)
            row = (score, DECISIONS[best_d], self._facts_of(
                facts.exploitation, facts.automatable, self._zeroed(facts.factors)),
                   self._nowhere(best, f.baseline), f)
        level = ssvc_level(
            exploitation=facts.exploitation,
            exposure=ssvc_exposure(best.exposure, self.settings),
            automatable=facts.automatable, human_impact=best.human_impact,
        ) if best.deployed else 0
        return (-best_d, not best.deployed, -level, -score, len(f.id), f.id), row

    def queue(self, records: Sequence[Finding]) -> QueueColumns:
        """Every finding of `records` scored, as columns: what `score` gives per finding,
        the same values. A deployed vulnerability's score and decision depend only on its
        advisory facts and its best contexts, so those are looked up once per distinct
        key (`_VULN_KEY`, `_CONTEXT_KEY`, each a pass in C over the findings) and combined
        by numpy; the other findings (identity and reliability findings, versions deployed
        nowhere: few) go through `score`."""
        n = len(records)
        cols = QueueColumns.empty(n)
        vuln = np.fromiter(map("vulnerability".__eq__, map(_KIND, records)), dtype=bool,
                           count=n)
        at = np.flatnonzero(vuln)
        vrecords = list(map(records.__getitem__, at.tolist()))
        facts_code, facts_first = _dense(map(_VULN_KEY, vrecords), len(at))
        bests_code, bests_first = _dense(map(_CONTEXT_KEY, vrecords), len(at))
        facts = [self._facts(vrecords[i]) for i in facts_first.tolist()]
        bests = [self._bests(vrecords[i]) for i in bests_first.tolist()]
        slot = np.array([x.slot for x in facts], dtype=np.int64)[facts_code]
        facts_points = np.array([x.points for x in facts], dtype=np.float64)
        # Each distinct context of every slot, by identity (the caches keep them alive).
        contexts: dict[int, int] = {}
        context_list: list[DeploymentContext] = []
        of_slot = np.empty((len(bests), 6), dtype=np.int64)
        for b, six in enumerate(bests):
            for s_, c in enumerate(six):
                code = contexts.get(id(c))
                if code is None:
                    code = contexts[id(c)] = len(context_list)
                    context_list.append(c)
                of_slot[b, s_] = code
        context = of_slot[bests_code, slot]
        decisions = np.array([c.decisions for c in context_list], dtype=np.int64).reshape(
            len(context_list), 6)
        deployed = np.array([c.deployed for c in context_list], dtype=bool)[context]
        raw = 50.0 + (facts_points[facts_code]
                      + np.array([c.points for c in context_list], dtype=np.float64)[context])
        # Python's round, not numpy's (which differs in the last digit now and then): once
        # per distinct sum.
        sums, inverse = np.unique(raw, return_inverse=True)
        rounded = np.array([round(min(100.0, max(0.0, x)), 4) for x in sums.tolist()],
                           dtype=np.float64)
        cols.score[at] = rounded[inverse.reshape(-1)]
        # The SSVC level: the advisory's part (exploitation, automatable) plus the
        # context's (exposure, human impact), a lookup each per distinct one.
        mid_level = np.array([EXPLOITATION_INDEX[x.exploitation] + int(x.automatable)
                              for x in facts], dtype=np.int8)
        context_level = np.array([c.level for c in context_list], dtype=np.int8)
        cols.level[at] = mid_level[facts_code] + context_level[context]
        cols.decision[at] = decisions[context, slot]
        cols.deployed[at] = deployed
        cols.mid[at] = facts_code
        cols.tail[at] = context
        cols.mids.extend((x.exploitation, x.automatable, x.factors) for x in facts)
        cols.tails.extend(c.tail for c in context_list)
        # The rest one by one: their rows as `score` makes them, split the same way.
        slow = np.flatnonzero(~vuln).tolist() + at[~deployed].tolist()
        for i in slow:
            key, row = self.score(records[i])
            cols.score[i], cols.decision[i] = row[0], _DECISION_ORDER[row[1]]
            cols.level[i] = -key[2]
            cols.deployed[i] = row[3][0]
            cols.mid[i], cols.tail[i] = len(cols.mids), len(cols.tails)
            cols.mids.append(row[2])
            cols.tails.append(row[3])
        return cols

    def _facts(self, f: Finding) -> VulnFacts:
        vkey = _VULN_KEY(f)
        facts = self.vuln_cache.get(vkey)
        if facts is None:
            facts = self.vuln_cache[vkey] = vuln_facts(f, self.settings)
        return facts

    def _bests(self, f: Finding) -> tuple[DeploymentContext, ...]:
        bests = self.context_cache.get(_CONTEXT_KEY(f))
        if bests is None:
            bests = self.index.best_contexts(
                project_version=f.project_version, component_key=f.component_key,
                environment=f.environment, service=f.service,
            )
        return bests


# What a vulnerability's advisory facts and its contexts are looked up by (the keys of
# `_Scorer.vuln_cache` and `ContextIndex.cache`).
_VULN_KEY = attrgetter("vuln_id", "in_kev", "kev_date", "epss", "epss_percentile",
                       "epss_date", "cvss_score", "cvss_vector", "severity",
                       "severity_source")
_CONTEXT_KEY = attrgetter("project_version", "component_key", "environment", "service")
_KIND = attrgetter("kind")


def _dense(keys: Iterable[Any], n: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(a code per key, numbered by first occurrence; the place of each code's first)."""
    table: dict[Any, int] = {}
    codes = np.fromiter(map(table.setdefault, keys, map(len, repeat(table, n))),
                        dtype=np.int64, count=n)
    return codes, np.unique(codes, return_index=True)[1]


# `RankedFinding(…)` runs a Python-level `__new__`; the tuple constructor makes the same
# named tuple in C (a million times per run).
_new_ranked = tuple.__new__


_DECISION_ORDER = {d: i for i, d in enumerate(DECISIONS)}


def _merge(
    kept: list[RankedFinding], fresh: list[tuple[_Key, _Row]], queue_key: Callable[
        [RankedFinding], _Key],
) -> tuple[RankedFinding, ...]:
    """Merge two ordered runs and renumber; a kept finding whose rank did not change is
    reused as it is."""
    out: list[RankedFinding] = []
    append, extend = out.append, out.extend
    new, cls = _new_ranked, RankedFinding
    # Where each fresh finding goes among the kept ones (kept are in queue order): a
    # binary search each, instead of a sort key for every kept finding.
    cuts = [bisect_left(kept, fkey, key=queue_key) for fkey, _row in fresh]
    start = 0
    for j in range(len(fresh) + 1):
        cut = cuts[j] if j < len(fresh) else len(kept)
        if cut > start:
            first = len(out) + 1
            # Kept ranks are consecutive within a run of kept findings unless a finding
            # between them left or was rescored: when both ends already hold their new
            # rank, every finding between does too and is reused as it is.
            if kept[start].rank == first and kept[cut - 1].rank == first + cut - start - 1:
                extend(kept[start:cut])
            else:
                for rank, r in enumerate(kept[start:cut], start=first):
                    append(with_rank(r, rank))
            start = cut
        if j < len(fresh):
            fkey, row = fresh[j]
            append(new(cls, (fkey[-1], len(out) + 1, *row)))
    return tuple(out)


def _check_ids(findings: Collection[Finding]) -> None:
    if len({f.id for f in findings}) != len(findings):
        raise ValueError("finding ids must be unique")


def rank(
    *,
    inputs: RankInputs,
    settings: RankSettings | None = None,
    analyses: Mapping[str, EnvironmentAnalysis] | None = None,
    with_digest: bool = True,
    with_index: bool = True,
) -> RankResult:
    """Rank every finding of `inputs`. Pure: the same inputs and settings give a
    byte-identical `results.canonical_json`. `analyses` may pass a cached graph analysis
    (see `analyse`); `with_digest=False` skips hashing the inputs (tests, benchmarks, or
    a caller that hashes them later: `with_inputs_digest`); `with_index=False` leaves
    the result's `queue_index` to the caller (`queue.QueueIndex.in_parts`; an incremental
    run from a result without one builds it).
    Raises ValueError when two findings share an id: the id is the last tiebreak."""
    settings = settings or RankSettings()
    _check_ids(inputs.findings)
    with collector_paused():
        analyses = analyse(inputs=inputs, settings=settings, previous=analyses)
        lookups = InputLookups.build(inputs)
        index = ContextIndex(inputs=inputs, analyses=analyses, settings=settings,
                             lookups=lookups)
        findings, queue_index, columns = assemble(
            inputs.findings, _Scorer(index, settings).queue(inputs.findings),
            with_index=with_index)
        findings_sum = findings_hash_sum(inputs.findings) if with_digest else None
        parts: dict[str, tuple[Any, bytes]] = {}
        digest = inputs_digest(
            inputs=inputs, settings=settings, findings_sum=findings_sum, parts=parts,
        ) if with_digest else ""
        # Still paused: with a million findings alive, the first allocations after the
        # collector resumes would set off a full collection (over a second).
        services = service_results(index, analyses)
    return RankResult(
        settings_version=settings.version,
        inputs_digest=digest,
        findings=findings,
        services=services,
        analyses=analyses,
        findings_sum=findings_sum,
        queue_index=queue_index,
        digest_parts=parts,
        columns=columns,
        lookups=lookups,
        service_places=service_places(services),
    )


def with_inputs_digest(
    result: RankResult, *, inputs: RankInputs, settings: RankSettings,
    findings_sum: int | None = None,
) -> RankResult:
    """`result`, made by `rank(…, with_digest=False)` from `inputs` and `settings`, with
    the inputs digest, findings sum and digest parts `rank` would have given it.
    `findings_sum`: `findings_hash_sum(inputs.findings)` when the caller made it (a sum
    of the sums of parts is the same number), else it is made here."""
    if findings_sum is None:
        findings_sum = findings_hash_sum(inputs.findings)
    parts: dict[str, tuple[Any, bytes]] = {}
    with collector_paused():
        digest = inputs_digest(inputs=inputs, settings=settings,
                               findings_sum=findings_sum % (1 << 256), parts=parts)
    return replace(result, inputs_digest=digest, findings_sum=findings_sum % (1 << 256),
                   digest_parts=parts)
