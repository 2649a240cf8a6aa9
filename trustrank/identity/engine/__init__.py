"""Identity rules as pure functions: chain verification, strength, service mapping, call-edge
strength, caller policy and the findings they imply. No Django, no ORM: the services feed
plain data in and store what comes out; the graph engine calls `edge_identity_strength`.

Identity strength (0-100) of one certificate, with the default `StrengthRules`:

====================================================================  =====
chain to the environment's trust bundle is valid, SPIFFE ID in a
trust domain the bundle is known to serve                               100
valid chain, no SPIFFE ID                                                70
valid chain, SPIFFE ID in a trust domain no bundle names                 30
self-signed, or issuer unknown (not in the bundle; or no bundle yet)     30
expired, not yet valid, or invalid chain (bad signature, CA flag,
path length, forbidden algorithm, SVID rules)                             0
====================================================================  =====

Then weaknesses lower it: an RSA or DSA key under 2048 bits or an EC key under 256 bits
subtracts `weak_key_penalty` (40); a SHA-1 or MD5 signature subtracts
`weak_signature_penalty` (40). The result is clamped to 0-100. Every value is a setting
(`TRUSTRANK_IDENTITY_STRENGTH`), see docs/identity.md.

A certificate that claims a SPIFFE ID but does not chain to the bundle is rated on its own
evidence (30 or 0) and is never counted for the identity it claims: an identity's strength
is the best strength among its certificates whose chain is valid now.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from trustrank.identity.engine.expiry import (
    ExpiryRules,
    expiry_warning,
    rotation_observed,
    superseded_by,
    time_left,
)
from trustrank.parsers.x509 import ParsedCertificate, certificate_from_crypto, spiffe_id_parse

# --- Chain verification ---------------------------------------------------------------------


class ChainStatus:
    VALID = "valid"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    INVALID = "invalid"
    UNTRUSTED = "untrusted"  # unknown issuer, or no bundle for the environment
    SELF_SIGNED = "self_signed"

    CHOICES = (
        (VALID, "Valid"),
        (EXPIRED, "Expired"),
        (NOT_YET_VALID, "Not yet valid"),
        (INVALID, "Invalid chain"),
        (UNTRUSTED, "Unknown issuer"),
        (SELF_SIGNED, "Self-signed"),
    )


@dataclass(frozen=True)
class PathEntry:
    subject: str
    fingerprint_sha256: str
    role: str  # leaf, intermediate, anchor


@dataclass(frozen=True)
class VerificationResult:
    status: str
    reason: str
    path: tuple[PathEntry, ...]
    verified_at: datetime

    @property
    def is_valid(self) -> bool:
        return self.status == ChainStatus.VALID


def _spiffe_uris(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [
        u for u in san.get_values_for_type(x509.UniformResourceIdentifier)
        if u.lower().startswith("spiffe://")
    ]


def _ee_basic_constraints(policy: Any, cert: x509.Certificate, ext: Any) -> None:
    if ext is not None and ext.ca:
        raise ValueError("the leaf certificate asserts cA=TRUE (a CA cannot be an identity)")


def _ee_key_usage(policy: Any, cert: x509.Certificate, ext: Any) -> None:
    # X509-SVID §4.3: a leaf SVID must have digitalSignature and must not sign certs or CRLs.
    if not _spiffe_uris(cert) or ext is None:
        return
    if ext.key_cert_sign or ext.crl_sign:
        raise ValueError("an X509-SVID leaf must not have keyCertSign or cRLSign key usage")
    if not ext.digital_signature:
        raise ValueError("an X509-SVID leaf must have the digitalSignature key usage")


def _ca_basic_constraints(policy: Any, cert: x509.Certificate, ext: Any) -> None:
    if not ext.ca:
        raise ValueError("an issuing certificate must assert basicConstraints cA=TRUE")


def _ca_key_usage(policy: Any, cert: x509.Certificate, ext: Any) -> None:
    if ext is not None and not ext.key_cert_sign:
        raise ValueError("an issuing certificate must have the keyCertSign key usage")


def _ca_extension_policy() -> ExtensionPolicy:
    return (
        ExtensionPolicy.permit_all()
        .require_present(x509.BasicConstraints, Criticality.AGNOSTIC, _ca_basic_constraints)
        .may_be_present(x509.KeyUsage, Criticality.AGNOSTIC, _ca_key_usage)
    )


def _ee_extension_policy(*, allow_ca: bool) -> ExtensionPolicy:
    # Internal mTLS PKIs rarely follow the Web PKI profile (SAN, AKI, EKU are often missing),
    # so the leaf policy only enforces what an identity needs; signatures, validity,
    # cA flags, key usage of issuers and path length are still checked by the library.
    policy = ExtensionPolicy.permit_all()
    if not allow_ca:
        policy = policy.may_be_present(
            x509.BasicConstraints, Criticality.AGNOSTIC, _ee_basic_constraints
        )
    return policy.may_be_present(x509.KeyUsage, Criticality.AGNOSTIC, _ee_key_usage)


_ENCOUNTERED_RE = re.compile(
    r"\s*\(encountered processing <Certificate\(subject=<Name\((?P<subject>.*?)\)>, \.\.\.\)>\)"
)


def _reason_from_error(exc: Exception) -> tuple[str, str]:
    """(status, human reason) from a cryptography VerificationError message."""
    message = str(exc)
    message = message.removeprefix("validation failed: ")
    message = _ENCOUNTERED_RE.sub(lambda m: f" (certificate {m.group('subject')})", message)
    message = message.replace("Python extension validator failed: ValueError: ", "")
    if "all candidates exhausted with no interior errors" in message:
        return (
            ChainStatus.UNTRUSTED,
            "unknown issuer: no issuing certificate in the environment's trust bundle or "
            "in the uploaded chain",
        )
    if "Forbidden signature algorithm" in message:
        weak = "SHA-1" if "Sha1" in message else ("MD5" if "Md5" in message else "")
        algo = f" ({weak})" if weak else ""
        return ChainStatus.INVALID, f"a signature in the chain uses a forbidden algorithm{algo}"
    if "Forbidden public key algorithm" in message or "key too small" in message.lower():
        return ChainStatus.INVALID, f"an issuing key is forbidden or too weak: {message}"
    if "not valid at validation time" in message:
        return ChainStatus.INVALID, f"a certificate in the chain is outside its validity: {message}"
    return ChainStatus.INVALID, message


def _best_effort_path(
    leaf: ParsedCertificate,
    intermediates: Sequence[ParsedCertificate],
    anchors: Sequence[ParsedCertificate],
) -> tuple[PathEntry, ...]:
    """The chain as names suggest it, for display when verification fails."""
    path = [PathEntry(leaf.subject, leaf.fingerprint_sha256, "leaf")]
    current, used = leaf, {leaf.fingerprint_sha256}
    for _ in range(8):
        if current.self_issued:
            break
        anchor = next((a for a in anchors if a.subject == current.issuer), None)
        if anchor is not None:
            path.append(PathEntry(anchor.subject, anchor.fingerprint_sha256, "anchor"))
            break
        parent = next(
            (
                c for c in intermediates
                if c.subject == current.issuer and c.fingerprint_sha256 not in used
            ),
            None,
        )
        if parent is None:
            break
        used.add(parent.fingerprint_sha256)
        path.append(PathEntry(parent.subject, parent.fingerprint_sha256, "intermediate"))
        current = parent
    return tuple(path)


def _self_signed(cert: ParsedCertificate) -> bool:
    if not cert.self_issued:
        return False
    crypto = cert.to_cryptography()
    try:
        crypto.verify_directly_issued_by(crypto)
    except Exception:  # wrong signature, or an algorithm the library cannot check
        return False
    return True


def chain_verify(
    *,
    leaf: ParsedCertificate,
    intermediates: Sequence[ParsedCertificate],
    anchors: Sequence[ParsedCertificate],
    at: datetime,
) -> VerificationResult:
    """Verify `leaf` to `anchors` at time `at` with cryptography's path validation.

    The library builds the path (untrusted `intermediates` may come in any order) and checks
    each signature, validity window, cA flag, keyCertSign and pathLenConstraint; the leaf
    policy adds the X509-SVID rules. `intermediates` never become trust anchors.
    """
    if at < leaf.not_before:
        return VerificationResult(
            ChainStatus.NOT_YET_VALID,
            f"not valid before {leaf.not_before.isoformat()}",
            _best_effort_path(leaf, intermediates, anchors),
            at,
        )
    if at > leaf.not_after:
        return VerificationResult(
            ChainStatus.EXPIRED,
            f"expired on {leaf.not_after.isoformat()}",
            _best_effort_path(leaf, intermediates, anchors),
            at,
        )
    anchor_prints = {a.fingerprint_sha256 for a in anchors}
    self_signed = _self_signed(leaf)
    if not anchors:
        status = ChainStatus.SELF_SIGNED if self_signed else ChainStatus.UNTRUSTED
        return VerificationResult(
            status,
            "no trust bundle has been uploaded for this environment"
            + ("; the certificate is self-signed" if self_signed else ""),
            _best_effort_path(leaf, intermediates, anchors),
            at,
        )
    if self_signed and leaf.fingerprint_sha256 not in anchor_prints:
        return VerificationResult(
            ChainStatus.SELF_SIGNED,
            "self-signed and not in the environment's trust bundle",
            (PathEntry(leaf.subject, leaf.fingerprint_sha256, "leaf"),),
            at,
        )
    builder = (
        PolicyBuilder()
        .store(Store([a.to_cryptography() for a in anchors]))
        .time(at)
        .extension_policies(
            ca_policy=_ca_extension_policy(),
            ee_policy=_ee_extension_policy(allow_ca=bool(leaf.is_ca)),
        )
    )
    try:
        verified = builder.build_client_verifier().verify(
            leaf.to_cryptography(), [c.to_cryptography() for c in intermediates]
        )
    except VerificationError as exc:
        status, reason = _reason_from_error(exc)
        if status == ChainStatus.UNTRUSTED and self_signed:
            status = ChainStatus.SELF_SIGNED
        return VerificationResult(
            status, reason, _best_effort_path(leaf, intermediates, anchors), at
        )
    path: list[PathEntry] = []
    chain = verified.chain
    for index, cert in enumerate(chain):
        parsed = certificate_from_crypto(cert)
        if index == 0:
            role = "leaf"
        elif index == len(chain) - 1:
            role = "anchor"
        else:
            role = "intermediate"
        path.append(PathEntry(parsed.subject, parsed.fingerprint_sha256, role))
    return VerificationResult(ChainStatus.VALID, "", tuple(path), at)


# --- Strength -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StrengthRules:
    """Points for each kind of evidence; `TRUSTRANK_IDENTITY_STRENGTH` overrides any field."""

    valid_spiffe: int = 100
    valid_no_spiffe: int = 70
    valid_foreign_trust_domain: int = 30
    untrusted: int = 30
    self_signed: int = 30
    invalid: int = 0
    expired: int = 0
    not_yet_valid: int = 0
    weak_key_penalty: int = 40
    weak_signature_penalty: int = 40
    min_rsa_bits: int = 2048
    min_dsa_bits: int = 2048
    min_ec_bits: int = 256
    weak_hashes: tuple[str, ...] = ("md5", "sha1")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> StrengthRules:
        if not values:
            return cls()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown identity strength setting(s): {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        clean = dict(values)
        if "weak_hashes" in clean:
            clean["weak_hashes"] = tuple(str(h).lower() for h in clean["weak_hashes"])
        return replace(cls(), **clean)


@dataclass(frozen=True)
class Weakness:
    kind: str  # weak_key or weak_signature
    detail: str


def certificate_weaknesses(cert: ParsedCertificate, rules: StrengthRules) -> tuple[Weakness, ...]:
    found: list[Weakness] = []
    size = cert.key_size or 0
    minimum = {"RSA": rules.min_rsa_bits, "DSA": rules.min_dsa_bits, "EC": rules.min_ec_bits}
    if cert.key_type in minimum and size < minimum[cert.key_type]:
        found.append(
            Weakness(
                "weak_key",
                f"{cert.key_type} key of {size} bits (minimum {minimum[cert.key_type]})",
            )
        )
    if cert.signature_hash and cert.signature_hash.lower() in rules.weak_hashes:
        found.append(
            Weakness(
                "weak_signature",
                f"signed with {cert.signature_algorithm} ({cert.signature_hash.upper()})",
            )
        )
    return tuple(found)


@dataclass(frozen=True)
class Strength:
    value: int
    explanation: str


def certificate_strength(
    *,
    status: str,
    spiffe_id: str | None,
    trust_domain_known: bool,
    weaknesses: Iterable[Weakness],
    rules: StrengthRules,
) -> Strength:
    """The strength of one certificate's evidence, with the reason in words."""
    if status == ChainStatus.VALID:
        if spiffe_id and trust_domain_known:
            base, why = rules.valid_spiffe, "valid chain, SPIFFE ID in a known trust domain"
        elif spiffe_id:
            base, why = (
                rules.valid_foreign_trust_domain,
                "valid chain, but the SPIFFE ID's trust domain is not named by any bundle",
            )
        else:
            base, why = rules.valid_no_spiffe, "valid chain, no SPIFFE ID"
    else:
        base = {
            ChainStatus.UNTRUSTED: rules.untrusted,
            ChainStatus.SELF_SIGNED: rules.self_signed,
            ChainStatus.EXPIRED: rules.expired,
            ChainStatus.NOT_YET_VALID: rules.not_yet_valid,
        }.get(status, rules.invalid)
        why = dict(ChainStatus.CHOICES).get(status, status).lower()
    value = base
    parts = [f"{why}: {base}"]
    for weakness in weaknesses:
        penalty = (
            rules.weak_key_penalty if weakness.kind == "weak_key" else rules.weak_signature_penalty
        )
        value -= penalty
        parts.append(f"{weakness.detail}: -{penalty}")
    value = max(0, min(100, value))
    return Strength(value=value, explanation="; ".join(parts))


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


