"""Chain verification: a leaf certificate to the environment's trust anchors at a given time,
with cryptography's path validation plus the X509-SVID leaf rules."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography import x509
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from trustrank.parsers.x509 import ParsedCertificate, certificate_from_crypto


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
