"""CSAF 2.0 VEX: a real product tree (vendor → product_name → product_version, components
joined to the project versions that ship them), product statuses that name its ids, the
publisher from settings; valid by the OASIS schema and by the mandatory tests of the `csaf`
package (CSAF 2.0 section 6.1)."""

from __future__ import annotations

import orjson
import pytest
from csaf.csaf.v20 import validate as csaf_validate

from tests.exports.helpers import body_of, ranked_scenario
from trustrank.accounts.principal import principal_for_user
from trustrank.exports.models import Export
from trustrank.exports.services.csaf import csaf_validator
from trustrank.exports.services.csaf_tree import (
    csaf_product_tree,
    referenced_ids,
    vulnerability_check,
)
from trustrank.exports.services.vex_cyclonedx import InvalidDocument
from trustrank.findings.models import Finding
from trustrank.findings.services.triage import finding_triage
from trustrank.inventory.models import Sbom

pytestmark = pytest.mark.django_db

GW_PURL = "pkg:maven/com.example/payment-gateway@1.0"
GW_CPE = "cpe:2.3:a:example:payment-gateway:1.0:*:*:*:*:*:*:*"


@pytest.fixture
def data(team, make_user):
    built = ranked_scenario(team)
    Sbom.objects.filter(pk=built["gateway_pv"].current_sbom_id).update(
        described_component={"name": "payment-gateway", "purl": GW_PURL, "cpe": GW_CPE}
    )
    alice = make_user("alice", team=team)
    finding_triage(
        finding=built["etcd"], principal=principal_for_user(alice), state="not_affected",
        justification="code_not_reachable", detail="etcd listens on localhost only",
        reason="checked",
    )
    return built


def _csaf(client, **params) -> dict:
    response = client.get("/api/v1/exports", {"format": "csaf-vex", **params})
    assert response.status_code == 200, body_of(response)[:500]
    return orjson.loads(body_of(response))


def _mandatory_failures(doc: dict) -> list[tuple[str, object]]:
    report = csaf_validate(doc, preset="mandatory")
    failed = [(r.id, r.errors[:2]) for r in report.results if not r.passed and not r.skipped]
    ran = {r.id for r in report.results if not r.skipped}
    # The package runs the schema and every mandatory test (6.1.27: the profile's tests).
    assert {"schema", "6.1.1", "6.1.2", "6.1.6", "6.1.8", "6.1.27"} <= ran
    return failed


def _leaves(branches: list[dict], path: tuple = ()) -> dict[str, tuple]:
    out = {}
    for b in branches:
        here = (*path, (b["category"], b["name"]))
        if "product" in b:
            out[b["product"]["product_id"]] = (here, b["product"])
        out.update(_leaves(b.get("branches", []), here))
    return out


def test_product_tree_has_vendor_product_and_version_branches(api, team, data, settings):
    settings.TRUSTRANK_CSAF_PUBLISHER_NAME = "Example Corp PSIRT"
    settings.TRUSTRANK_CSAF_PUBLISHER_NAMESPACE = "https://psirt.example.com"
    doc = _csaf(api(team, "read"))
    assert list(csaf_validator().iter_errors(doc)) == []
    assert _mandatory_failures(doc) == []
    assert doc["document"]["publisher"] == {
        "category": "user", "name": "Example Corp PSIRT", "namespace": "https://psirt.example.com"
    }
    leaves = _leaves(doc["product_tree"]["branches"])
    gw = leaves[f"TRP-PV-{data['gateway_pv'].pk}"]
    assert gw[0] == (
        ("vendor", "Example Corp PSIRT"), ("product_name", "payment-gateway"),
        ("product_version", "1.0"),
    )
    assert gw[1]["product_identification_helper"] == {"purl": GW_PURL, "cpe": GW_CPE}
    log4j_leaf = next(v for v in leaves.values() if v[0][1] == ("product_name", "log4j-core"))
    assert log4j_leaf[0][0] == ("vendor", "org.apache.logging.log4j")
    assert log4j_leaf[0][2] == ("product_version", "2.14.1")
    assert log4j_leaf[1]["product_identification_helper"]["purl"].startswith("pkg:maven/")
    # Each affected component is joined to the project version that ships it.
    relations = {r["full_product_name"]["product_id"]: r for r in doc["product_tree"]["relationships"]}
    by_cve = {v["cve"]: v for v in doc["vulnerabilities"]}
    (log4j_pid,) = by_cve["CVE-2021-44228"]["product_status"]["under_investigation"]
    rel = relations[log4j_pid]
    assert rel["category"] == "default_component_of"
    assert rel["relates_to_product_reference"] == f"TRP-PV-{data['gateway_pv'].pk}"
    assert rel["product_reference"] == log4j_leaf[1]["product_id"]
    (etcd_pid,) = by_cve["CVE-2020-15115"]["product_status"]["known_not_affected"]
    assert relations[etcd_pid]["relates_to_product_reference"] == f"TRP-PV-{data['etcd_pv'].pk}"
    # Every id a vulnerability names is defined in the tree (6.1.1).
    defined = set(leaves) | set(relations)
    assert all(referenced_ids(v) <= defined for v in doc["vulnerabilities"])
    # And the package's tests do see a broken tree: drop a relationship, 6.1.1 fails.
    doc["product_tree"]["relationships"] = [
        r for r in doc["product_tree"]["relationships"] if r["full_product_name"]["product_id"]
        != log4j_pid
    ]
    assert "6.1.1" in {f[0] for f in _mandatory_failures(doc)}


