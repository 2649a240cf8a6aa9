"""VEX in: `POST /api/v1/vex` and Dependency-Track's `PUT /api/v1/vex` turn CycloneDX VEX
(JSON, XML) and OpenVEX 0.2 statements into the triage of a project version's findings, with
audit events authored by the key; bad documents are refused naming what is wrong, with
nothing stored."""

from __future__ import annotations

import base64

import orjson
import pytest

from ingest.models import IngestJob
from ingest.services import job_run
from tests.vex.helpers import ANNOTATIONS, DATA, DATABIND, findings_of, scanned_project
from trustrank.accounts.models import ApiKey
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent

pytestmark = pytest.mark.django_db

URL = "/api/v1/vex?projectName=example-app&projectVersion=1.0.0"


def _post(client, body: bytes, *, url: str = URL, content_type: str = "application/json"):
    return client.post(url, data=body, content_type=content_type)


def _openvex(*statements: dict) -> bytes:
    return orjson.dumps({
        "@context": "https://openvex.dev/ns/v0.2.0",
        "@id": "https://example.com/vex/test-1",
        "author": "Example Security",
        "timestamp": "2026-01-01T00:00:00Z",
        "version": 1,
        "statements": list(statements),
    })


def test_cyclonedx_vex_example_sets_triage_with_events_by_the_key(api, team):
    pv = scanned_project(team)
    client = api(team, "triage")
    key = ApiKey.objects.filter(team=team).latest("pk")
    response = _post(client, (DATA / "cdx-1.4_vex_example.json").read_bytes())
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["statements"], body["applied"], body["unchanged"], body["unmatched"]) == (
        1, 1, 0, 0)
    assert body["format"] == "cyclonedx" and body["unmatched_statements"] == []
    assert body["token"] == body["id"] and body["status"] == "done"
    f = findings_of(pv)["CVE-2020-25649", "jackson-databind"]
    assert (f.state, f.justification, f.response) == (
        "not_affected", "code_not_reachable", ["will_not_fix", "update"])
    assert f.detail.startswith("Automated dataflow analysis")
    assert findings_of(pv)["CVE-2020-25650", "jackson-databind"].state == "in_triage"
    (event,) = AuditEvent.objects.filter(finding=f, action="state_changed")
    assert event.actor_kind == "api_key" and event.actor_key_id == key.pk
    assert event.before["state"] == "in_triage" and event.after["state"] == "not_affected"
    assert event.subject_type == "vex" and event.subject_id == body["id"]
    assert "statement 1" in event.reason
    summary = AuditEvent.objects.get(action="vex_imported")
    assert summary.actor_key_id == key.pk and summary.after["applied"] == 1
    # Sent again: nothing changes, no new event.
    again = _post(client, (DATA / "cdx-1.4_vex_example.json").read_bytes()).json()
    assert (again["applied"], again["unchanged"]) == (0, 1)
    assert AuditEvent.objects.filter(finding=f, action="state_changed").count() == 1


def test_a_ref_to_the_documents_own_product_names_every_component(api, team):
    # Dependency-Track's issue-2549 VEX: every `affects` ref is metadata.component.
    pv = scanned_project(team)
    body = _post(api(team, "triage"),
                 (DATA / "cdx-1.4_vex_dependency-track-issue2549.json").read_bytes()).json()
    assert (body["applied"], body["unmatched"]) == (3, 0)
    f = findings_of(pv)
    assert f["CVE-2020-25649", "jackson-databind"].state == "not_affected"
    assert f["CVE-2020-25650", "jackson-databind"].state == "false_positive"
    assert f["CVE-2020-25651", "jackson-core"].state == "false_positive"
    assert f["CVE-2014-123456", "jackson-annotations"].state == "in_triage"


def test_cyclonedx_xml_statement_naming_no_finding_is_reported_unmatched(api, team):
    scanned_project(team)
    response = _post(api(team, "triage"), (DATA / "cdx-1.5_vex_guac.xml").read_bytes(),
                     content_type="application/xml")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["applied"], body["unmatched"]) == (0, 1)
    (unmatched,) = body["unmatched_statements"]
    assert unmatched["vulnerability"] == "CVE-2018-7489"
    assert unmatched["products"] == ["jackson-databind-2.8.0"]


