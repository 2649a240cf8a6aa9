"""Trust bundles: PEM CA certificates, or a SPIFFE bundle (a JWKS whose `x509-svid` keys
carry the CA certificate in `x5c`) -> `ParsedBundle`. A private key is refused first, as
`x509` does for certificates."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import orjson

from trustrank.parsers.spiffe import spiffe_id_parse
from trustrank.parsers.x509 import (
    CertificateParseError,
    ParsedCertificate,
    certificate_from_der,
    certificates_parse,
    private_key_check,
)


@dataclass(frozen=True)
class ParsedBundle:
    format: str  # "pem" or "spiffe"
    anchors: tuple[ParsedCertificate, ...]
    trust_domains: tuple[str, ...]
    refresh_hint: int | None
    sequence: int | None
    jwt_key_count: int


def trust_bundle_parse(data: bytes, *, trust_domain: str = "") -> ParsedBundle:
    """A PEM bundle of CA certificates, or a SPIFFE bundle (JWKS with x509-svid keys).

    Trust domains: the one named by the caller (a SPIFFE bundle does not name its own) plus
    any path-less SPIFFE ID in an anchor's URI SAN (SPIRE puts `spiffe://<td>` in its CAs).
    """
    private_key_check(data)
    domains: list[str] = []
    if trust_domain:
        try:
            parsed = spiffe_id_parse(f"spiffe://{trust_domain}")
        except ValueError as exc:
            raise CertificateParseError(f"trust_domain: {exc}") from exc
        domains.append(parsed.trust_domain)
    stripped = data.lstrip()
    refresh_hint: int | None = None
    sequence: int | None = None
    jwt_keys = 0
    if stripped[:1] == b"{":
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CertificateParseError(f"the SPIFFE bundle is not valid JSON: {exc}") from exc
        keys = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(keys, list):
            raise CertificateParseError(
                "the SPIFFE bundle has no 'keys' array (a JWKS document is expected)"
            )
        anchors: list[ParsedCertificate] = []
        for index, key in enumerate(keys):
            if not isinstance(key, dict):
                raise CertificateParseError(f"keys[{index}] is not a JSON object")
            use = key.get("use")
            if use == "jwt-svid":
                jwt_keys += 1
                continue
            if use != "x509-svid":
                continue  # the spec says to ignore keys of unknown use
            x5c = key.get("x5c")
            if not isinstance(x5c, list) or len(x5c) != 1 or not isinstance(x5c[0], str):
                raise CertificateParseError(
                    f"keys[{index}] (x509-svid) must carry exactly one certificate in 'x5c'"
                )
            try:
                der = base64.b64decode(x5c[0], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise CertificateParseError(f"keys[{index}].x5c[0] is not base64: {exc}") from exc
            anchors.append(certificate_from_der(der, where=f"keys[{index}].x5c[0]"))
        if not anchors:
            raise CertificateParseError(
                "the SPIFFE bundle has no x509-svid key: nothing to verify X.509 SVIDs with"
            )
        hint, seq = doc.get("spiffe_refresh_hint"), doc.get("spiffe_sequence")
        refresh_hint = hint if isinstance(hint, int) else None
        sequence = seq if isinstance(seq, int) else None
        bundle_format = "spiffe"
    else:
        anchors = certificates_parse(data)
        bundle_format = "pem"
    unique: dict[str, ParsedCertificate] = {a.fingerprint_sha256: a for a in anchors}
    for anchor in unique.values():
        for uri in anchor.san_uri:
            try:
                sid = spiffe_id_parse(uri)
            except ValueError:
                continue
            if not sid.path and sid.trust_domain not in domains:
                domains.append(sid.trust_domain)
    return ParsedBundle(
        format=bundle_format,
        anchors=tuple(unique.values()),
        trust_domains=tuple(domains),
        refresh_hint=refresh_hint,
        sequence=sequence,
        jwt_key_count=jwt_keys,
    )