def test_the_audit_head_is_a_document_note(api, team, data):
    response = api(team, "read").get("/api/v1/exports", {"format": "csaf-vex"})
    doc = orjson.loads(body_of(response))
    head = Export.objects.get().metadata["audit_chain"]["head_digest"]
    note = next(n for n in doc["document"]["notes"] if n["title"] == "Audit chain")
    assert note["text"].startswith(f"head_digest {head};")
    assert response["X-TrustRank-Audit-Head"] == head


def test_disagreeing_findings_give_one_status_per_product(api, team, data):
    """Two findings of one vulnerability on one product: the most urgent status wins, so the
    document never contradicts itself (6.1.6)."""
    log4j = data["log4j"]
    twin = Finding.objects.get(pk=log4j.pk)
    twin.pk = None
    twin.fingerprint = "twin"
    twin.state = "not_affected"
    twin.justification = "code_not_present"
    twin.save()
    Finding.objects.filter(pk=log4j.pk).update(state="exploitable")
    doc = _csaf(api(team, "read"))
    vuln = next(v for v in doc["vulnerabilities"] if v["cve"] == "CVE-2021-44228")
    assert list(vuln["product_status"]) == ["known_affected"]
    assert _mandatory_failures(doc) == []


def test_a_cpe_the_schema_refuses_is_left_out_and_noted(api, team, data):
    Sbom.objects.filter(pk=data["gateway_pv"].current_sbom_id).update(
        described_component={"name": "payment-gateway", "purl": GW_PURL, "cpe": "not a cpe"}
    )
    doc = _csaf(api(team, "read"))
    gw = _leaves(doc["product_tree"]["branches"])[f"TRP-PV-{data['gateway_pv'].pk}"][1]
    assert gw["product_identification_helper"] == {"purl": GW_PURL}
    assert any("not a cpe" in n["text"] for n in doc["document"]["notes"])
    assert _mandatory_failures(doc) == []


def test_an_empty_export_is_still_a_valid_document(api, team, data):
    doc = _csaf(api(team, "read"), q="no-such-thing")
    assert "vulnerabilities" not in doc
    assert list(csaf_validator().iter_errors(doc)) == []


def test_mandatory_checks_refuse_an_undefined_or_contradicting_product():
    tree = csaf_product_tree(
        [{"project_version_id": 1, "name": "app", "version": "1"}],
        [{"project_version_id": 1, "component_purl": "pkg:pypi/a@1", "component_name": "a",
          "component_version": "1"}],
        vendor="Example",
    )
    (rid,) = [r["full_product_name"]["product_id"] for r in tree.tree["relationships"]]
    vulnerability_check({"product_status": {"fixed": [rid]}}, tree.defined)
    with pytest.raises(InvalidDocument, match=r"6\.1\.1"):
        vulnerability_check({"product_status": {"fixed": ["TRP-nope"]}}, tree.defined)
    with pytest.raises(InvalidDocument, match=r"6\.1\.6"):
        vulnerability_check(
            {"product_status": {"fixed": [rid], "known_affected": [rid]}}, tree.defined
        )


@pytest.mark.parametrize(
    ("name", "value"),
    [("TRUSTRANK_CSAF_PUBLISHER_NAMESPACE", "not a url"),
     ("TRUSTRANK_CSAF_PUBLISHER_CATEGORY", "overlord")],
)
def test_a_bad_publisher_setting_stops_start_up(name, value):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "DEBUG": "1", name: value}
    result = subprocess.run(
        [sys.executable, "-c", "import trustrank.settings"], env=env, capture_output=True,
        text=True, cwd=Path(__file__).resolve().parents[2], check=False,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and name in result.stderr
