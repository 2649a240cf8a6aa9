"""trustrank.parsers.x509: certificates and trust bundles from bytes; bad input refused."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization

from tests.identity.pki import data, issue, make_pki, rsa_key
from trustrank.parsers.spiffe import spiffe_id_parse
from trustrank.parsers.trust_bundle import trust_bundle_parse
from trustrank.parsers.x509 import CertificateParseError, PrivateKeyRefused, certificates_parse


def test_pem_chain_parses_every_field() -> None:
    pki = make_pki()
    leaf = issue(
        "payments", issuer=pki.intermediate, key=rsa_key(2048),
        uris=("spiffe://prod.example/ns/pay/sa/payments",), dns=("payments.pay.svc",),
    )
    certs = certificates_parse(leaf.pem + pki.intermediate.pem + pki.root.pem)
    assert [c.is_ca for c in certs] == [False, True, True]
    first = certs[0]
    assert first.spiffe_id == "spiffe://prod.example/ns/pay/sa/payments"
    assert first.trust_domain == "prod.example"
    assert first.san_dns == ("payments.pay.svc",)
    assert first.key_type == "RSA" and first.key_size == 2048
    assert first.signature_hash == "sha256"
    assert first.signature_algorithm == "ecdsa-with-SHA256"  # the issuer signs
    assert first.key_usage == ("digitalSignature", "keyEncipherment")
    assert first.extended_key_usage == ("serverAuth", "clientAuth")
    assert first.subject == "CN=payments,O=TrustRank tests"
    assert first.issuer == "CN=Intermediate CA prod.example,O=TrustRank tests"
    assert first.serial == format(leaf.cert.serial_number, "x")
    assert first.not_after == leaf.cert.not_valid_after_utc
    assert len(first.fingerprint_sha256) == 64
    assert certs[2].path_length == 1 and certs[2].self_issued


def test_der_certificate_parses() -> None:
    leaf = make_pki().leaf("/web")
    (cert,) = certificates_parse(leaf.der)
    assert cert.spiffe_id == "spiffe://prod.example/web"


def test_duplicate_blocks_are_dropped() -> None:
    leaf = make_pki().leaf("/web")
    assert len(certificates_parse(leaf.pem + leaf.pem)) == 1


def test_real_badssl_chain_with_many_sans() -> None:
    certs = certificates_parse(data("badssl.com_wildcard-rsa2048.pem"))
    assert len(certs) == 2
    assert "*.badssl.com" in certs[0].san_dns
    assert certs[0].spiffe_id is None


def test_real_spire_certificate_carries_spiffe_id() -> None:
    (cert,) = certificates_parse(data("spire_certs_blog_cert.pem"))
    assert cert.spiffe_id == "spiffe://example.org/blog"
    assert cert.self_issued


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty"),
        (b"hello, I am not a certificate", "neither PEM"),
        (data("go-spiffe_x509bundle_not-pem.pem"), "neither PEM"),
        (data("go-spiffe_x509svid_corrupt-cert.pem"), "not a valid X.509 certificate"),
        (b"\x30\x03\x02\x01\x01", "not a valid X.509 certificate"),
    ],
)
def test_bad_input_is_refused_with_a_reason(body: bytes, message: str) -> None:
    with pytest.raises(CertificateParseError, match=message):
        certificates_parse(body)


def test_truncated_pem_names_the_block_and_line() -> None:
    pem = make_pki().leaf("/web").pem
    truncated = pem[: len(pem) // 2]
    with pytest.raises(CertificateParseError, match=r"line 1 has no matching END line.*truncated"):
        certificates_parse(truncated)


def test_truncated_second_block_is_found() -> None:
    pki = make_pki()
    body = pki.leaf("/web").pem + pki.intermediate.pem[:200]
    with pytest.raises(CertificateParseError, match="truncated"):
        certificates_parse(body)


def test_non_certificate_pem_block_is_refused() -> None:
    key = make_pki().root.key
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(CertificateParseError, match="'PUBLIC KEY', not a CERTIFICATE"):
        certificates_parse(pub)


@pytest.mark.parametrize("fmt", ["pkcs8", "traditional", "encrypted", "der", "der-encrypted"])
def test_private_keys_are_refused(fmt: str) -> None:
    pki = make_pki()
    key = rsa_key(2048)
    encoding = serialization.Encoding.DER if fmt.startswith("der") else serialization.Encoding.PEM
    private_format = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if fmt == "traditional" else serialization.PrivateFormat.PKCS8
    )
    encryption = (
        serialization.BestAvailableEncryption(b"pw")
        if "encrypted" in fmt else serialization.NoEncryption()
    )
    body = key.private_bytes(encoding, private_format, encryption)
    if encoding == serialization.Encoding.PEM:
        body = pki.leaf("/web").pem + body  # a key hidden after a good certificate
    with pytest.raises(PrivateKeyRefused, match="private key"):
        certificates_parse(body)


def test_spiffe_id_rules() -> None:
    assert str(spiffe_id_parse("spiffe://td.example/a/b")) == "spiffe://td.example/a/b"
    for bad in (
        "https://td/x", "spiffe://", "spiffe://TD/x", "spiffe://td/x/", "spiffe://td//x",
        "spiffe://td/./x", "spiffe://td/x?y=1", "spiffe://td:443/x", "spiffe://td/x%20y",
    ):
        with pytest.raises(ValueError):
            spiffe_id_parse(bad)


def test_two_spiffe_ids_make_no_identity() -> None:
    pki = make_pki()
    leaf = issue("x", issuer=pki.intermediate, uris=("spiffe://td/a", "spiffe://td/b"))
    (cert,) = certificates_parse(leaf.pem)
    assert cert.spiffe_id is None
    assert "exactly one" in cert.spiffe_errors[0]


def test_spiffe_bundle_from_go_spiffe() -> None:
    bundle = trust_bundle_parse(data("go-spiffe_spiffebundle_valid_1.json"), trust_domain="local")
    assert bundle.format == "spiffe"
    assert len(bundle.anchors) == 1
    assert bundle.jwt_key_count == 1
    assert bundle.trust_domains == ("local",)


def test_spiffe_bundle_without_keys_is_refused() -> None:
    with pytest.raises(CertificateParseError, match="no 'keys' array"):
        trust_bundle_parse(data("go-spiffe_spiffebundle_no_keys.json"))


def test_spiffe_bundle_x5c_must_be_one_certificate() -> None:
    pki = make_pki()
    x5c = [base64.b64encode(pki.root.der).decode(), base64.b64encode(pki.intermediate.der).decode()]
    body = (
        b'{"keys":[{"use":"x509-svid","kty":"EC","x5c":["' + x5c[0].encode() + b'","'
        + x5c[1].encode() + b'"]}]}'
    )
    with pytest.raises(CertificateParseError, match="exactly one certificate"):
        trust_bundle_parse(body)


def test_pem_bundle_learns_trust_domain_from_ca_uri() -> None:
    pki = make_pki("mesh.example")
    bundle = trust_bundle_parse(pki.root.pem)
    assert bundle.format == "pem"
    assert bundle.trust_domains == ("mesh.example",)


def test_real_spire_root_names_its_trust_domain() -> None:
    bundle = trust_bundle_parse(data("spire_conf_agent_dummy_root_ca.crt"))
    assert bundle.trust_domains == ("local",)


def test_bundle_with_private_key_is_refused() -> None:
    pki = make_pki()
    with pytest.raises(PrivateKeyRefused):
        trust_bundle_parse(pki.root.pem + pki.root.key_pem)