def test_openvex_statements_map_status_justification_and_match_by_alias_and_purl(api, team):
    pv = scanned_project(team)
    doc = _openvex(
        {   # by alias, the product's purl without its qualifiers
            "vulnerability": {"name": "GHSA-aaaa-bbbb-cccc"},
            "products": [{"@id": "pkg:maven/com.fasterxml.jackson.core/jackson-annotations@2.10.0"}],
            "status": "not_affected",
            "justification": "vulnerable_code_not_in_execute_path",
            "impact_statement": "Annotations are read at build time only.",
        },
        {   # subcomponents of an image, a purl without a version
            "vulnerability": {"@id": "https://nvd.nist.gov/vuln/detail/CVE-2020-25650",
                              "name": "CVE-2020-25650"},
            "products": [{"@id": "pkg:oci/example-app@sha256%3Aabc",
                          "subcomponents": [
                              {"@id": "pkg:maven/com.fasterxml.jackson.core/jackson-databind"}]}],
            "status": "affected",
            "action_statement": "Upgrade jackson-databind to 2.10.5.1.",
        },
        {   # no products: the whole project version
            "vulnerability": {"name": "CVE-2020-25651"},
            "status": "fixed",
            "status_notes": "Fixed by the base image.",
        },
        {
            "vulnerability": {"name": "CVE-2020-25649"},
            "products": [{"@id": "pkg:maven/com.fasterxml.jackson.core/jackson-databind@2.10.0"}],
            "status": "under_investigation",
        },
        {   # a package this project does not have
            "vulnerability": {"name": "CVE-2020-25649"},
            "products": [{"@id": "pkg:npm/left-pad@1.3.0"}],
            "status": "fixed",
        },
    )
    response = _post(api(team, "triage"), doc, content_type="application/openvex+json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["format"] == "openvex"
    assert (body["statements"], body["applied"], body["unchanged"], body["unmatched"]) == (
        5, 3, 1, 1)
    assert body["unmatched_statements"][0]["products"] == ["pkg:npm/left-pad@1.3.0"]
    f = findings_of(pv)
    ann = f["CVE-2014-123456", "jackson-annotations"]
    assert (ann.state, ann.justification, ann.detail) == (
        "not_affected", "code_not_reachable", "Annotations are read at build time only.")
    bind = f["CVE-2020-25650", "jackson-databind"]
    assert (bind.state, bind.detail) == ("exploitable", "Upgrade jackson-databind to 2.10.5.1.")
    core = f["CVE-2020-25651", "jackson-core"]
    assert (core.state, core.detail) == ("resolved", "Fixed by the base image.")
    assert core.resolved_at is not None
    assert f["CVE-2020-25649", "jackson-databind"].state == "in_triage"  # unchanged


@pytest.mark.parametrize(("name", "state", "justification"), [
    ("openvex-0.2_vexctl_oci-not-affected.json", "not_affected", "code_not_present"),
    ("openvex-0.2_vexctl_demo.vex.json", "resolved", ""),
    ("openvex-0.2_vexctl_document1.vex.json", "in_triage", ""),
])
def test_real_openvex_documents_apply_where_they_name_a_finding(api, team, name, state,
                                                                  justification):
    doc = orjson.loads((DATA / name).read_bytes())
    statement = doc["statements"][0]
    product = statement["products"][0]["@id"]
    vuln = statement["vulnerability"]["name"]
    # A project version holding the package the document speaks of.
    pv = scanned_project(team, vulns=[(vuln, DATABIND, [])])
    Finding.objects.filter(project_version=pv).update(component_purl=product, state="exploitable")
    body = _post(api(team, "triage"), (DATA / name).read_bytes()).json()
    assert (body["applied"], body["unmatched"]) == (1, 0), body
    f = Finding.objects.get(project_version=pv)
    assert (f.state, f.justification) == (state, justification)


def test_dependency_track_put_with_base64_answers_a_pollable_token(api, team):
    pv = scanned_project(team)
    client = api(team, "triage")  # the key that uploads VEX may poll its token
    response = client.put(
        "/api/v1/vex",
        data=orjson.dumps({
            "projectName": "example-app", "projectVersion": "1.0.0",
            "vex": base64.b64encode((DATA / "cdx-1.4_vex_example.json").read_bytes()).decode(),
        }),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    token = response.json()["token"]
    assert client.get(f"/api/v1/event/token/{token}").json() == {"processing": True}
    job_run(job_id=token)  # what the worker does with the job
    assert client.get(f"/api/v1/event/token/{token}").json() == {"processing": False}
    job = client.get(f"/api/v1/jobs/{token}").json()
    assert job["counts"]["applied"] == 1
    assert findings_of(pv)["CVE-2020-25649", "jackson-databind"].state == "not_affected"


def test_dependency_track_put_by_project_uuid_and_multipart_post(api, team):
    pv = scanned_project(team)
    client = api(team, "triage")
    vex = base64.b64encode((DATA / "cdx-1.4_vex_example.json").read_bytes()).decode()
    response = client.put("/api/v1/vex", data=orjson.dumps({"project": str(pv.uuid), "vex": vex}),
                          content_type="application/json")
    assert response.status_code == 200 and IngestJob.objects.filter(kind="vex").count() == 1
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("vex.json", (DATA / "cdx-1.4_vex_example.json").read_bytes())
    response = client.post("/api/v1/vex", {"project": str(pv.uuid), "vex": upload},
                           format="multipart")
    assert response.status_code == 200, response.content
    assert response.json()["applied"] == 1


def test_json_body_with_dependency_track_fields_is_accepted_by_post(api, team):
    pv = scanned_project(team)
    vex = base64.b64encode((DATA / "cdx-1.4_vex_example.json").read_bytes()).decode()
    response = _post(api(team, "triage"), orjson.dumps(
        {"projectName": "example-app", "projectVersion": "1.0.0", "vex": vex}), url="/api/v1/vex")
    assert response.status_code == 200, response.content
    assert findings_of(pv)["CVE-2020-25649", "jackson-databind"].state == "not_affected"


@pytest.mark.parametrize(("body", "content_type", "says"), [
    ((DATA / "openvex-0.2_vexctl_sample-2vulns-invalid.json").read_bytes(), "application/json",
     "'statement' was unexpected"),
    (b'{"@context": "https://openvex.dev/ns", "statements": []}', "application/json",
     "only OpenVEX 0.2"),
    (_openvex({"vulnerability": {"name": "CVE-1"}, "status": "not_affected"}),
     "application/json", "justification"),
    (_openvex({"vulnerability": {"name": "CVE-1"}, "status": "broken"}), "application/json",
     "/statements/0/status"),
    ((DATA / "cdx-1.3_bom_for-vex-example.json").read_bytes(), "application/json",
     "no vulnerabilities"),
    (b'{"bomFormat": "CycloneDX", "specVersion": "1.4", "vulnerabilities": [{"id": 5}]}',
     "application/json", "CycloneDX 1.4 JSON schema"),
    (b"not a document", "text/plain", "neither JSON nor XML"),
    (b"{broken", "application/json", "not valid JSON"),
    (b"", "application/json", "empty"),
    (b'{"name": "x"}', "application/json", "not a VEX document"),
])
def test_bad_documents_are_refused_naming_the_fault_with_nothing_stored(
        api, team, body, content_type, says):
    pv = scanned_project(team)
    response = _post(api(team, "triage"), body, content_type=content_type)
    assert response.status_code == 400, response.content
    assert says in response.json()["detail"]
    assert not IngestJob.objects.filter(kind="vex").exists()
    assert set(Finding.objects.filter(project_version=pv).values_list("state", flat=True)) == {
        "in_triage"}


def test_unknown_project_is_404_naming_it(api, team):
    scanned_project(team)
    body = (DATA / "cdx-1.4_vex_example.json").read_bytes()
    response = _post(api(team, "triage"), body,
                     url="/api/v1/vex?projectName=example-app&projectVersion=9.9")
    assert response.status_code == 404
    assert "example-app" in response.json()["detail"] and "9.9" in response.json()["detail"]
    response = _post(api(team, "triage"), body,
                     url="/api/v1/vex?project=0b7e4b5c-4c1e-4b8e-9a39-1d7a0c3b2f11")
    assert response.status_code == 404 and "0b7e4b5c" in response.json()["detail"]
    response = _post(api(team, "triage"), body, url="/api/v1/vex")
    assert response.status_code == 400 and "projectName" in response.json()["detail"]
    assert not IngestJob.objects.filter(kind="vex").exists()


def test_scopes_other_keys_and_anonymous_are_refused(api, team, client):
    scanned_project(team)
    body = (DATA / "cdx-1.4_vex_example.json").read_bytes()
    assert _post(api(team, "read", "sbom:write"), body).status_code == 403
    assert _post(client, body).status_code in (401, 403)
    assert client.put("/api/v1/vex", data=b"{}", content_type="application/json"
                      ).status_code in (401, 403)
    assert not IngestJob.objects.filter(kind="vex").exists()


def test_another_team_cannot_reach_or_change_this_teams_findings(api, team, other_team):
    mine = scanned_project(team)
    theirs = scanned_project(other_team)  # same project name and version, their own
    body = (DATA / "cdx-1.4_vex_dependency-track-issue2549.json").read_bytes()
    response = _post(api(other_team, "triage"), body)
    assert response.status_code == 200 and response.json()["applied"] == 3
    assert set(Finding.objects.filter(project_version=mine).values_list("state", flat=True)) == {
        "in_triage"}
    assert Finding.objects.filter(project_version=theirs, state="false_positive").count() == 2
    # Their key cannot name my project version by uuid.
    response = _post(api(other_team, "triage"), body, url=f"/api/v1/vex?project={mine.uuid}")
    assert response.status_code == 404
    assert not AuditEvent.objects.filter(team=team, action="state_changed").exists()


def test_later_statement_about_one_finding_wins(api, team):
    pv = scanned_project(team)
    doc = _openvex(
        {"vulnerability": {"name": "CVE-2014-123456"}, "status": "affected",
         "action_statement": "Upgrade.",
         "products": [{"@id": ANNOTATIONS}]},
        {"vulnerability": {"name": "CVE-2014-123456"}, "status": "fixed",
         "products": [{"@id": ANNOTATIONS}]},
    )
    body = _post(api(team, "triage"), doc).json()
    assert body["applied"] == 1
    assert findings_of(pv)["CVE-2014-123456", "jackson-annotations"].state == "resolved"
