"""CycloneDX VEX: one document per project version, naming the product it speaks of, every
`affects` ref resolving inside it, checked by cyclonedx-python-lib's strict validator before
a byte is served; and Dependency-Track's per-project route."""

from __future__ import annotations

import orjson
import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from tests.exports.helpers import body_of, ranked_scenario
from trustrank.exports.models import Export
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.audit_chain import audit_chain_verify
from trustrank.inventory.models import Sbom

pytestmark = pytest.mark.django_db

SERIAL = "urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79"
GW_PURL = "pkg:maven/com.example/payment-gateway@1.0"


@pytest.fixture
def data(team):
    built = ranked_scenario(team)
    # The gateway's SBOM describes its product, as a CI pipeline's BOM does.
    Sbom.objects.filter(pk=built["gateway_pv"].current_sbom_id).update(
        serial_number=SERIAL,
        described_component={
            "type": "application", "name": "payment-gateway", "version": "1.0",
            "purl": GW_PURL, "bom-ref": "gw-root",
        },
    )
    return built


def _vex(client, **params):
    return client.get("/api/v1/exports", {"format": "cyclonedx-vex", **params})


def test_one_document_names_its_product_and_every_ref_resolves(api, team, data):
    response = _vex(api(team, "read"), project_version=data["gateway_pv"].pk)
    assert response.status_code == 200, body_of(response)[:500]
    text = body_of(response).decode()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = orjson.loads(text)
    product = doc["metadata"]["component"]
    assert product == {
        "bom-ref": "gw-root", "name": "payment-gateway", "purl": GW_PURL,
        "type": "application", "version": "1.0",
    }
    refs = {c["bom-ref"] for c in doc["components"]}
    assert [v["bom-ref"] for v in doc["vulnerabilities"]] == [f"finding-{data['log4j'].pk}"]
    (affects,) = doc["vulnerabilities"][0]["affects"]
    assert affects["ref"] in refs and affects["ref"].startswith("pkg:maven/org.apache.logging")
    props = {p["name"]: p["value"] for p in doc["metadata"]["properties"]}
    assert props["trustrank:project_version"] == str(data["gateway_pv"].uuid)
    assert props["trustrank:sbom"] == "urn:cdx:3e671687-395b-41f5-a30f-a58921a69b79/1"


def test_a_product_without_a_described_component_is_named_by_its_uuid(api, team, data):
    doc = orjson.loads(body_of(_vex(api(team, "read"), project_version=data["etcd_pv"].pk)))
    product = doc["metadata"]["component"]
    assert product["name"] == "etcd" and product["version"] == "3.4.9"
    assert product["bom-ref"] == f"urn:uuid:{data['etcd_pv'].uuid}" and "purl" not in product


def test_a_filter_that_leaves_one_project_version_needs_no_project_version(api, team, data):
    response = _vex(api(team, "read"), project=data["etcd_pv"].project_id)
    assert response.status_code == 200
    doc = orjson.loads(body_of(response))
    assert doc["metadata"]["component"]["name"] == "etcd"


def test_several_project_versions_are_refused_naming_project_version(api, team, data):
    response = _vex(api(team, "read"))
    assert response.status_code == 400
    body = response.json()
    assert body["param"] == "project_version"
    assert str(data["gateway_pv"].pk) in body["detail"] and str(data["etcd_pv"].pk) in body["detail"]
    assert not Export.objects.exists()


def test_another_teams_project_version_is_refused(api, team, other_team, data):
    response = _vex(api(other_team, "read"), project_version=data["gateway_pv"].pk)
    assert response.status_code == 400 and response.json()["param"] == "project_version"


def test_an_invalid_document_is_an_error_not_a_file(api, team, data, monkeypatch):
    """What TrustRank stores cannot make the 1.6 schema fail, so the library's serializer (not
    our code) is made to drop a required key: the export must refuse to serve that."""
    from cyclonedx.output.json import JsonV1Dot6

    from trustrank.exports.services import vex_cyclonedx

    class Broken(JsonV1Dot6):
        def output_as_string(self, *args, **kwargs):
            doc = orjson.loads(super().output_as_string(*args, **kwargs))
            del doc["specVersion"]
            return orjson.dumps(doc).decode()

    monkeypatch.setattr(vex_cyclonedx, "JsonV1Dot6", Broken)
    response = _vex(api(team, "read"), project_version=data["gateway_pv"].pk)
    assert response.status_code == 500
    assert "did not validate" in response.json()["detail"]
    export = Export.objects.get()
    assert export.status == "failed" and "CycloneDX 1.6 schema" in export.error
    assert not AuditEvent.objects.filter(action="export").exists()


def test_the_audit_chain_head_is_in_the_document_and_the_headers(api, team, data):
    head = audit_chain_verify(team_id=team.pk).as_dict()["head_digest"]
    assert head
    response = _vex(api(team, "read"), project_version=data["gateway_pv"].pk)
    doc = orjson.loads(body_of(response))
    props = {p["name"]: p["value"] for p in doc["metadata"]["properties"]}
    assert props["trustrank:audit_head_digest"] == head
    assert response["X-TrustRank-Audit-Head"] == head
    assert response["X-TrustRank-Audit-Intact"] == "true"


def test_dependency_track_route_gives_the_projects_vex(api, team, other_team, data):
    client = api(team, "read")
    response = client.get(f"/api/v1/vex/cyclonedx/project/{data['gateway_pv'].uuid}")
    assert response.status_code == 200, body_of(response)[:500]
    doc = orjson.loads(body_of(response))
    assert doc["metadata"]["component"]["bom-ref"] == "gw-root"
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(orjson.dumps(doc).decode()) is None
    theirs = api(other_team, "read")
    assert theirs.get(f"/api/v1/vex/cyclonedx/project/{data['gateway_pv'].uuid}").status_code == 404
    unknown = "00000000-0000-4000-8000-000000000000"
    assert client.get(f"/api/v1/vex/cyclonedx/project/{unknown}").status_code == 404


def test_exports_page_refuses_a_vex_of_several_project_versions(client, make_user, team, data):
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    response = client.post("/exports/", {"format": "cyclonedx-vex"}, follow=True)
    assert "project_version" in response.content.decode()
    assert not Export.objects.exists()
    response = client.post(
        "/exports/", {"format": "cyclonedx-vex", "project_version": data["etcd_pv"].pk}
    )
    assert response.status_code == 302 and Export.objects.get().format == "cyclonedx-vex"
