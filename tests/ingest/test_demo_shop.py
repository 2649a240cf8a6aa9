"""The demo shop keeps its CA and certificates across starts: a second start reports no
certificate as failing to verify and the expired one once."""

from __future__ import annotations

import datetime as dt
import shutil
from io import StringIO

import pytest
from cryptography import x509
from django.core.management import call_command

from ingest import demo
from tests.conftest import DATA


def _fingerprints(certs: demo.ShopCertificates) -> list[bytes]:
    return [certs.bundle_pem, *(pem for _service, pem in certs.certificates)]


def test_the_shop_pki_is_issued_once_and_kept(tmp_path):
    first = demo.shop_certificates_kept(tmp_path / "pki")
    again = demo.shop_certificates_kept(tmp_path / "pki")
    assert _fingerprints(again) == _fingerprints(first)
    assert oct((tmp_path / "pki" / "ca-key.pem").stat().st_mode & 0o777) == "0o600"


def test_a_valid_svid_near_its_expiry_is_issued_again_by_the_same_ca(tmp_path):
    first = demo.shop_certificates_kept(tmp_path / "pki")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=60)
    renewed = demo.shop_certificates_kept(tmp_path / "pki", now=later)
    assert renewed.bundle_pem == first.bundle_pem
    before, after = dict(first.certificates), dict(renewed.certificates)
    ca = x509.load_pem_x509_certificate(first.bundle_pem)
    for service in ("payment-gateway", "checkout"):
        assert after[service] != before[service]
        leaf = x509.load_pem_x509_certificate(after[service])
        leaf.verify_directly_issued_by(ca)
        assert leaf.not_valid_after_utc > later + dt.timedelta(days=30)
    # The expired one is meant to be expired: kept as it is.
    assert after["storefront"] == before["storefront"]


def test_a_damaged_ca_is_replaced_with_certificates_it_issued(tmp_path):
    first = demo.shop_certificates_kept(tmp_path / "pki")
    (tmp_path / "pki" / "ca-key.pem").write_text("not a key")
    replaced = demo.shop_certificates_kept(tmp_path / "pki")
    assert replaced.bundle_pem != first.bundle_pem
    ca = x509.load_pem_x509_certificate(replaced.bundle_pem)
    for _service, pem in replaced.certificates:
        x509.load_pem_x509_certificate(pem).verify_directly_issued_by(ca)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_loading_the_shop_twice_keeps_its_identities_clean(
    live_server, celery_worker, team, make_key, tmp_path, settings
):
    from trustrank.findings.models import Finding
    from trustrank.identity.models import Certificate

    settings.VAR_DIR = tmp_path
    data = tmp_path / "data"
    shutil.copytree(DATA / "demo", data / "demo")
    key = make_key(team, "sbom:write", "traces:write", "certs:write", "read", "triage",
                   "admin", "feeds:write")

    def load() -> str:
        out = StringIO()
        call_command("demo_load", "--url", live_server.url, "--key", key, "--data", str(data),
                     stdout=out)
        return out.getvalue()

    first = load()
    assert "SPIFFE certificate of storefront: done" in first, first
    # What a start whose upload did not finish (its worker died), or a lost
    # var/demo-samples.json, leaves: the next start sends the certificates again.
    (tmp_path / "demo-samples.json").unlink()
    second = load()
    assert "SPIFFE certificate of storefront: done" in second, second

    certificates = Certificate.objects.filter(team=team, environment="shop")
    assert certificates.count() == 3  # the three SVIDs, each once (the CA is the bundle)
    assert not certificates.filter(role="leaf").exclude(chain_status="valid").exclude(
        subject__contains="storefront"
    ).exists()
    identity = Finding.objects.filter(team=team, kind="identity", environment="shop")
    assert not identity.filter(category="chain_invalid").exists()
    open_by_category = sorted(
        identity.exclude(state="resolved").values_list("category", flat=True)
    )
    assert open_by_category == ["expired"], open_by_category
    assert identity.count() == 1  # nothing opened and resolved on the way either
