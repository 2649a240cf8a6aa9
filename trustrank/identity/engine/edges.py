"""SPIFFE IDs to services, the identity strength of a call edge, and the callers a service's
policy allows."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

from trustrank.parsers.spiffe import spiffe_id_parse

# --- Mapping identities to services ---------------------------------------------------------

DEFAULT_MAPPING_RULES: tuple[str, ...] = (
    # Istio / Kubernetes: spiffe://<td>/ns/<namespace>/sa/<service-account>
    r"^/ns/(?P<namespace>[^/]+)/sa/(?P<service>[^/]+)$",
    # Otherwise the last path segment names the service.
    r"^/(?:[^/]+/)*(?P<service>[^/]+)$",
)
# SPIRE's own agents and servers are infrastructure, not services.
DEFAULT_MAPPING_EXCLUDE: tuple[str, ...] = (r"^/spire/",)


@dataclass(frozen=True)
class ServiceRef:
    name: str
    namespace: str = ""


@dataclass(frozen=True)
class MappingRules:
    rules: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]

    @classmethod
    def compile(
        cls, rules: Sequence[str] | None = None, exclude: Sequence[str] | None = None
    ) -> MappingRules:
        compiled = []
        for pattern in DEFAULT_MAPPING_RULES if rules is None else rules:
            regex = re.compile(pattern)
            if "service" not in regex.groupindex:
                raise ValueError(f"mapping rule {pattern!r} needs a (?P<service>...) group")
            compiled.append(regex)
        return cls(
            rules=tuple(compiled),
            exclude=tuple(
                re.compile(p) for p in (DEFAULT_MAPPING_EXCLUDE if exclude is None else exclude)
            ),
        )


def identity_map(spiffe_id: str, rules: MappingRules) -> ServiceRef | None:
    """The service a SPIFFE ID names by rule, or None (excluded, or no rule matches)."""
    try:
        parsed = spiffe_id_parse(spiffe_id)
    except ValueError:
        return None
    if any(ex.search(parsed.path) for ex in rules.exclude):
        return None
    for regex in rules.rules:
        match = regex.match(parsed.path)
        if match:
            groups = match.groupdict()
            return ServiceRef(name=groups["service"], namespace=groups.get("namespace") or "")
    return None


# --- Call edges -----------------------------------------------------------------------------


@dataclass(frozen=True)
class EndpointEvidence:
    """What one end of a call presented: mTLS or not, its SPIFFE ID and that identity's
    strength (the best currently valid certificate, 0-100)."""

    mtls: bool
    spiffe_id: str | None = None
    strength: int = 0

    @property
    def attested(self) -> bool:
        return self.mtls and bool(self.spiffe_id) and self.strength > 0


@dataclass(frozen=True)
class EdgeRules:
    one_side_factor: float = 0.5
    none_value: int = 0


@dataclass(frozen=True)
class EdgeStrength:
    value: int  # 0-100: `sig` in design formula 1
    kind: str  # mutual, one_side, none
    reason: str


def edge_identity_strength(
    *,
    caller: EndpointEvidence | None,
    callee: EndpointEvidence | None,
    rules: EdgeRules | None = None,
) -> EdgeStrength:
    """Identity strength of a call edge from the evidence on both ends.

    Both ends attested (mTLS with a valid SPIFFE identity): the weaker end's strength, since
    a hop is only as trustworthy as its least proven party. One end only: that end's
    strength times `one_side_factor`. Neither: `none_value`.
    """
    rules = rules or EdgeRules()
    caller_ok = caller is not None and caller.attested
    callee_ok = callee is not None and callee.attested
    if caller_ok and callee_ok:
        assert caller is not None and callee is not None
        value = min(caller.strength, callee.strength)
        return EdgeStrength(
            value, "mutual", f"both ends attested ({caller.spiffe_id} -> {callee.spiffe_id})"
        )
    if caller_ok or callee_ok:
        side = caller if caller_ok else callee
        assert side is not None
        value = round(side.strength * rules.one_side_factor)
        which = "caller" if caller_ok else "callee"
        return EdgeStrength(value, "one_side", f"only the {which} is attested ({side.spiffe_id})")
    return EdgeStrength(rules.none_value, "none", "no mTLS identity on either end")


# --- Caller policy --------------------------------------------------------------------------


@dataclass(frozen=True)
class ObservedEdge:
    """One observed call, as plain data (the runtime graph provides these)."""

    caller_service: str
    callee_service: str
    caller_spiffe_id: str | None
    mtls: bool
    caller_namespace: str = ""
    callee_namespace: str = ""


@dataclass(frozen=True)
class CallerPolicy:
    service: str
    namespace: str = ""
    allowed_callers: tuple[str, ...] = ()  # SPIFFE IDs or glob patterns
    require_mtls: bool = False


def caller_allowed(spiffe_id: str | None, patterns: Sequence[str]) -> bool:
    """Exact SPIFFE ID or shell-style glob (`spiffe://prod.example/ns/pay/*`)."""
    if not patterns:
        return True
    if not spiffe_id:
        return False
    return any(fnmatch.fnmatchcase(spiffe_id, pattern) for pattern in patterns)


def edge_policy_violations(edge: ObservedEdge, policy: CallerPolicy) -> list[str]:
    reasons: list[str] = []
    if policy.require_mtls and not edge.mtls:
        reasons.append(
            f"{edge.caller_service} called {edge.callee_service} without mTLS; "
            "the callee's policy requires it"
        )
    if policy.allowed_callers and not caller_allowed(
        edge.caller_spiffe_id if edge.mtls else None, policy.allowed_callers
    ):
        who = edge.caller_spiffe_id if edge.mtls and edge.caller_spiffe_id else "no identity"
        reasons.append(
            f"caller {edge.caller_service} ({who}) is not in {edge.callee_service}'s allow-list"
        )
    return reasons