# --- Findings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FindingSpec:
    kind: str
    key: str  # unique within (team, environment, kind)
    severity: str  # low, medium, high, critical
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CertificateFacts:
    fingerprint_sha256: str
    subject: str
    spiffe_id: str | None
    role: str  # leaf or ca
    not_after: datetime
    chain_status: str
    chain_reason: str
    weaknesses: tuple[Weakness, ...]
    not_before: datetime | None = None
    # The (not_before, not_after) of every certificate of the same identity in the
    # environment, this one included (`rotation_observed` reads the cadence from them).
    history: tuple[tuple[datetime, datetime], ...] = ()


def certificate_findings(
    cert: CertificateFacts, *, now: datetime, expiry_window: timedelta,
    expiry: ExpiryRules | None = None,
) -> list[FindingSpec]:
    """What is wrong with one certificate, as findings keyed by its fingerprint."""
    label = cert.spiffe_id or cert.subject or cert.fingerprint_sha256[:16]
    base = {
        "fingerprint_sha256": cert.fingerprint_sha256,
        "subject": cert.subject,
        "spiffe_id": cert.spiffe_id,
        "not_after": cert.not_after.isoformat(),
        "chain_status": cert.chain_status,
    }
    specs: list[FindingSpec] = []
    rules = expiry or ExpiryRules()
    # Earlier certificates only: the cadence up to this one.
    earlier = tuple(v for v in cert.history
                    if cert.not_before is None or v[0] <= cert.not_before)
    rotation = rotation_observed(earlier, min_rotations=rules.min_rotations)
    if superseded_by(cert.not_before, cert.not_after, cert.history) is not None:
        # Replaced before it expired: its expiry is the rotation working, not a problem.
        pass
    elif cert.not_after <= now:
        specs.append(
            FindingSpec(
                "expired", cert.fingerprint_sha256, "high",
                f"Certificate for {label} expired on {cert.not_after:%Y-%m-%d}", base,
            )
        )
    else:
        warn = expiry_warning(not_before=cert.not_before, not_after=cert.not_after, now=now,
                              window=expiry_window, rules=rules, rotation=rotation)
        if warn is not None:
            days = (cert.not_after - now).days
            severity = "high" if days <= 7 or warn["rotation_missed"] else "medium"
            specs.append(
                FindingSpec(
                    "expiring", cert.fingerprint_sha256, severity,
                    f"Certificate for {label} expires in {time_left(cert.not_after - now)} "
                    f"({cert.not_after:%Y-%m-%d}); {warn['explanation']}",
                    {**base, "days_left": days, "window_days": expiry_window.days,
                     **{k: v for k, v in warn.items() if k != "explanation"},
                     "explanation": warn["explanation"]},
                )
            )
    for weakness in cert.weaknesses:
        specs.append(
            FindingSpec(
                weakness.kind, cert.fingerprint_sha256, "medium",
                f"Weak {'key' if weakness.kind == 'weak_key' else 'signature'} on {label}: "
                f"{weakness.detail}",
                {**base, "detail": weakness.detail},
            )
        )
    if cert.chain_status in (ChainStatus.INVALID, ChainStatus.UNTRUSTED, ChainStatus.SELF_SIGNED):
        severity = "high" if cert.spiffe_id else "medium"
        claim = " claims a SPIFFE ID but" if cert.spiffe_id else ""
        specs.append(
            FindingSpec(
                "chain_invalid", cert.fingerprint_sha256, severity,
                f"Certificate for {label}{claim} does not chain to the trust bundle: "
                f"{cert.chain_reason}",
                {**base, "reason": cert.chain_reason},
            )
        )
    return specs


