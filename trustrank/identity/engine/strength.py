"""Identity strength (0-100): of one certificate from its chain status and weaknesses, and of
an identity (in words) from the certificates that claim it; the table is in the package
docstring."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from trustrank.identity.engine.chain import ChainStatus
from trustrank.parsers.x509 import ParsedCertificate


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
