"""The explanation factors that depend on where a finding runs: exposure, reachability,
human impact and fused trust, each built once per service, deployment or provenance facts
and shared by every finding that has it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, compress
from operator import attrgetter, or_
from typing import Any, TypeVar

from trustrank.risk.graph import ServiceContext
from trustrank.risk.inputs import (
    Component,
    Confidence,
    Deployment,
    ObservedComponent,
    RankInputs,
    RankSettings,
    Reachability,
    ServiceLibraries,
)
from trustrank.risk.libraries import component_matches
from trustrank.risk.scoring import (
    EXPOSURE_VALUES,
    IMPACT_VALUES,
    REACHABILITY_VALUES,
    Factor,
)

T = TypeVar("T")
K = TypeVar("K")


def points_of(weight: float, value: float) -> float:
    return round(weight * (value - 0.5), 4)


def window_text(minutes: float) -> str:
    """1440 -> `24 h`, 10080 -> `7 d`, 90 -> `90 min`."""
    m = round(minutes)
    if m >= 2880 and m % 1440 == 0:
        return f"{m // 1440} d"
    if m >= 60 and m % 60 == 0:
        return f"{m // 60} h"
    return f"{m} min"


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def rate_text(
    *, per_minute: float, recent: float | None, peak: float | None, window_minutes: float
) -> str:
    """A call rate with its window: `3.2/s (last hour; peak 10.1/s over 24 h)` when the last
    hour's rate and the window's busiest minute are known, else `0.5/s (average over 24 h)`.
    One unit for every number of the phrase, chosen by the largest (per second from one a
    second, per minute from one a minute, else per hour)."""
    window = window_text(window_minutes)
    with_buckets = recent is not None and peak is not None and window_minutes >= 60
    largest = max(per_minute, peak or 0.0) if with_buckets else per_minute
    if largest >= 60:
        unit, scale = "/s", 1 / 60
    elif largest >= 1:
        unit, scale = "/min", 1.0
    else:
        unit, scale = "/h", 60.0
    if with_buckets:
        return (f"{_number((recent or 0.0) * scale)}{unit} (last hour; "
                f"peak {_number((peak or 0.0) * scale)}{unit} over {window})")
    return f"{_number(per_minute * scale)}{unit} (average over {window})"


def group_keys(component_key: str) -> list[str]:
    """The group keys that contain a component key, nearest first
    (`pkg:maven/g/a` → [`pkg:maven/g`])."""
    head, _, rest = component_key.partition("/")
    parts = rest.split("/")
    return [head + "/" + "/".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)]


_VERSION = attrgetter("project_version")
_SERVICE = attrgetter("environment", "service")
_DEPLOYMENT_ORDER = attrgetter("environment", "service", "project_version")


def _of(records: Sequence[T], key: Callable[[T], K], keys: Collection[K]) -> list[T]:
    """The records whose key is one of `keys`, in order (a pass in C)."""
    return list(compress(records, map(keys.__contains__, map(key, records))))


def _deployments_named(
    records: Sequence[Deployment], versions: Collection[str],
    services: Collection[tuple[str, str]],
) -> list[Deployment]:
    """The deployments of one of `versions` or on one of `services`, in order."""
    return list(compress(records, map(
        or_, map(versions.__contains__, map(_VERSION, records)),
        map(services.__contains__, map(_SERVICE, records)))))


def _libraries_of(
    records: Iterable[ServiceLibraries],
) -> dict[tuple[str, str], tuple[bool, dict[str, ObservedComponent]]]:
    out: dict[tuple[str, str], tuple[bool, dict[str, ObservedComponent]]] = {}
    for lib in records:
        key = (lib.environment, lib.service)
        traced, observed = out.get(key, (False, {}))
        merged = dict(observed)
        for o in lib.observed:
            known = merged.get(o.component_key)
            # Two records naming one key: keep the busier (then the smaller evidence
            # name), whatever order they came in.
            if known is None or (o.calls_per_minute, known.evidence) > (
                    known.calls_per_minute, o.evidence):
                merged[o.component_key] = o
        out[key] = (traced or lib.traced or bool(lib.observed), merged)
    return out


def _components_of(
    records: Iterable[Component],
) -> tuple[dict[str, dict[str, Component]], dict[str, tuple[float, float]]]:
    """Components by version then key (the last of a repeated key), and each version's
    shares of components with hashes and with a known supplier."""
    by_version: dict[str, dict[str, Component]] = {}
    counts: dict[str, list[int]] = {}
    for c in records:
        v = c.project_version
        keys = by_version.get(v)
        if keys is None:
            keys = by_version[v] = {}
            counts[v] = [0, 0, 0]
        keys[c.key] = c
        row = counts[v]
        row[0] += 1
        row[1] += c.hashes_present
        row[2] += c.supplier_known
    return by_version, {k: (h / n, s / n) for k, (n, h, s) in counts.items()}


def _deployments_of(
    records: Iterable[Deployment],
) -> tuple[dict[str, list[Deployment]], dict[tuple[str, str], list[Deployment]]]:
    by_version: dict[str, list[Deployment]] = {}
    by_service: dict[tuple[str, str], list[Deployment]] = {}
    for d in sorted(records, key=_DEPLOYMENT_ORDER):
        by_version.setdefault(d.project_version, []).append(d)
        by_service.setdefault((d.environment, d.service), []).append(d)
    return by_version, by_service


@dataclass(frozen=True, slots=True)
class InputLookups:
    """What the factors and contexts look up in the inputs besides the graph: signed
    versions, components and each version's provenance shares, library evidence by
    service, deployments by version and by service (sorted by environment, service and
    version). Kept with a result (`RankResult.lookups`) so an incremental run updates the
    entries of the changed versions and services (`updated`) instead of building them
    again over every component, deployment and library record. Never changed once made:
    a result's lookups stay those of its inputs."""

    signed: frozenset[str]
    components: dict[str, dict[str, Component]]
    version_shares: dict[str, tuple[float, float]]
    libraries: dict[tuple[str, str], tuple[bool, dict[str, ObservedComponent]]]
    by_version: dict[str, list[Deployment]]
    by_service: dict[tuple[str, str], list[Deployment]]

    @classmethod
    def build(cls, inputs: RankInputs) -> InputLookups:
        components, shares = _components_of(inputs.components)
        by_version, by_service = _deployments_of(inputs.deployments)
        return cls(
            signed=frozenset(v.key for v in inputs.project_versions if v.sbom_signed),
            components=components, version_shares=shares,
            libraries=_libraries_of(inputs.libraries),
            by_version=by_version, by_service=by_service,
        )

    def updated(
        self, inputs: RankInputs, *, versions: Collection[str],
        services: Collection[tuple[str, str]],
    ) -> tuple[InputLookups, set[str], set[tuple[str, str]], dict[str, list[Any]]]:
        """The lookups of `inputs`, which differ from those these were made of only in
        the records of `versions` (project version, components, deployments) and of
        `services` (library evidence, deployments): their entries are made again from
        `inputs`, the others shared. With them, the versions and services whose entries
        were made again: `versions` and `services`, and also the other side of every
        deployment of one of them before or now (a deployment that moved between versions
        refreshes both versions and its service however it was named), and the records
        of `inputs` those entries were made of, by collection (the deployments, project
        versions, components and libraries of those versions and services)."""
        versions, services = set(versions), set(services)
        rows: dict[str, list[Any]] = {
            "deployments": [], "project_versions": [], "components": [], "libraries": []}
        if not versions and not services:
            return self, versions, services, rows
        deployments = inputs.deployments
        # Every deployment of a named version or service, before and now, and their
        # versions and services in turn; until that closes (once or twice).
        while True:
            now = _deployments_named(deployments, versions, services)
            before = [d for v in versions for d in self.by_version.get(v, ())]
            before += [d for s in services for d in self.by_service.get(s, ())]
            more_versions = {d.project_version for d in chain(now, before)} - versions
            more_services = {(d.environment, d.service) for d in chain(now, before)} - services
            if not more_versions and not more_services:
                break
            versions |= more_versions
            services |= more_services
        dep_versions, dep_services = _deployments_of(now)
        by_version, by_service = dict(self.by_version), dict(self.by_service)
        for v in versions:
            by_version.pop(v, None)
        for s in services:
            by_service.pop(s, None)
        by_version.update(dep_versions)
        by_service.update(dep_services)
        components, shares = dict(self.components), dict(self.version_shares)
        for v in versions:
            components.pop(v, None)
            shares.pop(v, None)
        rows["deployments"] = now
        rows["components"] = _of(inputs.components, _VERSION, versions)
        rows["libraries"] = _of(inputs.libraries, _SERVICE, services)
        rows["project_versions"] = _of(inputs.project_versions, _KEY, versions)
        new_components, new_shares = _components_of(rows["components"])
        components.update(new_components)
        shares.update(new_shares)
        libraries = dict(self.libraries)
        for s in services:
            libraries.pop(s, None)
        libraries.update(_libraries_of(rows["libraries"]))
        signed = (self.signed - versions) | {
            v.key for v in rows["project_versions"] if v.sbom_signed}
        return InputLookups(
            signed=frozenset(signed), components=components, version_shares=shares,
            libraries=libraries, by_version=by_version, by_service=by_service,
        ), versions, services, rows


