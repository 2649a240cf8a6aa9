"""Management commands: import certificates and trust bundles from files."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ingest.models import IngestJob
from tests.identity.pki import DATA, make_pki
from trustrank.identity.models import Certificate, Identity, TrustBundle

pytestmark = pytest.mark.django_db


def test_import_bundle_and_certificates(team, tmp_path: Path) -> None:
    pki = make_pki()
    (tmp_path / "root.pem").write_bytes(pki.root.pem)
    (tmp_path / "a.pem").write_bytes(pki.leaf("/ns/pay/sa/payments").pem + pki.intermediate.pem)
    (tmp_path / "b.der").write_bytes(pki.leaf("/ns/web/sa/web").der)
    call_command("import_trust_bundle", str(tmp_path / "root.pem"), team=team.name,
                 environment="prod", run_now=True)
    call_command("import_certificates", str(tmp_path / "a.pem"), str(tmp_path / "b.der"),
                 team=team.name, environment="prod", observed="node-7", run_now=True)
    assert TrustBundle.objects.get().trust_domains == ["prod.example"]
    assert Certificate.objects.filter(team=team).count() == 3
    assert dict(Identity.objects.values_list("spiffe_id", "strength")) == {
        "spiffe://prod.example/ns/pay/sa/payments": 100,
        "spiffe://prod.example/ns/web/sa/web": 100,
    }
    assert set(IngestJob.objects.values_list("requested_by_label", flat=True)) == {
        "command:import_trust_bundle", "command:import_certificates"
    }


def test_real_spire_certificate_is_self_signed(team) -> None:
    call_command("import_certificates", str(DATA / "spire_certs_blog_cert.pem"), team=team.name,
                 environment="spire", run_now=True)
    cert = Certificate.objects.get()
    assert cert.spiffe_id == "spiffe://example.org/blog"
    assert cert.chain_status == "self_signed" and cert.strength == 30


def test_bad_file_is_refused(team) -> None:
    with pytest.raises(CommandError, match="refused"):
        call_command("import_certificates", str(DATA / "go-spiffe_x509bundle_not-pem.pem"),
                     team=team.name)
    assert not IngestJob.objects.exists()


def test_unknown_team(db) -> None:
    with pytest.raises(CommandError, match="no team"):
        call_command("import_trust_bundle", str(DATA / "spire_conf_agent_dummy_root_ca.crt"),
                     team="nobody")
