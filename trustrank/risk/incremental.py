"""The incremental run: `rank_incremental` ranks again from a previous result, rescoring
only what depends on what changed (named versions and services, services whose graph
context changed, named findings) and merging them into the kept order (`queue.merge`).
The result equals `engine.rank` over the same inputs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from operator import itemgetter
from typing import Any

from trustrank.risk.collector import collector_paused
from trustrank.risk.context import ContextIndex
from trustrank.risk.engine import (
    _merge,
    _Scorer,
    analyse,
    rank,
)
from trustrank.risk.factors import InputLookups
from trustrank.risk.graph import EnvironmentAnalysis
from trustrank.risk.inputs import Finding, RankInputs, RankSettings
from trustrank.risk.queue import QueueIndex, merge
from trustrank.risk.queue_key import queue_key_for
from trustrank.risk.results import (
    RankedFinding,
    RankResult,
    ServiceResult,
    finding_hash,
    findings_hash_sum,
    inputs_digest,
)
from trustrank.risk.service_results import (
    service_places,
    service_results,
    service_results_updated,
)


def _to_rescore(
    findings: Sequence[RankedFinding], index: QueueIndex, touched: set[str],
    current: dict[str, Finding], records_out: list[Finding], dirty_versions: set[str],
    dirty_envs: set[str], services: set[tuple[str, str]],
    place_of: Callable[[str], int | None],
) -> list[int]:
    """`rank_incremental`'s split when the caller named the changed findings: the places
    (ascending) of the previous queue to take out, found through `index`: the named
    findings (their previous records go to `records_out`; `current` holds the new ones of
    those still open) and the findings that depend on a changed version, environment or
    service (their unchanged records go to `current`, to be scored again)."""
    places = set(index.places_depending_on(
        versions=dirty_versions, envs=dirty_envs, services=services).tolist())
    for fid in touched:
        at = place_of(fid)
        if at is not None:
            places.add(at)
    removed = sorted(places)
    for i in removed:
        r = findings[i]
        if r[0] in touched:
            records_out.append(r[6])
        else:
            current[r[0]] = r[6]
    return removed


class RescoreTooLarge(Exception):
    """`rank_incremental` would rescore more findings than its caller's limit: a full run
    (`engine.rank`, scoring by columns) is then the faster and the smaller way."""

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} findings to rescore")
        self.count = count


def _changed_analyses(
    before: Mapping[str, EnvironmentAnalysis], after: Mapping[str, EnvironmentAnalysis],
    services: set[tuple[str, str]],
) -> set[str]:
    """The environments that came or went between two analyses; of an environment in
    both whose graph changed, the services whose context differs go into `services`.
    A finding sees the graph only through its service's context (`ContextIndex`), so a
    trace window that changed a few services' contexts rescores their findings, not the
    whole environment's (every finding of a one-environment team)."""
    dirty = set(before.keys() ^ after.keys())
    for env, a in after.items():
        old = before.get(env)
        if old is None or old is a:
            continue
        new_services, old_services = a.services, old.services
        services.update(
            (env, name) for name in new_services.keys() | old_services.keys()
            if new_services.get(name) != old_services.get(name))
    return dirty