@dataclass(frozen=True)
class AnchorFacts:
    fingerprint_sha256: str
    subject: str
    not_after: datetime


def anchor_findings(
    anchor: AnchorFacts, *, environment: str, now: datetime, expiry_window: timedelta
) -> list[FindingSpec]:
    """A trust-bundle anchor past (or near) its end: every chain through it stops verifying
    then, so each identity it vouches for falls to 0 at once. Keyed by its fingerprint."""
    label = anchor.subject or anchor.fingerprint_sha256[:16]
    evidence = {
        "fingerprint_sha256": anchor.fingerprint_sha256,
        "subject": anchor.subject,
        "not_after": anchor.not_after.isoformat(),
        "environment": environment,
    }
    if anchor.not_after <= now:
        return [
            FindingSpec(
                "anchor_expired", anchor.fingerprint_sha256, "high",
                f"Trust anchor {label} of the {environment} bundle expired on "
                f"{anchor.not_after:%Y-%m-%d}: certificates chaining to it no longer verify",
                evidence,
            )
        ]
    if anchor.not_after <= now + expiry_window:
        days = (anchor.not_after - now).days
        return [
            FindingSpec(
                "anchor_expiring", anchor.fingerprint_sha256, "high" if days <= 7 else "medium",
                f"Trust anchor {label} of the {environment} bundle expires in {days} "
                f"day{'' if days == 1 else 's'} ({anchor.not_after:%Y-%m-%d})",
                {**evidence, "days_left": days, "window_days": expiry_window.days},
            )
        ]
    return []


