"""What the engine returns, its canonical JSON, the digests that make a rank reproducible,
and the difference between two results ("what moved most, and why")."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, methodcaller
from typing import Any, NamedTuple

import orjson

from trustrank.risk.graph import EnvironmentAnalysis, Hop
from trustrank.risk.inputs import (
    Decision,
    Exploitation,
    ExposureValue,
    Finding,
    HumanImpact,
    RankInputs,
    RankSettings,
    Reachability,
)
from trustrank.risk.scoring import Factor


class RankedFinding(NamedTuple):
    """One finding in the queue. A NamedTuple, not a dataclass: a run makes a million of
    them and tuple construction is several times cheaper. Seven fields (96 bytes): what
    is the finding's own is read from its input record `finding`, and what it shares with
    other findings is held as one reference each, `facts` (its advisory's: exploitation,
    automatable, the advisory's factors; `FACTS_FIELDS`) and `context` (the chosen
    deployment's, `DeploymentContext.tail`; `CONTEXT_FIELDS`), where 21 fields copied
    them all (208 bytes a finding, a million kept with a team's last run and as many
    again renumbered by an incremental one). Each of those values is still an attribute
    by its name (`kind`, `exploitation`, `environment`, …); `finding` is not part of the
    canonical JSON."""

    finding_id: str
    rank: int
    score: float
    decision: Decision
    facts: tuple[Exploitation, bool, tuple[Factor, ...]]
    context: tuple[Any, ...]
    finding: Finding

    @property
    def kind(self) -> str:
        return self[6].kind

    @property
    def component_key(self) -> str:
        return self[6].component_key

    @property
    def baseline(self) -> float:
        return self[6].baseline

    @property
    def exploitation(self) -> Exploitation:
        return self[4][0]

    @property
    def automatable(self) -> bool:
        return self[4][1]

    @property
    def finding_factors(self) -> tuple[Factor, ...]:
        """The advisory's half of the explanation (shared by its findings)."""
        return self[4][2]

    @property
    def deployed(self) -> bool:
        return self[5][0]

    @property
    def environment(self) -> str:
        return self[5][1]

    @property
    def service(self) -> str:
        return self[5][2]

    @property
    def project_version(self) -> str:
        return self[5][3]

    @property
    def exposure(self) -> ExposureValue:
        return self[5][4]

    @property
    def reachability(self) -> Reachability:
        return self[5][5]

    @property
    def human_impact(self) -> HumanImpact:
        return self[5][6]

    @property
    def trust(self) -> float:
        return self[5][7]

    @property
    def path(self) -> tuple[str, ...]:
        return self[5][8]

    @property
    def context_factors(self) -> tuple[Factor, ...]:
        """The deployment's half of the explanation (shared by its findings)."""
        return self[5][9]

    @property
    def explanation(self) -> tuple[Factor, ...]:
        """Every factor: name, value, effect on the score, source, confidence."""
        return self[4][2] + self[5][9]


# What `RankedFinding.facts` and `RankedFinding.context` hold, in order.
FACTS_FIELDS = ("exploitation", "automatable", "finding_factors")
CONTEXT_FIELDS = ("deployed", "environment", "service", "project_version", "exposure",
                  "reachability", "human_impact", "trust", "path", "context_factors")


@dataclass(frozen=True, slots=True)
class ServiceResult:
    environment: str
    name: str
    trust: float
    identity_trust: float
    exposure: ExposureValue
    exposure_reason: str
    path: tuple[str, ...]
    hops: tuple[Hop, ...]


@dataclass(frozen=True, slots=True)
class RankResult:
    """`findings` in rank order (rank 1 first). `analyses` are the per-environment graph
    results, kept so an incremental run can reuse the environments that did not change."""

    settings_version: str
    inputs_digest: str
    # A tuple, or a `ranked_queue.RankedQueue` (an incremental run's, read with its ranks).
    findings: Sequence[RankedFinding]
    services: tuple[ServiceResult, ...]
    analyses: Mapping[str, EnvironmentAnalysis] = field(default_factory=dict)
    # The findings' part of `inputs_digest` (`findings_hash_sum`), kept so an incremental
    # run updates it by the findings that changed; None when no digest was made.
    findings_sum: int | None = None
    # An incremental result's places (ascending) whose finding is not the previous
    # result's at that place; None when not known (a full run: compare them).
    changed_places: Sequence[int] | None = field(default=None, compare=False, repr=False)
    # And where each place's finding was in the previous result (`queue.Moves`), when the
    # queue was merged from it; None otherwise.
    moves: Any = field(default=None, compare=False, repr=False)
    # Where each finding sits and what it depends on (`queue.QueueIndex`), made by the first
    # incremental run from this result and carried along by the next ones.
    queue_index: Any = field(default=None, compare=False, repr=False)
    # Each input collection's part of `inputs_digest`, with the collection it was made
    # from: a next run given the very same collection (its gather found the rows
    # unchanged) reuses the part instead of hashing the collection again.
    digest_parts: Mapping[str, tuple[Any, bytes]] = field(
        default_factory=dict, compare=False, repr=False)
    # A full run's queue as columns (`queue.RankedColumns`), for a store that writes the
    # whole queue; None for an incremental result.
    columns: Any = field(default=None, compare=False, repr=False)
    # The lookups the run made of its inputs (`factors.InputLookups`), for the next
    # incremental run to update; and each service's place in `services` ((environment,
    # name) -> index), made by the first incremental run that needs it.
    lookups: Any = field(default=None, compare=False, repr=False)
    service_places: Any = field(default=None, compare=False, repr=False)


# --- canonical JSON and digests ---------------------------------------------------------

_OPTS = orjson.OPT_SORT_KEYS


def factor_json(f: Factor) -> dict[str, Any]:
    return {"name": f.name, "value": f.value, "effect": f.effect, "source": f.source,
            "confidence": f.confidence}


def finding_json(r: RankedFinding) -> dict[str, Any]:
    """The JSON shape of one ranked finding, as the wiring stores and the API shows it."""
    f, (exploitation, automatable, _), context = r[6], r[4], r[5]
    return {
        "finding_id": r[0], "rank": r[1], "score": r[2], "decision": r[3], "kind": f.kind,
        "component_key": f.component_key, "baseline": f.baseline,
        "exploitation": exploitation, "automatable": automatable, "deployed": context[0],
        "environment": context[1], "service": context[2], "project_version": context[3],
        "exposure": context[4], "reachability": context[5], "human_impact": context[6],
        "trust": context[7], "path": list(context[8]),
        "explanation": [factor_json(x) for x in r.explanation],
    }


def result_lines(result: RankResult) -> Iterator[bytes]:
    """The canonical serialisation, one JSON document per line: a header, each service,
    each finding. Byte-identical for equal results."""
    yield orjson.dumps(
        {"settings_version": result.settings_version, "inputs_digest": result.inputs_digest,
         "findings": len(result.findings), "services": len(result.services)},
        option=_OPTS,
    )
    for s in result.services:
        yield orjson.dumps(s, option=_OPTS)
    for r in result.findings:
        yield orjson.dumps(finding_json(r), option=_OPTS)


def canonical_json(result: RankResult) -> bytes:
    return b"\n".join(result_lines(result)) + b"\n"


def result_digest(result: RankResult) -> str:
    h = hashlib.sha256()
    for line in result_lines(result):
        h.update(line)
        h.update(b"\n")
    return h.hexdigest()


_MODULUS = 1 << 256


_digest_of = methodcaller("digest")


def finding_hash(f: Finding) -> int:
    """One finding record's SHA-256 (of its fields in order, as orjson writes them), as a
    number."""
    return int.from_bytes(hashlib.sha256(orjson.dumps(_finding_fields(f))).digest())


def findings_hash_sum(findings: Iterable[Finding]) -> int:
    """The sum modulo 2^256 of `finding_hash` over `findings`: independent of their order,
    and updated for a changed set by subtracting the old records' hashes and adding the
    new ones' (`rank_incremental` does)."""
    return sum(map(int.from_bytes, map(_digest_of, map(hashlib.sha256, map(
        orjson.dumps, map(_finding_fields, findings)))))) % _MODULUS


_finding_fields = attrgetter(*Finding.__slots__)


# The collections a ranking run reads anew every time, with what groups their rows: each
# enters the digest as the sum of its rows' hashes (as the findings do), kept by group
# so that an incremental run told which groups changed rehashes only theirs.
_SUMMED: dict[str, Callable[[Any], Any]] = {
    "deployments": attrgetter("environment", "service"),
    "project_versions": attrgetter("key"),
    "components": attrgetter("project_version"),
    "libraries": attrgetter("environment", "service"),
}


def _row_hashes(name: str, records: Iterable[Any]) -> Iterator[int]:
    """Each record's SHA-256 (of its fields in order, records nested in a field's tuple as
    tuples of theirs, as orjson writes them), as a number."""
    if name == "libraries":
        values: Iterable[Any] = map(_nested_fields, records)
    else:
        records = tuple(records)
        if not records:
            return iter(())
        values = map(attrgetter(*type(records[0]).__slots__), records)
    return map(int.from_bytes, map(_digest_of, map(hashlib.sha256, map(orjson.dumps,
                                                                         values))))


def _group_sums(name: str, records: Sequence[Any]) -> dict[Any, int]:
    """Group -> the sum of its rows' hashes (not reduced)."""
    sums: dict[Any, int] = {}
    get = sums.get
    for key, h in zip(map(_SUMMED[name], records), _row_hashes(name, records),
                      strict=True):
        sums[key] = get(key, 0) + h
    return sums


@dataclass(frozen=True, slots=True)
class SummedPart:
    """A summed collection's part of the digest: the sum, and the sum of each group."""

    total: int
    groups: Mapping[Any, int]

    def updated(self, name: str, changed: Collection[Any], rows: Sequence[Any]) -> SummedPart:
        """The part of a collection whose rows differ from those this was made of only in
        the groups `changed`, whose rows are now `rows`: their sums made again, the
        others kept."""
        fresh = _group_sums(name, rows)
        groups = dict(self.groups)
        total = self.total
        for key in changed:
            total -= groups.pop(key, 0)
        groups.update(fresh)
        return SummedPart((total + sum(fresh.values())) % _MODULUS, groups)


def inputs_digest(
    *, inputs: RankInputs, settings: RankSettings, findings_sum: int | None = None,
    known: Mapping[str, tuple[Any, Any]] | None = None,
    parts: dict[str, tuple[Any, Any]] | None = None,
    changed: Mapping[str, tuple[Collection[Any], Sequence[Any]]] | None = None,
) -> str:
    """SHA-256 over the settings and every input record, each collection in an order-
    independent form, so input order does not matter: the findings as `findings_hash_sum`
    (given here when the caller has it); deployments, project versions, components and
    libraries each as the sum modulo 2^256 of its rows' hashes (`SummedPart`); the graph's
    collections as their rows' digests, sorted. Stored with a run, it proves which inputs
    a rank was made from. A collection that is the very object `known` names (name ->
    (collection, part)) takes that part as it is; a summed collection whose rows differ
    from the ones `known` was made of only in the groups `changed` names (name -> (groups,
    their rows now); deployments and libraries by (environment, service), project versions
    and components by version) updates that part by those groups. `parts`, when given,
    receives each collection's."""
    h = hashlib.sha256(orjson.dumps(settings, option=_OPTS))
    sha256, dumps = hashlib.sha256, orjson.dumps
    known = known or {}
    for name in ("services", "edges", "peers", "origins", "deployments", "project_versions",
                 "components", "libraries", "findings"):
        h.update(b"\x00" + name.encode() + b"\x00")
        records = getattr(inputs, name)
        if not records:
            if parts is not None:
                parts[name] = (records, b"")
            continue
        if name == "findings":
            total = findings_hash_sum(records) if findings_sum is None else findings_sum
            h.update(total.to_bytes(32))
            continue
        was = known.get(name)
        part: Any
        if was is not None and was[0] is records:
            part = was[1]
        elif name in _SUMMED:
            if (changed is not None and name in changed and was is not None
                    and isinstance(was[1], SummedPart)):
                part = was[1].updated(name, *changed[name])
            else:
                sums = _group_sums(name, records)
                part = SummedPart(sum(sums.values()) % _MODULUS, sums)
        else:
            fields = attrgetter(*type(records[0]).__slots__)
            # Each row hashed on its own and the row digests sorted: order-independent,
            # and memory stays flat (no kilobyte orjson buffer kept per row).
            part = b"".join(sorted(
                sha256(dumps(fields(x))).digest()
                for x in records
            ))
        if parts is not None:
            parts[name] = (records, part)
        h.update(part.total.to_bytes(32) if isinstance(part, SummedPart) else part)
    return h.hexdigest()


def _nested_fields(record: Any) -> tuple[Any, ...]:
    """A record as a tuple of its fields, records inside tuples too."""
    return tuple(
        tuple(_nested_fields(v) for v in value) if isinstance(value, tuple) and value
        and hasattr(value[0], "__slots__") else value
        for value in (getattr(record, n) for n in record.__slots__)
    )


# --- what moved ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FactorChange:
    name: str
    before: str | float | bool | None
    after: str | float | bool | None
    effect_change: float


@dataclass(frozen=True, slots=True)
class Movement:
    """A finding whose place changed. `moved` is positive when it rose (rank got smaller);
    a finding new in `after` has `rank_before` None, one gone has `rank_after` None."""

    finding_id: str
    rank_before: int | None
    rank_after: int | None
    moved: int
    decision_before: Decision | None
    decision_after: Decision | None
    score_before: float | None
    score_after: float | None
    changes: tuple[FactorChange, ...]


def diff_results(*, before: RankResult, after: RankResult, limit: int = 50) -> tuple[
        Movement, ...]:
    """The `limit` findings that moved most between two results, each with the factors
    whose value or effect changed (largest effect change first). New and gone findings
    count as moving the whole queue length."""
    old = {r.finding_id: r for r in before.findings}
    new = {r.finding_id: r for r in after.findings}
    span = max(len(old), len(new)) + 1
    moves: list[Movement] = []
    for fid in old.keys() | new.keys():
        a, b = old.get(fid), new.get(fid)
        ra = a.rank if a else None
        rb = b.rank if b else None
        if ra == rb and a and b and a.score == b.score and a.decision == b.decision:
            continue
        moved = (ra if ra is not None else span) - (rb if rb is not None else span)
        changes: list[FactorChange] = []
        fa = {f.name: f for f in (a.explanation if a else ())}
        fb = {f.name: f for f in (b.explanation if b else ())}
        for name in sorted(fa.keys() | fb.keys()):
            x, y = fa.get(name), fb.get(name)
            if x and y and x.value == y.value and x.effect == y.effect:
                continue
            changes.append(FactorChange(
                name=name, before=x.value if x else None, after=y.value if y else None,
                effect_change=round((y.effect if y else 0.0) - (x.effect if x else 0.0), 4),
            ))
        changes.sort(key=lambda c: (-abs(c.effect_change), c.name))
        moves.append(Movement(
            finding_id=fid, rank_before=ra, rank_after=rb, moved=moved,
            decision_before=a.decision if a else None, decision_after=b.decision if b else None,
            score_before=a.score if a else None, score_after=b.score if b else None,
            changes=tuple(changes),
        ))
    moves.sort(key=lambda m: (-abs(m.moved), m.finding_id))
    return tuple(moves[:limit])
