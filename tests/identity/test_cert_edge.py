"""Certificate uploads: parsing stays linear in the bundle size, big bundles are parsed by
the worker, and what the worker could not store is refused by the receiver."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.test import override_settings

from ingest.models import IngestJob, JobStatus
from tests.identity.helpers import run_queued_jobs
from tests.identity.pki import make_pki, now
from trustrank.identity.models import Certificate
from trustrank.parsers.x509 import CertificateParseError, certificates_parse

PEM = "application/x-pem-file"


def _bundle(blocks: int) -> bytes:
    pki = make_pki()
    distinct = [pki.leaf(f"/ns/a/sa/s{i}").pem for i in range(20)]
    return b"".join(distinct[i % len(distinct)] for i in range(blocks))


def _timed_parse(data: bytes) -> float:
    start = time.perf_counter()
    certificates_parse(data)
    return time.perf_counter() - start


def test_bundle_parsing_grows_linearly():
    small, big = _bundle(2_000), _bundle(16_000)
    t_small = min(_timed_parse(small) for _ in range(3))
    t_big = min(_timed_parse(big) for _ in range(2))
    # 8x the blocks: linear is ~8x; the quadratic line counting it replaces was ~64x.
    assert t_big < 20 * t_small + 0.05, (t_small, t_big)
    assert t_big < 5


def _cert(*, cn: str = "svc", dns: tuple[str, ...] = (), ski: bytes | None = None) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now())
        .not_valid_after(now().replace(year=now().year + 1))
    )
    if dns:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False
        )
    if ski is not None:
        builder = builder.add_extension(x509.SubjectKeyIdentifier(ski), critical=False)
    from cryptography.hazmat.primitives import serialization

    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


UNSTORABLE = {
    "NUL in a DNS name": lambda: _cert(dns=("good.example\x00.evil.example",)),
    "over-long key identifier": lambda: _cert(ski=b"k" * 120),
}


@pytest.mark.parametrize("case", sorted(UNSTORABLE))
def test_certificates_the_database_cannot_hold_are_refused_by_the_parser(case):
    with pytest.raises(CertificateParseError):
        certificates_parse(UNSTORABLE[case]())


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(UNSTORABLE))
def test_the_receiver_refuses_them_before_the_202(team, api, case):
    client = api(team, "certs:write")
    response = client.post("/api/v1/certificates?environment=prod", data=UNSTORABLE[case](),
                           content_type=PEM)
    assert response.status_code == 400, response.content
    assert not IngestJob.objects.exists()


@pytest.mark.django_db
def test_a_big_bundle_is_parsed_by_the_worker_not_the_request(team, api):
    pki = make_pki()
    good = b"".join(pki.leaf(f"/ns/a/sa/s{i}").pem for i in range(3))
    broken = good + b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    client = api(team, "certs:write")
    with override_settings(TRUSTRANK_CERTS_INLINE_PARSE_MAX=2):
        ok: Any = client.post("/api/v1/certificates?environment=prod", data=good,
                              content_type=PEM)
        bad: Any = client.post("/api/v1/certificates?environment=prod", data=broken,
                               content_type=PEM)
    assert ok.status_code == 202 and bad.status_code == 202
    run_queued_jobs()
    assert IngestJob.objects.get(pk=ok.json()["id"]).status == JobStatus.DONE
    failed = IngestJob.objects.get(pk=bad.json()["id"])
    assert failed.status == JobStatus.FAILED
    assert "PEM block 4" in failed.error
    assert Certificate.objects.count() == 3
    # Under the threshold the same upload is refused at once.
    response = client.post("/api/v1/certificates?environment=prod", data=broken,
                           content_type=PEM)
    assert response.status_code == 400