def trust_bundle_warnings(*, trust_domains: Sequence[str], rules: StrengthRules) -> list[str]:
    """What an uploader should hear about a bundle that parsed: one naming no trust domain
    (a PEM bundle uploaded without `trust_domain`, whose anchors carry no spiffe:// URI SAN)
    makes every SPIFFE certificate in the environment count as a foreign trust domain."""
    if trust_domains:
        return []
    return [
        "This bundle names no trust domain (no trust_domain was given and no anchor carries a "
        "spiffe:// URI SAN), so every certificate with a SPIFFE ID in this environment counts "
        f"as from a foreign trust domain: strength {rules.valid_foreign_trust_domain} instead "
        f"of {rules.valid_spiffe} even when its chain is valid. Upload the bundle again with "
        "trust_domain=<your trust domain> (e.g. example.org)."
    ]


@dataclass(frozen=True)
class IdentityCertificate:
    """What the strength reason needs of one certificate claiming the identity."""

    chain_status: str
    chain_reason: str
    strength: int
    strength_explanation: str
    not_after: datetime


_STATUS_WORDS = {
    ChainStatus.UNTRUSTED: "issuer unknown to the bundle",
    ChainStatus.SELF_SIGNED: "self-signed",
    ChainStatus.EXPIRED: "expired",
    ChainStatus.NOT_YET_VALID: "not yet valid",
    ChainStatus.INVALID: "chain invalid",
}


