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

Traces are OTLP/JSON exports timed in the last minutes, certificates are issued now, so
the demo looks alive whenever it starts. Nothing here is used outside the demo and tests.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography import x509
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


def shop_certificates(*, now: dt.datetime | None = None) -> ShopCertificates:
    now = now or dt.datetime.now(dt.UTC)
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
    out = []
    for service, valid in (("payment-gateway", True), ("checkout", True), ("storefront", False)):
        key = ec.generate_private_key(ec.SECP256R1())
        start = now - dt.timedelta(days=1 if valid else 120)
        leaf = (
            x509.CertificateBuilder()
            .subject_name(_name(service))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(now + dt.timedelta(days=60) if valid else now - dt.timedelta(days=30))
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
        out.append((service, leaf.public_bytes(serialization.Encoding.PEM)))
    return ShopCertificates(
        bundle_pem=ca.public_bytes(serialization.Encoding.PEM), certificates=tuple(out)
    )
