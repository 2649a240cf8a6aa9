"""X.509 certificates: bytes -> frozen dataclasses. No Django, no ORM.

Accepted certificate input: one or many PEM `CERTIFICATE` blocks (a chain, a bundle), or one
DER certificate. Trust bundles are read by `trust_bundle`.

A private key is refused wherever it appears (PEM block or DER body), before anything else
is parsed: uploading one by mistake must not leave a copy behind.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from trustrank.parsers.spiffe import spiffe_id_parse

# Anything that ends in "PRIVATE KEY": RSA/EC/DSA/ENCRYPTED/OPENSSH/plain PKCS#8.
_PRIVATE_KEY_RE = re.compile(rb"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----")
_BEGIN_RE = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")
_BLOCK_RE = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END ([A-Z0-9 ]+)-----", re.DOTALL)

_EKU_NAMES = {
    ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth",
    ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth",
    ExtendedKeyUsageOID.CODE_SIGNING: "codeSigning",
    ExtendedKeyUsageOID.EMAIL_PROTECTION: "emailProtection",
    ExtendedKeyUsageOID.TIME_STAMPING: "timeStamping",
    ExtendedKeyUsageOID.OCSP_SIGNING: "OCSPSigning",
    ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE: "anyExtendedKeyUsage",
}
_KEY_USAGE_FIELDS = (
    ("digital_signature", "digitalSignature"),
    ("content_commitment", "contentCommitment"),
    ("key_encipherment", "keyEncipherment"),
    ("data_encipherment", "dataEncipherment"),
    ("key_agreement", "keyAgreement"),
    ("key_cert_sign", "keyCertSign"),
    ("crl_sign", "cRLSign"),
)


class CertificateParseError(ValueError):
    """The input is not what it claims to be; the message says what and where."""


class PrivateKeyRefused(CertificateParseError):
    """The input contains a private key. It must be refused and never stored."""


@dataclass(frozen=True)
class ParsedCertificate:
    der: bytes
    fingerprint_sha256: str
    subject: str
    issuer: str
    serial: str
    version: int
    not_before: datetime
    not_after: datetime
    key_type: str
    key_size: int | None
    key_curve: str
    signature_algorithm: str
    signature_hash: str | None
    is_ca: bool | None  # None: no basicConstraints extension
    path_length: int | None
    key_usage: tuple[str, ...]
    extended_key_usage: tuple[str, ...]
    san_dns: tuple[str, ...]
    san_ip: tuple[str, ...]
    san_uri: tuple[str, ...]
    spiffe_id: str | None
    trust_domain: str | None
    spiffe_errors: tuple[str, ...]
    subject_key_id: str
    authority_key_id: str
    self_issued: bool  # subject == issuer (a root or a self-signed leaf)

    @property
    def is_leaf(self) -> bool:
        return not self.is_ca

    def to_cryptography(self) -> x509.Certificate:
        return x509.load_der_x509_certificate(self.der)


def _hex(data: bytes) -> str:
    return data.hex(":").upper()


def _key_info(cert: x509.Certificate) -> tuple[str, int | None, str]:
    key = cert.public_key()
    if isinstance(key, rsa.RSAPublicKey):
        return "RSA", key.key_size, ""
    if isinstance(key, ec.EllipticCurvePublicKey):
        return "EC", key.curve.key_size, key.curve.name
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "Ed25519", 256, ""
    if isinstance(key, ed448.Ed448PublicKey):
        return "Ed448", 456, ""
    if isinstance(key, dsa.DSAPublicKey):
        return "DSA", key.key_size, ""
    return type(key).__name__, None, ""


def _extension(cert: x509.Certificate, kind: type[Any]) -> Any:
    """The value of one extension, None when absent. An extension present twice (RFC 5280
    allows one) or a name form the library cannot read is a ValueError: the certificate is
    refused with that reason instead of failing the upload with an unexpected error."""
    try:
        return cert.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None
    except x509.DuplicateExtension as exc:
        raise ValueError(f"an extension appears twice ({exc.oid.dotted_string})") from exc
    except x509.UnsupportedGeneralNameType as exc:
        raise ValueError(f"an unsupported general name in an extension: {exc}") from exc


def certificate_from_crypto(cert: x509.Certificate) -> ParsedCertificate:
    """Every field TrustRank shows or rules on, read once from a parsed certificate."""
    der = cert.public_bytes(serialization.Encoding.DER)
    key_type, key_size, curve = _key_info(cert)
    try:
        sig_hash = cert.signature_hash_algorithm
    except Exception:  # an unknown or hash-less algorithm (Ed25519 has none)
        sig_hash = None
    basic = _extension(cert, x509.BasicConstraints)
    usage = _extension(cert, x509.KeyUsage)
    key_usage: list[str] = []
    if usage is not None:
        key_usage = [label for attr, label in _KEY_USAGE_FIELDS if getattr(usage, attr)]
        if usage.key_agreement:
            if usage.encipher_only:
                key_usage.append("encipherOnly")
            if usage.decipher_only:
                key_usage.append("decipherOnly")
    eku = _extension(cert, x509.ExtendedKeyUsage)
    ekus = tuple(_EKU_NAMES.get(oid, oid.dotted_string) for oid in eku) if eku else ()
    san = _extension(cert, x509.SubjectAlternativeName)
    dns = tuple(san.get_values_for_type(x509.DNSName)) if san else ()
    ips = tuple(str(ip) for ip in san.get_values_for_type(x509.IPAddress)) if san else ()
    uris = tuple(san.get_values_for_type(x509.UniformResourceIdentifier)) if san else ()
    spiffe_uris = [u for u in uris if u.lower().startswith("spiffe://")]
    spiffe_id: str | None = None
    trust_domain: str | None = None
    errors: list[str] = []
    if len(spiffe_uris) > 1:
        errors.append(
            f"{len(spiffe_uris)} SPIFFE IDs in the URI SANs; an X509-SVID carries exactly one"
        )
    elif spiffe_uris:
        try:
            parsed = spiffe_id_parse(spiffe_uris[0])
        except ValueError as exc:
            errors.append(f"invalid SPIFFE ID: {exc}")
        else:
            spiffe_id, trust_domain = str(parsed), parsed.trust_domain
            if not parsed.path and not (basic and basic.ca):
                # A path-less ID names the trust domain itself; only a CA may carry it.
                errors.append(f"{spiffe_id} has no path: a workload SVID needs one")
                spiffe_id = None
    ski = _extension(cert, x509.SubjectKeyIdentifier)
    aki = _extension(cert, x509.AuthorityKeyIdentifier)
    return ParsedCertificate(
        der=der,
        fingerprint_sha256=hashlib.sha256(der).hexdigest(),
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        serial=format(cert.serial_number, "x"),
        version=cert.version.value + 1,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        key_type=key_type,
        key_size=key_size,
        key_curve=curve,
        signature_algorithm=cert.signature_algorithm_oid._name,
        signature_hash=sig_hash.name if isinstance(sig_hash, hashes.HashAlgorithm) else None,
        is_ca=None if basic is None else bool(basic.ca),
        path_length=None if basic is None else basic.path_length,
        key_usage=tuple(key_usage),
        extended_key_usage=ekus,
        san_dns=dns,
        san_ip=ips,
        san_uri=uris,
        spiffe_id=spiffe_id,
        trust_domain=trust_domain,
        spiffe_errors=tuple(errors),
        subject_key_id=_hex(ski.digest) if ski is not None else "",
        authority_key_id=_hex(aki.key_identifier) if aki is not None and aki.key_identifier else "",
        self_issued=cert.subject == cert.issuer,
    )


# Fields whose length is bounded where certificates are stored; anything longer is refused
# here so that a receiver refuses it too, instead of a worker failing after the 202.
_MAX_LENGTHS = {
    "key_curve": 40,
    "signature_algorithm": 80,
    "subject_key_id": 200,
    "authority_key_id": 200,
    "key_type": 16,
}
_MAX_PATH_LENGTH = 2**31 - 1


def _storable_check(cert: ParsedCertificate, *, where: str) -> None:
    """Refuse what cannot be stored: a NUL character in a name (PostgreSQL text holds none;
    it is also the mark of a null-prefix spoofing certificate), identifiers longer than their
    columns, a path length beyond a 32-bit integer."""
    texts: dict[str, tuple[str, ...]] = {
        "subject": (cert.subject,),
        "issuer": (cert.issuer,),
        "DNS subject alternative name": cert.san_dns,
        "URI subject alternative name": cert.san_uri,
        "IP subject alternative name": cert.san_ip,
    }
    for name, values in texts.items():
        if any("\x00" in value for value in values):
            raise CertificateParseError(f"{where}: the {name} contains a NUL character")
    for name, limit in _MAX_LENGTHS.items():
        if len(getattr(cert, name)) > limit:
            raise CertificateParseError(
                f"{where}: {name.replace('_', ' ')} is longer than {limit} characters"
            )
    if cert.path_length is not None and cert.path_length > _MAX_PATH_LENGTH:
        raise CertificateParseError(f"{where}: the path length constraint is out of range")


def certificate_from_der(der: bytes, *, where: str) -> ParsedCertificate:
    try:
        cert = x509.load_der_x509_certificate(der)
        parsed = certificate_from_crypto(cert)
    except ValueError as exc:
        raise CertificateParseError(f"{where} is not a valid X.509 certificate: {exc}") from exc
    _storable_check(parsed, where=where)
    return parsed


def private_key_check(data: bytes) -> None:
    """Raise PrivateKeyRefused when `data` holds a private key, PEM or DER.

    Cheap enough for a receiver to call before it stores anything.
    """
    match = _PRIVATE_KEY_RE.search(data)
    if match:
        label = match.group(1).decode()
        raise PrivateKeyRefused(
            f"the upload contains a private key (PEM block '{label}'). Private keys are never "
            "accepted or stored; upload only the certificate(s)."
        )
    if data.lstrip()[:1] == b"-" or data[:1] != b"\x30":
        return  # PEM without a key, or not DER at all
    try:
        serialization.load_der_private_key(data, password=None)
    except TypeError:
        pass  # an encrypted DER key: it exists, its password is missing
    except Exception:  # not a key: the certificate parser gives the real error
        return
    raise PrivateKeyRefused(
        "the upload is a DER-encoded private key. Private keys are never accepted or stored; "
        "upload only the certificate(s)."
    )


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def certificates_count(data: bytes) -> int:
    """How many certificates an upload holds, from its PEM markers alone (1 for DER): lets a
    receiver decide, without parsing, whether the upload is too big to parse in the request.
    Refuses a private key, like the full parse."""
    private_key_check(data)
    if b"-----BEGIN" not in data:
        return 1
    return data.count(b"-----BEGIN")


def certificates_parse(data: bytes) -> list[ParsedCertificate]:
    """Every certificate in a PEM text (in order, duplicates dropped) or one DER certificate.

    Raises PrivateKeyRefused or CertificateParseError; on error nothing is returned, so a
    caller never stores part of a bad upload.
    """
    private_key_check(data)
    if not data.strip():
        raise CertificateParseError("the upload is empty: expected PEM or DER certificate(s)")
    if b"-----BEGIN" not in data:
        if data[:1] != b"\x30":
            raise CertificateParseError(
                "the upload is neither PEM (no '-----BEGIN CERTIFICATE-----' line) nor a DER "
                "certificate"
            )
        return [certificate_from_der(data, where="the DER body")]
    blocks = list(_BLOCK_RE.finditer(data))
    begins = list(_BEGIN_RE.finditer(data))
    if len(begins) != len(blocks):
        # The first BEGIN not covered by a complete block is the truncated one.
        covered = {m.start() for m in blocks}
        start = next(m for m in begins if m.start() not in covered)
        line = _line_of(data, start.start())
        raise CertificateParseError(
            f"PEM block '{start.group(1).decode()}' starting on line {line} has no matching "
            "END line: the file looks truncated"
        )
    certs: list[ParsedCertificate] = []
    seen: set[bytes] = set()
    # Line numbers are counted from the previous block on, never from the start of the
    # data: counting from the start made a bundle quadratic (20,000 blocks took 96 s).
    line, counted_to = 1, 0
    for index, match in enumerate(blocks, start=1):
        label, body, end_label = match.group(1), match.group(2), match.group(3)
        line += data.count(b"\n", counted_to, match.start())
        counted_to = match.start()
        where = f"PEM block {index} (line {line})"
        if label != end_label:
            raise CertificateParseError(
                f"{where} begins as '{label.decode()}' but ends as '{end_label.decode()}'"
            )
        if label != b"CERTIFICATE":
            raise CertificateParseError(
                f"{where} is a '{label.decode()}', not a CERTIFICATE; upload certificates only"
            )
        try:
            der = base64.b64decode(b"".join(body.split()), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CertificateParseError(f"{where} is not valid base64: {exc}") from exc
        # A repeated certificate is dropped before the (costly) parse of its fields.
        digest = hashlib.sha256(der).digest()
        if digest in seen:
            continue
        seen.add(digest)
        certs.append(certificate_from_der(der, where=where))
    return certs
