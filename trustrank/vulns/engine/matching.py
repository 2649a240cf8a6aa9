"""OSV "affected" evaluation, exactly as the schema's Evaluation section defines it.

    IsVulnerable(pkg, v) = v listed in affected.versions or v in any range, where a range
    (SEMVER or ECOSYSTEM; GIT needs a commit graph and is skipped) is evaluated only below
    its `limit` events, walking its events in version order: introduced (v >= e) opens,
    fixed (v >= e) closes, last_affected (v > e) closes; "0" sorts first, "*" is infinity.

A component whose version its ecosystem cannot parse is reported UNKNOWN, never dropped.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cmp_to_key
from typing import Any, TypeVar

import networkx as nx

from trustrank.vulns.engine.ecosystems import (
    ComponentPackage,
    PackageKey,
    advisory_package_key,
    component_package,
    split_ecosystem,
)
from trustrank.vulns.engine.versions import parse, scheme_for

EVENT_KINDS = ("introduced", "fixed", "last_affected", "limit")


class Verdict(enum.StrEnum):
    AFFECTED = "affected"
    NOT_AFFECTED = "not_affected"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Event:
    kind: str  # introduced | fixed | last_affected | limit
    version: str


@dataclass(frozen=True, slots=True)
class Range:
    type: str  # SEMVER | ECOSYSTEM | GIT
    events: tuple[Event, ...]
    repo: str = ""


@dataclass(frozen=True, slots=True)
class AffectedPackage:
    ecosystem: str  # as written in the advisory, e.g. "Debian:11"
    name: str
    ranges: tuple[Range, ...] = ()
    versions: tuple[str, ...] = ()

    @property
    def key(self) -> PackageKey:
        return advisory_package_key(ecosystem=self.ecosystem, name=self.name)

    @property
    def release(self) -> str:
        return split_ecosystem(self.ecosystem)[1]


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str


def affected_from_osv(entry: dict[str, Any]) -> AffectedPackage:
    """Build from one OSV `affected[]` object (already validated by the parser)."""
    package = entry.get("package") or {}
    ranges = tuple(
        Range(
            type=str(r.get("type", "")),
            repo=str(r.get("repo", "")),
            events=tuple(
                Event(kind=kind, version=str(ev[kind]))
                for ev in r.get("events", [])
                for kind in EVENT_KINDS
                if kind in ev
            ),
        )
        for r in entry.get("ranges") or []
    )
    return AffectedPackage(
        ecosystem=str(package.get("ecosystem", "")),
        name=str(package.get("name", "")),
        ranges=ranges,
        versions=tuple(str(v) for v in entry.get("versions") or []),
    )


# --- range evaluation --------------------------------------------------------------------------

_MIN, _MID, _MAX = 0, 1, 2


def _event_cmp(a: tuple[int, Any, Event], b: tuple[int, Any, Event]) -> int:
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    if a[0] != _MID:
        return 0
    if a[1] < b[1]:
        return -1
    return 1 if b[1] < a[1] else 0


# A compiled range: sorted (rank, parsed, event) triples and the parsed limits; or None when an
# event's version is not valid in the range's scheme (the advisory is malformed for us).
Compiled = tuple[list[tuple[int, Any, Event]], list[Any], bool] | None


def compile_range(rng: Range, scheme: str) -> Compiled:
    items: list[tuple[int, Any, Event]] = []
    limits: list[Any] = []
    has_limit = False
    for ev in rng.events:
        if ev.kind == "introduced" and ev.version == "0":
            items.append((_MIN, None, ev))
            continue
        if ev.kind == "limit":
            has_limit = True
            if "*" in ev.version:
                limits.append(None)  # infinity
                continue
        parsed = parse(scheme, ev.version)
        if parsed is None:
            return None
        if ev.kind == "limit":
            limits.append(parsed)
        else:
            items.append((_MID, parsed, ev))
    items.sort(key=cmp_to_key(_event_cmp))  # stable: ties keep the advisory's order
    return items, limits, has_limit


def in_compiled_range(
    version: Any, compiled: tuple[list[tuple[int, Any, Event]], list[Any], bool]
) -> bool:
    # Only `<` is used: some univers classes (Gentoo/Alpine) define __lt__ by their scheme
    # but inherit attrs' >= and <=, which compare raw strings.
    items, limits, has_limit = compiled
    if has_limit and not any(lim is None or version < lim for lim in limits):
        return False
    vulnerable = False
    for rank, parsed, ev in items:
        if ev.kind == "introduced":
            if rank == _MIN or not version < parsed:
                vulnerable = True
        elif ev.kind == "fixed":
            if not version < parsed:
                vulnerable = False
        elif ev.kind == "last_affected" and parsed < version:
            vulnerable = False
    return vulnerable


class _Compiler:
    """Caches compiled ranges per (range, scheme); advisories repeat range shapes a lot."""

    def __init__(self) -> None:
        self._cache: dict[tuple[Range, str], Compiled] = {}
        self._versions: dict[tuple[tuple[str, ...], str], list[Any]] = {}

    def versions(self, versions: tuple[str, ...], scheme: str) -> list[Any]:
        key = (versions, scheme)
        found = self._versions.get(key)
        if found is None:
            parsed = (parse(scheme, v) for v in versions)
            found = self._versions[key] = [p for p in parsed if p is not None]
        return found

    def get(self, rng: Range, scheme: str) -> Compiled:
        key = (rng, scheme)
        try:
            return self._cache[key]
        except KeyError:
            compiled = self._cache[key] = compile_range(rng, scheme)
            return compiled


_DEFAULT_COMPILER = _Compiler()


def decide(
    version: str, affected: AffectedPackage, *, compiler: _Compiler | None = None
) -> Decision:
    """Is `version` of `affected.package` affected? The OSV evaluation, plus UNKNOWN."""
    compiler = compiler or _DEFAULT_COMPILER
    base, _ = split_ecosystem(affected.ecosystem)
    if version and version in affected.versions:
        return Decision(Verdict.AFFECTED, f"{version} is listed in the advisory's versions")
    unknown = ""
    for rng in affected.ranges:
        if rng.type == "GIT":
            continue  # needs the repository's commit graph; the versions list stands in
        scheme = scheme_for(ecosystem=base, range_type=rng.type)
        if scheme is None:
            unknown = f"no version ordering for ecosystem {base!r} ({rng.type} range)"
            continue
        parsed = parse(scheme, version)
        if parsed is None:
            unknown = f"version {version!r} is not a valid {scheme} version"
            continue
        compiled = compiler.get(rng, scheme)
        if compiled is None:
            unknown = f"the advisory's {rng.type} range has a version {scheme} cannot parse"
            continue
        if in_compiled_range(parsed, compiled):
            return Decision(Verdict.AFFECTED, f"{version} is in {range_text(rng)}")
    if affected.versions:
        scheme = scheme_for(ecosystem=base, range_type="ECOSYSTEM")
        parsed = parse(scheme, version) if scheme else None
        if parsed is not None and scheme is not None:
            for other in compiler.versions(affected.versions, scheme):
                if other == parsed:
                    return Decision(Verdict.AFFECTED, f"{version} equals listed version {other}")
    if unknown:
        return Decision(Verdict.UNKNOWN, unknown)
    return Decision(Verdict.NOT_AFFECTED, "outside every range and not listed")


def range_text(rng: Range) -> str:
    return f"{rng.type} [" + ", ".join(f"{e.kind} {e.version}" for e in rng.events) + "]"


def fixed_versions(affected: Iterable[AffectedPackage]) -> list[str]:
    out: list[str] = []
    for aff in affected:
        for rng in aff.ranges:
            if rng.type == "GIT":
                continue
            for ev in rng.events:
                if ev.kind == "fixed" and ev.version not in out:
                    out.append(ev.version)
    return out


# --- matching many components against many advisories ----------------------------------------


@dataclass(frozen=True, slots=True)
class AdvisoryRef:
    """What the engine needs of an advisory: its id, aliases and affected packages."""

    id: str
    aliases: tuple[str, ...]
    affected: tuple[AffectedPackage, ...]
    withdrawn: bool = False


@dataclass(frozen=True, slots=True)
class ComponentRef:
    ref: Any  # the caller's handle (a database id), passed through untouched
    purl: str
    version: str = ""


@dataclass(frozen=True, slots=True)
class Match:
    component: Any
    advisory_id: str
    verdict: Verdict
    reason: str
    package: PackageKey
    version: str
    fixed: tuple[str, ...] = ()


@dataclass
class AdvisoryIndex:
    """Advisories by package. Building it touches no version; ranges compile on first use."""

    by_key: dict[PackageKey, list[tuple[str, AffectedPackage]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    compiler: _Compiler = field(default_factory=_Compiler)

    @classmethod
    def build(cls, advisories: Iterable[AdvisoryRef]) -> AdvisoryIndex:
        index = cls()
        for adv in advisories:
            if adv.withdrawn:
                continue  # a withdrawn record matches nothing
            for aff in adv.affected:
                index.by_key[aff.key].append((adv.id, aff))
        return index

    def match_component(self, component: ComponentRef) -> list[Match]:
        pkg = component_package(component.purl)
        if pkg is None:
            return []
        return self.match_package(component.ref, pkg, component.version)

    def match_package(
        self, ref: Any, pkg: ComponentPackage, fallback_version: str = ""
    ) -> list[Match]:
        entries = self.by_key.get(pkg.key)
        if not entries:
            return []
        version = pkg.version or fallback_version
        per_advisory: dict[str, list[tuple[Decision, AffectedPackage]]] = defaultdict(list)
        for advisory_id, aff in entries:
            release = aff.release
            if release and pkg.release and release != pkg.release:
                continue  # another distribution release's package
            per_advisory[advisory_id].append((decide(version, aff, compiler=self.compiler), aff))
        out: list[Match] = []
        for advisory_id, decisions in per_advisory.items():
            verdicts = [d.verdict for d, _ in decisions]
            if Verdict.AFFECTED in verdicts:
                chosen = next(d for d, _ in decisions if d.verdict is Verdict.AFFECTED)
            elif Verdict.UNKNOWN in verdicts:
                chosen = next(d for d, _ in decisions if d.verdict is Verdict.UNKNOWN)
            else:
                continue
            out.append(
                Match(
                    component=ref,
                    advisory_id=advisory_id,
                    verdict=chosen.verdict,
                    reason=chosen.reason,
                    package=pkg.key,
                    version=version,
                    fixed=tuple(fixed_versions(aff for _, aff in decisions)),
                )
            )
        return out

    def match(self, components: Sequence[ComponentRef]) -> list[Match]:
        out: list[Match] = []
        for component in components:
            out.extend(self.match_component(component))
        return out


def canonical_id(ids: Iterable[str]) -> str:
    """The one name a group of aliases goes by: the lowest CVE id, else the lowest id.

    A GHSA, a PYSEC and the CVE they alias are one problem and so one finding.
    """
    ids = sorted({i for i in ids if i})
    cves = [i for i in ids if i.upper().startswith("CVE-")]
    return (cves or ids or [""])[0]


T = TypeVar("T")


def alias_groups(items: Sequence[tuple[set[str], T]]) -> list[tuple[set[str], list[T]]]:
    """Group items whose id sets share any id, transitively: two advisories that share an
    alias are one problem. Connected components of the bipartite item–id graph, so linear in
    the number of ids rather than quadratic in the number of items.

    Groups come in the order of their first item, and items in input order within a group.
    """
    graph: nx.Graph[tuple[int, Any]] = nx.Graph()
    for index, (ids, _item) in enumerate(items):
        graph.add_node((0, index))
        graph.add_edges_from(((0, index), (1, i)) for i in ids)
    groups: list[tuple[int, set[str], list[T]]] = []
    for component in nx.connected_components(graph):
        indexes = sorted(n[1] for n in component if n[0] == 0)
        ids = {n[1] for n in component if n[0] == 1}
        groups.append((indexes[0], ids, [items[i][1] for i in indexes]))
    groups.sort(key=lambda g: g[0])
    return [(ids, members) for _first, ids, members in groups]
