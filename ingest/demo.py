"""The demo's story, generated at load time: one small shop whose telemetry and identities
tell apart what matters from what merely scores high.

- `storefront` (npm) takes the public's requests (root spans from public addresses) and calls
  `checkout`; `checkout` (Python) calls `payment-gateway`; the payment provider also calls
  `payment-gateway` directly (webhooks from a public address). Every call carries mTLS.
- `payment-gateway` (Java) logs through Log4j 2.14.1 on every request: its spans carry the
  Log4j instrumentation scope, which is what makes log4j-core *observed*.
- `etcd` answers only its local agent (root spans from 127.0.0.1): nothing reaches it over
  the network.
- SPIFFE certificates from one demo CA: valid ones for checkout and payment-gateway, an
  expired one for storefront.

Traces are OTLP/JSON exports timed in the last minutes, so the demo looks alive whenever it
starts; the CA and certificates are issued on the first start and kept under var/. Nothing
here is used outside the demo and tests.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ENVIRONMENT = "shop"
TRUST_DOMAIN = "shop.example"
PUBLIC_CLIENT = "93.184.216.34"
PROVIDER_CLIENT = "52.28.96.11"

# (service, project, version, human impact, SBOM file)
SERVICES = (
    ("storefront", "storefront", "1.8.0", "medium", "sbom-storefront.json"),
    ("checkout", "checkout", "1.2.0", "high", "sbom-checkout.json"),
    ("payment-gateway", "payment-gateway", "2.3.1", "very high", "sbom-payment-gateway.json"),
    ("etcd", "etcd", "3.3.10", "high", "sbom-etcd.json"),
)
_VERSIONS = {name: version for name, _p, version, _h, _f in SERVICES}
_SCOPES = {
    "storefront": ("@opentelemetry/instrumentation-express", "0.39.0"),
    "checkout": ("opentelemetry.instrumentation.requests", "0.48b0"),
    "payment-gateway": ("io.opentelemetry.log4j-context-data-2.17", "2.9.0"),
    "etcd": ("go.etcd.io/etcd/server", "3.3.10"),
}
_SERVER, _CLIENT, _INTERNAL = 2, 3, 1

# (service, whether its SVID is valid): the storefront's expired on purpose.
_SVIDS = (("payment-gateway", True), ("checkout", True), ("storefront", False))
_LEAF_LIFETIME = dt.timedelta(days=90)
# Past the identity expiry warning window (30 days by default), so a kept SVID never shows
# as "expiring soon".
_LEAF_RENEW_BEFORE = dt.timedelta(days=45)


def _attr(key: str, value: str | int) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


@dataclass
class _Span:
    service: str
    trace_id: str
    span_id: str
    parent: str
    name: str
    kind: int
    start: int
    end: int
    attributes: list[dict[str, Any]]
    scope: tuple[str, str] | None = None


def _hex(n: int) -> str:
    return os.urandom(n).hex()


def shop_traces(*, now: dt.datetime | None = None, requests: int = 60) -> list[bytes]:
    """One OTLP/JSON export per service, with `requests` customer requests and as many
    provider webhooks and local etcd reads, spread over the last ten minutes."""
    end = int((now or dt.datetime.now(dt.UTC)).timestamp() * 1e9)
    spans: list[_Span] = []
    mtls = [_attr("tls.client.subject", "spiffe"), _attr("tls.established", "true")]
    for i in range(requests):
        t0 = end - (10 * 60 - i * 10) * 1_000_000_000
        trace = _hex(16)
        root, call_ck, ck_server, call_gw, gw_server = (_hex(8) for _ in range(5))
        ms = 1_000_000
        spans += [
            _Span("storefront", trace, root, "", "POST /cart/checkout", _SERVER, t0, t0 + 80 * ms,
                  [_attr("client.address", PUBLIC_CLIENT), _attr("http.route", "/cart/checkout"),
                   _attr("http.response.status_code", 200)], _SCOPES["storefront"]),
            _Span("storefront", trace, call_ck, root, "POST checkout", _CLIENT, t0 + 2 * ms,
                  t0 + 70 * ms, [_attr("peer.service", "checkout"),
                                 _attr("server.address", "checkout"), *mtls]),
            _Span("checkout", trace, ck_server, call_ck, "POST /orders", _SERVER, t0 + 3 * ms,
                  t0 + 68 * ms, [_attr("http.route", "/orders"), *mtls], _SCOPES["checkout"]),
            _Span("checkout", trace, call_gw, ck_server, "POST payment-gateway", _CLIENT,
                  t0 + 5 * ms, t0 + 60 * ms, [_attr("peer.service", "payment-gateway"),
                                              _attr("server.address", "payment-gateway"), *mtls]),
            _Span("payment-gateway", trace, gw_server, call_gw, "POST /charge", _SERVER,
                  t0 + 6 * ms, t0 + 58 * ms, [_attr("http.route", "/charge"), *mtls]),
            # Log4j on the request path: the log call of every charge is a span of its own.
            _Span("payment-gateway", trace, _hex(8), gw_server, "log charge", _INTERNAL,
                  t0 + 7 * ms, t0 + 8 * ms,
                  [_attr("code.namespace", "org.apache.logging.log4j.core.Logger")],
                  _SCOPES["payment-gateway"]),
        ]
        hook_trace, hook_root = _hex(16), _hex(8)
        t1 = t0 + 5_000 * ms
        spans += [
            _Span("payment-gateway", hook_trace, hook_root, "", "POST /webhooks/provider",
                  _SERVER, t1, t1 + 30 * ms,
                  [_attr("client.address", PROVIDER_CLIENT),
                   _attr("http.route", "/webhooks/provider")]),
            _Span("payment-gateway", hook_trace, _hex(8), hook_root, "log webhook", _INTERNAL,
                  t1 + ms, t1 + 2 * ms,
                  [_attr("code.namespace", "org.apache.logging.log4j.core.Logger")],
                  _SCOPES["payment-gateway"]),
            _Span("etcd", _hex(16), _hex(8), "", "etcdserverpb.KV/Range", _SERVER, t1 + 50 * ms,
                  t1 + 52 * ms, [_attr("client.address", "127.0.0.1"),
                                 _attr("rpc.system", "grpc")], _SCOPES["etcd"]),
        ]
    exports = []
    for service, *_rest in SERVICES:
        mine = [s for s in spans if s.service == service]
        by_scope: dict[tuple[str, str] | None, list[_Span]] = {}
        for s in mine:
            by_scope.setdefault(s.scope, []).append(s)
        exports.append(orjson.dumps({
            "resourceSpans": [{
                "resource": {"attributes": [
                    _attr("service.name", service),
                    _attr("service.version", _VERSIONS[service]),
                    _attr("deployment.environment.name", ENVIRONMENT),
                ]},
                "scopeSpans": [
                    {
                        "scope": {"name": scope[0], "version": scope[1]} if scope else {},
                        "spans": [
                            {
                                "traceId": s.trace_id, "spanId": s.span_id,
                                "parentSpanId": s.parent, "name": s.name, "kind": s.kind,
                                "startTimeUnixNano": str(s.start),
                                "endTimeUnixNano": str(s.end),
                                "attributes": s.attributes,
                            }
                            for s in group
                        ],
                    }
                    for scope, group in by_scope.items()
                ],
            }]
        }))
    return exports


@dataclass(frozen=True)
class ShopCertificates:
    bundle_pem: bytes
    # (service, PEM of its SVID)
    certificates: tuple[tuple[str, bytes], ...]


def _name(cn: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "TrustRank demo shop"),
        x509.NameAttribute(NameOID.COMMON_NAME, cn),
    ])


def _ca_issue(now: dt.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("shop.example demo CA"))
        .issuer_name(_name("shop.example demo CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=400))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False),
            critical=True,
        )
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"spiffe://{TRUST_DOMAIN}")]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca


def _leaf_issue(
    *, service: str, valid: bool, ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate,
    now: dt.datetime,
) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    start = now - dt.timedelta(days=1 if valid else 120)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(service))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + _LEAF_LIFETIME if valid else now - dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=True,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                   ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(
                f"spiffe://{TRUST_DOMAIN}/ns/shop/sa/{service}")]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def shop_certificates(*, now: dt.datetime | None = None) -> ShopCertificates:
    """A new CA and new SVIDs (tests; the demo keeps one set: shop_certificates_kept)."""
    now = now or dt.datetime.now(dt.UTC)
    ca_key, ca = _ca_issue(now)
    return ShopCertificates(
        bundle_pem=_pem(ca),
        certificates=tuple(
            (service, _pem(_leaf_issue(service=service, valid=valid, ca_key=ca_key, ca=ca,
                                       now=now)))
            for service, valid in _SVIDS
        ),
    )


def shop_certificates_kept(folder: Path, *, now: dt.datetime | None = None) -> ShopCertificates:
    """The shop's CA and SVIDs, issued on the first start and kept in `folder` (var/).

    A restart that issued a new CA would replace the trust bundle, so every certificate the
    previous start uploaded would stop verifying ("Chain does not verify") and the expired
    storefront certificate would be reported once per start. Kept, a second upload is the
    same certificates again: nothing new to report. A valid SVID is issued again (by the
    same CA) only when it would soon enter the expiry warning window, as a real one would
    be rotated.
    """
    now = now or dt.datetime.now(dt.UTC)
    folder.mkdir(parents=True, exist_ok=True)
    key_file, ca_file = folder / "ca-key.pem", folder / "ca.pem"
    kept = _kept_ca(key_file, ca_file, now=now)
    if kept is None:
        ca_key, ca = _ca_issue(now)
        _write(key_file, ca_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ), private=True)
        _write(ca_file, _pem(ca))
    else:
        ca_key, ca = kept
    out = []
    for service, valid in _SVIDS:
        leaf_file = folder / f"{service}.pem"
        leaf = _kept_leaf(leaf_file, ca=ca, valid=valid, now=now)
        if leaf is None:
            leaf = _leaf_issue(service=service, valid=valid, ca_key=ca_key, ca=ca, now=now)
            _write(leaf_file, _pem(leaf))
        out.append((service, _pem(leaf)))
    return ShopCertificates(bundle_pem=_pem(ca), certificates=tuple(out))


def _kept_ca(
    key_file: Path, ca_file: Path, *, now: dt.datetime
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None:
    try:
        ca_key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        ca = x509.load_pem_x509_certificate(ca_file.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        return None
    if ca.public_key() != ca_key.public_key() or ca.not_valid_after_utc <= now:
        return None
    return ca_key, ca


def _kept_leaf(
    leaf_file: Path, *, ca: x509.Certificate, valid: bool, now: dt.datetime
) -> x509.Certificate | None:
    try:
        leaf = x509.load_pem_x509_certificate(leaf_file.read_bytes())
        leaf.verify_directly_issued_by(ca)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return None  # missing, damaged, or from a CA issued before this one
    if valid and leaf.not_valid_after_utc - now < _LEAF_RENEW_BEFORE:
        return None
    return leaf


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(temp, path)
