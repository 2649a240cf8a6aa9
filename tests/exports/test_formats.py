"""Each format on real data: the ranking scenario, ranked by a real run, triaged by a person."""

from __future__ import annotations

import hashlib
import io

import orjson
import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from tests.exports.helpers import body_of, csv_rows, ranked_scenario
from trustrank.accounts.principal import principal_for_user
from trustrank.exports.models import Export
from trustrank.exports.services.csaf import csaf_validator
from trustrank.exports.services.rows import COLUMNS
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.triage import finding_triage

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(team, make_user):
    scenario = ranked_scenario(team)
    alice = make_user("alice", team=team)
    finding_triage(
        finding=scenario["etcd"], principal=principal_for_user(alice), state="not_affected",
        justification="code_not_reachable", detail="etcd listens on localhost only",
        reason="checked the listener",
    )
    return scenario


def test_csv_has_every_column_with_rank_decision_and_explanation(api, team, data):
    response = api(team, "read").get("/api/v1/exports", {"format": "csv"})
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["Content-Type"].startswith("text/csv")
    body = body_of(response)
    rows = csv_rows(body)
    assert list(rows[0]) == list(COLUMNS)
    by_id = {int(r["finding_id"]): r for r in rows}
    assert set(by_id) == {data["log4j"].pk, data["etcd"].pk}
    log4j = by_id[data["log4j"].pk]
    assert log4j["rank"] == "1" and log4j["decision"] == "immediate"
    assert log4j["project"] == "payment-gateway" and log4j["version"] == "1.0"
    assert log4j["component_purl"].startswith("pkg:maven/org.apache.logging.log4j/log4j-core")
    assert log4j["kev"] == "true" and log4j["cve"] == "CVE-2021-44228"
    assert "exposure=" in log4j["explanation"] or "=" in log4j["explanation"]
    etcd = by_id[data["etcd"].pk]
    assert etcd["state"] == "not_affected" and etcd["justification"] == "code_not_reachable"
    assert etcd["detail"] == "etcd listens on localhost only"


def test_json_carries_the_factors_and_the_audit_chain(api, team, data):
    response = api(team, "read").get("/api/v1/exports", {"format": "json"})
    assert response.status_code == 200
    doc = orjson.loads(body_of(response))
    assert doc["export"]["team"]["name"] == team.name
    assert set(doc["export"]["audit_chain"]) >= {
        "intact", "events", "first_broken_id", "reason", "head_digest"
    }
    assert doc["export"]["ranks"] == "latest"
    log4j = next(f for f in doc["findings"] if f["finding_id"] == data["log4j"].pk)
    assert isinstance(log4j["explanation"], list) and log4j["explanation"]
    assert {"name", "value", "effect"} <= set(log4j["explanation"][0])
    assert log4j["aliases"] == ["CVE-2021-44228"] or "CVE-2021-44228" in log4j["aliases"]


def test_every_export_is_an_audit_event_with_the_files_digest(api, team, data):
    response = api(team, "read").get("/api/v1/exports", {"format": "csv", "kind": "vulnerability"})
    body = body_of(response)
    export = Export.objects.get(pk=int(response["X-Export-Id"]))
    digest = hashlib.sha256(body).hexdigest()
    assert export.status == "done" and export.sha256 == digest and export.size_bytes == len(body)
    assert export.rows == 2
    event = AuditEvent.objects.get(action="export", subject_id=str(export.pk))
    assert event.team_id == team.pk and event.actor_kind == "api_key"
    assert event.after == {
        "format": "csv", "filter": {"kind": ["vulnerability"]}, "rows": 2,
        "sha256": digest, "size": len(body),
    }


def test_cyclonedx_vex_validates_and_maps_the_analysis(api, team, data):
    response = api(team, "read").get(
        "/api/v1/exports", {"format": "cyclonedx-vex", "project_version": data["etcd_pv"].pk}
    )
    assert response.status_code == 200, response.content
    text = body_of(response).decode()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = orjson.loads(text)
    assert doc["specVersion"] == "1.6"
    refs = {c["bom-ref"] for c in doc["components"]}
    vulns = {v["bom-ref"]: v for v in doc["vulnerabilities"]}
    assert set(vulns) == {f"finding-{data['etcd'].pk}"}
    etcd = vulns[f"finding-{data['etcd'].pk}"]
    assert etcd["analysis"]["state"] == "not_affected"
    assert etcd["analysis"]["justification"] == "code_not_reachable"
    assert etcd["analysis"]["detail"] == "etcd listens on localhost only"
    assert all(a["ref"] in refs for v in vulns.values() for a in v["affects"])
    props = {p["name"]: p["value"] for p in etcd["properties"]}
    assert props["trustrank:rank"] == "2" and props["trustrank:decision"]


def test_csaf_vex_validates_against_the_oasis_schema(api, team, data):
    response = api(team, "read").get("/api/v1/exports", {"format": "csaf-vex"})
    assert response.status_code == 200, response.content
    doc = orjson.loads(body_of(response))
    errors = list(csaf_validator().iter_errors(doc))
    assert errors == []
    assert doc["document"]["category"] == "csaf_vex"
    relations = {
        r["full_product_name"]["product_id"]: r for r in doc["product_tree"]["relationships"]
    }
    by_cve = {v.get("cve"): v for v in doc["vulnerabilities"]}
    etcd = by_cve["CVE-2020-15115"]
    (pid,) = etcd["product_status"]["known_not_affected"]
    assert relations[pid]["full_product_name"]["name"].startswith("pkg:golang/")
    assert etcd["flags"][0]["label"] == "vulnerable_code_not_in_execute_path"
    assert etcd["threats"][0]["category"] == "impact"
    log4j = by_cve["CVE-2021-44228"]
    assert list(log4j["product_status"]) == ["under_investigation"]


def test_csaf_schema_refuses_a_broken_document():
    doc = {"document": {"category": "csaf_vex"}}
    assert list(csaf_validator().iter_errors(doc))


def test_pdf_report_has_the_findings(api, team, data):
    from pypdf import PdfReader

    response = api(team, "read").get("/api/v1/exports", {"format": "pdf"})
    assert response.status_code == 200, response.content
    body = body_of(response)
    assert body.startswith(b"%PDF")
    text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(body)).pages)
    assert "CVE-2021-44228" in text and "log4j-core@2.14.1" in text
    assert "immediate" in text and "intact" in text


def test_printable_report_page(client, team, data, make_user):
    make_user("bob", team=team)
    client.login(username="bob", password="pw-bob")
    response = client.get("/exports/report", {"severity": "critical"})
    assert response.status_code == 200
    html = body_of(response).decode()
    assert "@page" in html and "CVE-2021-44228" in html and "Audit chain" in html
    assert AuditEvent.objects.filter(action="export", after__format="html").exists()


def test_csv_written_by_postgresql_says_what_the_json_says(api, team, data):
    from trustrank.exports.services.formats import explanation_text

    client = api(team, "read")
    rows = {int(r["finding_id"]): r for r in csv_rows(body_of(
        client.get("/api/v1/exports", {"format": "csv"})
    ))}
    doc = orjson.loads(body_of(client.get("/api/v1/exports", {"format": "json"})))
    for f in doc["findings"]:
        row = rows[f["finding_id"]]
        assert row["explanation"] == explanation_text(f["explanation"])
        assert row["state"] == f["state"] and row["title"] == f["title"]
        assert row["aliases"] == ";".join(f["aliases"])
        assert row["rank"] == str(f["rank"]) and row["decision"] == f["decision"]
        assert row["first_seen"][:19] == f["first_seen"][:19]
