"""OpenVEX out: `GET /api/v1/exports?format=openvex` writes an OpenVEX 0.2 document that the
official schema accepts, one statement per vulnerability finding, and that POST /api/v1/vex
reads back into another project version with the same triage."""

from __future__ import annotations

import orjson
import pytest
from django.conf import settings

from tests.exports.helpers import body_of
from tests.vex.helpers import ANNOTATIONS, CORE, DATABIND, findings_of, scanned_project
from trustrank.accounts.principal import Principal
from trustrank.exports.models import Export
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.triage import finding_triage
from trustrank.parsers.openvex import openvex_validate

pytestmark = pytest.mark.django_db


def _triage(team, pv) -> dict:
    principal = Principal(scopes_by_team={team.pk: frozenset({"triage", "read"})})
    f = findings_of(pv)
    finding_triage(finding=f["CVE-2020-25649", "jackson-databind"], principal=principal,
                   state="not_affected", justification="code_not_reachable",
                   detail="The XML deserializer is never used.", reason="reviewed")
    finding_triage(finding=f["CVE-2020-25650", "jackson-databind"], principal=principal,
                   state="exploitable", response=["update"], reason="reachable")
    finding_triage(finding=f["CVE-2020-25651", "jackson-core"], principal=principal,
                   state="false_positive", detail="Scanner matched the wrong artifact.",
                   reason="checked")
    finding_triage(finding=f["CVE-2014-123456", "jackson-annotations"], principal=principal,
                   state="resolved", detail="Patched in our fork.", reason="fixed")
    return f


def _export(client, **params) -> dict:
    response = client.get("/api/v1/exports", {"format": "openvex", **params})
    assert response.status_code == 200, body_of(response)[:500]
    assert response["Content-Type"] == "application/json"
    return orjson.loads(body_of(response))


def test_export_is_a_valid_openvex_document_with_a_statement_per_finding(api, team):
    pv = scanned_project(team)
    f = _triage(team, pv)
    doc = _export(api(team, "read"), project_version=pv.pk)
    openvex_validate(doc)  # the official OpenVEX 0.2 JSON schema
    assert doc["@context"] == "https://openvex.dev/ns/v0.2.0"
    assert doc["@id"].startswith("urn:uuid:") and doc["version"] == 1
    assert doc["author"] == settings.TRUSTRANK_CSAF_PUBLISHER_NAME
    assert doc["timestamp"]
    by_vuln = {s["vulnerability"]["name"]: s for s in doc["statements"]}
    assert set(by_vuln) == {v for v, _ in f}
    # The product is the project version as its SBOM describes it (metadata.component).
    product = "pkg:maven/com.example/example-app@1.0.0?type=jar"
    na = by_vuln["CVE-2020-25649"]
    assert na["status"] == "not_affected"
    assert na["justification"] == "vulnerable_code_not_in_execute_path"
    assert na["impact_statement"] == "The XML deserializer is never used."
    assert na["vulnerability"]["aliases"] == ["SNYK-JAVA-COMFASTERXMLJACKSONCORE-1048302"]
    assert na["products"] == [{"@id": product, "subcomponents": [{"@id": DATABIND}]}]
    affected = by_vuln["CVE-2020-25650"]
    assert affected["status"] == "affected" and "update" in affected["action_statement"]
    fp = by_vuln["CVE-2020-25651"]
    assert fp["status"] == "not_affected" and fp["impact_statement"].startswith("False positive")
    assert fp["products"][0]["subcomponents"] == [{"@id": CORE}]
    fixed = by_vuln["CVE-2014-123456"]
    assert fixed["status"] == "fixed" and fixed["products"][0]["subcomponents"] == [
        {"@id": ANNOTATIONS}
    ]
    # The export is recorded like every other.
    export = Export.objects.get(format="openvex")
    assert export.status == "done" and export.rows == 4
    assert AuditEvent.objects.filter(action="export", subject_id=str(export.pk)).exists()


def test_untriaged_findings_are_under_investigation(api, team):
    pv = scanned_project(team)
    doc = _export(api(team, "read"), project_version=pv.pk)
    assert {s["status"] for s in doc["statements"]} == {"under_investigation"}


def test_document_id_is_stable_for_one_export(api, team):
    pv = scanned_project(team)
    client = api(team, "read")
    first, second = _export(client, project_version=pv.pk), _export(client, project_version=pv.pk)
    assert first["@id"] != second["@id"]  # two exports, two documents
    ids = list(Export.objects.order_by("pk").values_list("pk", flat=True))
    from trustrank.exports.services.vex_openvex import document_id

    assert document_id({"export_id": ids[0]}) == first["@id"]


def test_round_trip_gives_another_project_version_the_same_triage(api, team):
    source = scanned_project(team, version="1.0.0")
    _triage(team, source)
    target = scanned_project(team, version="1.1.0")
    doc = _export(api(team, "read"), project_version=source.pk)
    response = api(team, "triage").post(
        "/api/v1/vex?projectName=example-app&projectVersion=1.1.0",
        data=orjson.dumps(doc), content_type="application/json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["applied"], body["unmatched"]) == (4, 0)
    want = {k: (f.state, f.justification, f.detail) for k, f in findings_of(source).items()}
    got = {k: (f.state, f.justification, f.detail) for k, f in findings_of(target).items()}
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in want.items()}
    assert got["CVE-2020-25649", "jackson-databind"] == want["CVE-2020-25649", "jackson-databind"]
    assert got["CVE-2020-25651", "jackson-core"] == want["CVE-2020-25651", "jackson-core"]


def test_a_selection_without_vulnerability_findings_is_refused(api, team):
    response = api(team, "read").get("/api/v1/exports", {"format": "openvex"})
    assert response.status_code == 400
    assert "openvex" in response.json()["detail"]