def identity_strength_reason(
    *,
    strength: int,
    best: IdentityCertificate | None,
    certificates: Sequence[IdentityCertificate],
    trust_domain: str,
    trust_domain_known: bool,
    bundle_exists: bool,
    bundle_domains: Sequence[str],
    now: datetime,
) -> str:
    """Why an identity has its strength, in words: which certificate it takes it from, or
    why none counts (an identity takes only the strength of a certificate whose chain to the
    environment's bundle is valid now; a certificate that does not verify keeps its own
    strength but never lends it to the SPIFFE ID it claims)."""
    if best is not None:
        why = f"{strength}: from its best certificate valid now ({best.strength_explanation})"
        if not trust_domain_known:
            if not bundle_domains:
                why += (
                    "; the environment's trust bundle names no trust domain (uploaded without "
                    f"trust_domain), so {trust_domain} counts as foreign"
                )
            else:
                why += (
                    f"; the trust bundle names {', '.join(sorted(bundle_domains))}, "
                    f"not {trust_domain}"
                )
        return why
    count = len(certificates)
    if not bundle_exists:
        head = (
            f"0: the environment has no trust bundle, so none of its {count} "
            f"certificate{'' if count == 1 else 's'} can verify"
        )
    else:
        head = (
            f"0: none of its {count} certificate{'' if count == 1 else 's'} chains to the "
            "environment's trust bundle now"
        )
    parts = []
    for cert in certificates:
        status = cert.chain_status
        if status == ChainStatus.VALID and cert.not_after <= now:
            status = ChainStatus.EXPIRED
        if cert.chain_reason and status == cert.chain_status:
            words = cert.chain_reason
        else:
            words = _STATUS_WORDS.get(status, status)
        parts.append(f"{words} (certificate strength {cert.strength})")
    lent = [c.strength for c in certificates if c.strength > 0]
    tail = (
        "; a certificate that does not verify keeps its own strength but never lends it "
        "to the identity it claims"
        if lent
        else ""
    )
    return f"{head}: {'; '.join(parts)}{tail}" if parts else head


def unmapped_identity_finding(*, spiffe_id: str) -> FindingSpec:
    return FindingSpec(
        "unmapped", spiffe_id, "low",
        f"Identity {spiffe_id} is not mapped to any service",
        {"spiffe_id": spiffe_id},
    )


def policy_finding(edge: ObservedEdge, reasons: list[str]) -> FindingSpec:
    key = (
        f"{edge.caller_namespace}/{edge.caller_service}->{edge.callee_namespace}/"
        f"{edge.callee_service}|{edge.caller_spiffe_id or '-'}|{'mtls' if edge.mtls else 'plain'}"
    )
    return FindingSpec(
        "policy_violation", key, "high",
        f"Call {edge.caller_service} -> {edge.callee_service} violates the callee's policy",
        {
            "caller_service": edge.caller_service,
            "callee_service": edge.callee_service,
            "caller_namespace": edge.caller_namespace,
            "callee_namespace": edge.callee_namespace,
            "caller_spiffe_id": edge.caller_spiffe_id,
            "mtls": edge.mtls,
            "reasons": reasons,
        },
    )