def rank_incremental(
    *,
    previous: RankResult,
    inputs: RankInputs,
    settings: RankSettings | None = None,
    changed_project_versions: Collection[str] = (),
    changed_services: Collection[tuple[str, str]] = (),
    changed_findings: Collection[str] | None = None,
    changed_records: Collection[Finding] | None = None,
    previous_places: Callable[[str], int | None] | None = None,
    with_digest: bool = True,
    rescore_above: int | None = None,
) -> RankResult:
    """Rank again reusing `previous` where nothing it depends on changed; the result is the
    same as `rank(inputs=…)` provided the caller names every project version whose SBOM,
    components or deployments changed and every service whose library evidence or
    deployment changed (graph changes are detected by the environment digests). The
    lookups of `previous` (`factors.InputLookups`) and the parts of its inputs digest are
    updated by those versions and services alone: every other deployment, project
    version, component and library record is taken to be as before.
    `changed_findings`, when given, names every finding that is new, changed or gone
    since `previous`: the other records of `inputs` are taken to be those of `previous`,
    and are not compared one by one; `changed_records`, when given with them, are the
    current records of those still open (else they are looked up in `inputs`). Then the
    findings to rescore are found, and merged back, in time proportional to what changed
    (`queue.merge`); `previous_places`, when given, tells a finding id's place in
    `previous.findings` (else a map of them is made).
    Raises `RescoreTooLarge` when more than `rescore_above` findings (new, changed, or
    depending on what changed) are to be scored: one by one and merged into the kept
    queue, they take longer and hold more memory than a full run's columns."""
    settings = settings or RankSettings()
    if previous.settings_version != settings.version:
        return rank(inputs=inputs, settings=settings, with_digest=with_digest)
    with collector_paused():
        if changed_findings is None:
            current = {f.id: f for f in inputs.findings}
            if len(current) != len(inputs.findings):
                raise ValueError("finding ids must be unique")
        else:
            touched = set(changed_findings)
            current = {f.id: f for f in (
                inputs.findings if changed_records is None else changed_records)
                if f.id in touched}
            records_in = list(current.values())
        records_out: list[Finding] = []
        analyses = analyse(inputs=inputs, settings=settings, previous=previous.analyses,
                           previous_graph=previous.digest_parts)
        if previous.lookups is not None:
            # The previous run's lookups with the entries of the named versions and
            # services made again (and of any version or service a deployment of theirs
            # moved from or to, scored again too).
            lookups, dirty_versions, services, rows = previous.lookups.updated(
                inputs, versions=changed_project_versions, services=changed_services)
            # The records that may differ from the previous ones are those: only their
            # groups' parts of the inputs digest are hashed again (copies of the sets,
            # which grow below by what the graph changed).
            changed_groups: dict[str, tuple[set[Any], list[Any]]] | None = {
                name: (set(services if name in ("deployments", "libraries")
                           else dirty_versions), records)
                for name, records in rows.items()}
        else:
            lookups = InputLookups.build(inputs)
            dirty_versions, services = set(changed_project_versions), set(changed_services)
            changed_groups = None
        dirty_envs = _changed_analyses(previous.analyses, analyses, services)
        index = ContextIndex(inputs=inputs, analyses=analyses, settings=settings,
                             lookups=lookups)
        by_service = lookups.by_service
        for key in services:
            dirty_versions.update(d.project_version for d in by_service.get(key, ()))
        if dirty_envs:
            dirty_versions.update(
                d.project_version for d in inputs.deployments if d.environment in dirty_envs)
        kept: list[RankedFinding] = []  # still in previous queue order
        queue_index = changed_places = moves = None
        if changed_findings is not None:
            queue_index = previous.queue_index or QueueIndex.build(previous.findings)
            removed = _to_rescore(
                previous.findings, queue_index, touched, current, records_out,
                dirty_versions, dirty_envs, services,
                previous_places or queue_index.places(previous.findings).get)
        else:
            for r in previous.findings:
                f = current.pop(r.finding_id, None)
                if f is None:
                    continue  # closed since
                if (
                    (r.finding is f or r.finding == f)
                    and f.project_version not in dirty_versions
                    # An identity finding names a service, not a version; its trust still
                    # reads the provenance of the version that service ran.
                    and r.project_version not in dirty_versions
                    and f.environment not in dirty_envs
                    and (f.environment, f.service) not in services
                ):
                    kept.append(r)
                else:
                    current[f.id] = f
        if rescore_above is not None and len(current) > rescore_above:
            raise RescoreTooLarge(len(current))
        score = _Scorer(index, settings).score
        # What is left in `current` is new or changed: score it, sort it, and merge it
        # into the unchanged findings, which are already in order.
        fresh = sorted((score(f) for f in current.values()), key=itemgetter(0))
        findings: Sequence[RankedFinding]
        if queue_index is not None:
            merged = merge(previous.findings, queue_index, removed, fresh,
                           queue_key_for(settings))
            findings, changed_places, queue_index, moves = (
                merged.findings, merged.changed, merged.index, merged.moves)
        else:
            findings = _merge(kept, fresh, queue_key_for(settings))
        findings_sum = None
        if with_digest:
            if changed_findings is not None and previous.findings_sum is not None:
                # The records named changed out, their new versions in: the same sum as
                # over every record (`findings_hash_sum`).
                findings_sum = (
                    previous.findings_sum - sum(map(finding_hash, records_out))
                    + sum(map(finding_hash, records_in))
                ) % (1 << 256)
            else:
                findings_sum = findings_hash_sum(inputs.findings)
        parts: dict[str, tuple[Any, bytes]] = {}
        digest = inputs_digest(
            inputs=inputs, settings=settings, findings_sum=findings_sum,
            known=previous.digest_parts, parts=parts,
            changed=changed_groups,
        ) if with_digest else ""
        # A service's result reads its environment's analysis, its deployment and the
        # provenance of the version deployed: unchanged, the previous result stands.
        services_out = places = None
        if not dirty_envs and previous.lookups is not None:
            places = previous.service_places or service_places(previous.services)
            services_out = service_results_updated(
                index, analyses, previous.services, places, previous.analyses,
                previous.lookups.by_service, services | {
                    (d.environment, d.service) for v in dirty_versions
                    for d in lookups.by_version.get(v, ())})
        if services_out is None:
            before = {(r.environment, r.name): r for r in previous.services}

            def reuse(env: str, name: str, version: str) -> ServiceResult | None:
                if (env in dirty_envs or (env, name) in services
                        or version in dirty_versions):
                    return None
                return before.get((env, name))

            services_out = service_results(index, analyses, reuse)
            places = None
    return RankResult(
        settings_version=settings.version,
        inputs_digest=digest,
        findings=findings,
        services=services_out,
        analyses=analyses,
        findings_sum=findings_sum,
        changed_places=changed_places,
        moves=moves,
        queue_index=queue_index,
        digest_parts=parts,
        lookups=lookups,
        service_places=places,
    )