_KEY = attrgetter("key")


class FactorSource:
    """Provenance and library-evidence lookups from the inputs, and cached factors."""

    def __init__(self, *, inputs: RankInputs, settings: RankSettings,
                 lookups: InputLookups | None = None) -> None:
        """`lookups`: those of `inputs` when the caller has them (else they are made)."""
        self.settings = settings
        lookups = lookups or InputLookups.build(inputs)
        self.lookups = lookups
        self.signed = lookups.signed
        self.components = lookups.components
        self.version_shares = lookups.version_shares
        self.libraries = lookups.libraries
        self._trust_cache: dict[tuple[object, ...], tuple[float, Factor]] = {}
        self._reach_cache: dict[tuple[str, str, bool], tuple[Reachability, Factor]] = {}
        self._exposure_cache: dict[tuple[str, str], Factor] = {}
        self._impact_cache: dict[Deployment | None, Factor] = {}
        self._not_applicable = Factor("reachability", "not applicable", 0.0,
                                      "not a component finding", "high")
        self._undeployed: tuple[Factor, Reachability, Factor] = (
            Factor("exposure", settings.undeployed_exposure, 0.0,
                   "the project version runs on no known service; baseline order kept",
                   "medium"),
            "unknown",
            Factor("reachability", "unknown", 0.0, "no deployment", "low"),
        )

    # --- trust -----------------------------------------------------------------------

    def _code_facts(self, project_version: str, component_key: str | None) -> tuple[
            bool, float, float]:
        signed = project_version in self.signed
        if component_key is None:
            hashes, supplier = self.version_shares.get(project_version, (0.0, 0.0))
            return signed, hashes, supplier
        c = self.components.get(project_version, {}).get(component_key)
        return signed, float(bool(c and c.hashes_present)), float(bool(c and c.supplier_known))

    def fused_trust(
        self, svc: ServiceContext | None, project_version: str, component_key: str | None
    ) -> tuple[float, Factor]:
        """Identity trust (formula 1) and code-provenance trust fused by the settings'
        weights. One factor object per (service, provenance facts): few distinct ones."""
        facts = self._code_facts(project_version, component_key)
        key = (svc.environment if svc else "", svc.name if svc else "", facts,
               component_key is None)
        cached = self._trust_cache.get(key)
        if cached is not None:
            return cached
        s = self.settings
        signed, hashes, supplier = facts
        signed_w, hashes_w, supplier_w = s.provenance_weights
        code = signed_w * signed + hashes_w * hashes + supplier_w * supplier
        if component_key is None:
            code_source = (f"SBOM signed: {'yes' if signed else 'no'}; components with hashes "
                           f"{hashes:.0%}, with known supplier {supplier:.0%}")
        else:
            code_source = (f"SBOM signed: {'yes' if signed else 'no'}; hashes: "
                           f"{'yes' if hashes else 'no'}; supplier known: "
                           f"{'yes' if supplier else 'no'}")
        identity = svc.identity_trust if svc else 0.0
        trust = round(s.identity_trust_weight * identity + s.code_trust_weight * code, 6)
        conf: Confidence = "medium"
        if svc and svc.trust_anchor:
            if svc.trust_depth == 0:
                anchor, conf = f"attested identity {svc.identity or svc.name}", "high"
            else:
                anchor = f"{svc.trust_depth} hop(s) from anchor {svc.trust_anchor}"
        else:
            anchor = "no attested identity reaches it"
        source = f"identity trust {identity:.3f} ({anchor}); code trust {code:.2f} ({code_source})"
        effect = points_of(s.weights.low_trust, 1.0 - trust)
        out = trust, Factor("trust", trust, effect, source, conf)
        self._trust_cache[key] = out
        return out

    # --- reachability ----------------------------------------------------------------

    def reachability(
        self, environment: str, service: str, component_key: str
    ) -> tuple[Reachability, Factor]:
        traced, observed = self.libraries.get((environment, service), (False, {}))
        if component_key:
            hit = observed.get(component_key)
            if hit is None:
                for group in group_keys(component_key):
                    group_hit = observed.get(group)
                    if group_hit is not None and component_matches(component_key, group):
                        # Evidence that names only the group says some artifact of it runs,
                        # not this one: unknown, never observed (issue 24).
                        return "unknown", Factor(
                            "reachability", "unknown", 0.0,
                            f"{group_hit.evidence} on {environment}/{service} names only the "
                            f"group {group.removeprefix('pkg:maven/')}, not which of its "
                            "artifacts runs", "low")
            if hit is not None:
                conf: Confidence = "high"
                w = self.settings.weights.reachability
                rate = rate_text(
                    per_minute=hit.calls_per_minute, recent=hit.recent_calls_per_minute,
                    peak=hit.peak_calls_per_minute,
                    window_minutes=self.settings.window_minutes,
                )
                source = f"{hit.evidence} on {environment}/{service}, called {rate}"
                effect = points_of(w, REACHABILITY_VALUES["observed"])
                return "observed", Factor("reachability", "observed", effect, source, conf)
        # Not observed and unknown say the same for every component of the service: one
        # factor object each per service.
        key = (environment, service, bool(component_key))
        cached = self._reach_cache.get(key)
        if cached is None:
            cached = self._reach_cache[key] = self._unobserved(environment, service, traced,
                                                               bool(component_key))
        return cached

    def _unobserved(self, environment: str, service: str, traced: bool,
                    named: bool) -> tuple[Reachability, Factor]:
        if not named:
            return "unknown", Factor("reachability", "unknown", 0.0,
                                     "finding names no component", "low")
        if traced:
            w = self.settings.weights.reachability
            return "not observed", Factor(
                "reachability", "not observed", points_of(w, REACHABILITY_VALUES["not observed"]),
                f"{environment}/{service} sends traces; none names this component", "medium")
        return "unknown", Factor("reachability", "unknown", 0.0,
                                 f"{environment}/{service} sends no traces", "low")

    def _exposure_factor(self, svc: ServiceContext) -> Factor:
        cached = self._exposure_cache.get((svc.environment, svc.name))
        if cached is not None:
            return cached
        conf: Confidence = "medium"
        if svc.exposure == "unknown":
            # Read as the settings' unknown_exposure (open) in the decision, the SSVC level
            # and the points alike, and said here so the rank can be defended.
            as_ = self.settings.unknown_exposure
            factor = Factor(
                "exposure", "unknown",
                points_of(self.settings.weights.exposure, EXPOSURE_VALUES[as_]),
                f"{svc.exposure_reason}; read as System Exposure {as_!r} (nothing rules it "
                "out)", "low",
            )
            self._exposure_cache[(svc.environment, svc.name)] = factor
            return factor
        if svc.exposure == "open":
            window = self.settings.window_minutes
            hops = "; ".join(
                f"{h.source} → {h.target}: called "
                + rate_text(per_minute=h.calls_per_minute, recent=h.recent_calls_per_minute,
                            peak=h.peak_calls_per_minute, window_minutes=window)
                + f", mTLS {h.mtls_share:.0%}"
                if h.mtls_share is not None
                else f"{h.source} → {h.target}: {h.detail or h.via}"
                for h in svc.hops
            )
            # The route first (internet → entry → … → service), then how each hop is known.
            source = f"ingress path {' → '.join(svc.path)}: {hops}"
            conf = "medium" if svc.hops[0].via == "ingress candidate" else "high"
        else:
            source = svc.exposure_reason
        factor = Factor("exposure", svc.exposure,
                        points_of(self.settings.weights.exposure, EXPOSURE_VALUES[svc.exposure]),
                        source, conf)
        self._exposure_cache[(svc.environment, svc.name)] = factor
        return factor

    def _impact_factor(self, d: Deployment | None) -> Factor:
        cached = self._impact_cache.get(d)
        if cached is not None:
            return cached
        impact = d.human_impact if d else self.settings.default_human_impact
        factor = Factor(
            "human_impact", impact,
            points_of(self.settings.weights.human_impact, IMPACT_VALUES[impact]),
            deployment_text(d) if d else "default (no deployment)",
            "high" if d else "low",
        )
        self._impact_cache[d] = factor
        return factor


def deployment_text(d: Deployment) -> str:
    """`deployment prod/payment-gateway → payment-gateway@2.3.1 (source: sbom upload)`."""
    what = d.project_version_name or d.project_version
    source = f" (source: {d.source})" if d.source else ""
    return f"deployment {d.environment}/{d.service} → {what}{source}"
