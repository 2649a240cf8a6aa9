"""SPDX SBOMs through the SBOM receivers: `POST /api/v1/sboms` with `application/spdx+json`
and `PUT /api/v1/bom` with a base64 SPDX document, end to end through gunicorn, PostgreSQL
and a real Celery worker; a bad SPDX document is a 400 that names what is wrong, with nothing
stored."""

from __future__ import annotations

import base64
import io
import json

import pytest
import requests

from ingest.models import IngestJob, JobStatus
from tests.conftest import DATA, wait_for
from trustrank.inventory.models import Component, ComponentDependency, Project, Sbom

SPDX = DATA / "sbom" / "spdx"
APPBOMINATION_22 = (SPDX / "spdx-2.2_maven_appbomination.spdx.json").read_bytes()
APPBOMINATION_3 = (SPDX / "spdx-3.0.1_maven_appbomination.spdx3.json").read_bytes()
HELLO_23 = (SPDX / "spdx-2.3_cargo_k8s-bom-hello-server.spdx.json").read_bytes()
# The real GitHub advisory for junit 4.7–4.13.0 (CVE-2020-15250); App-BOM-ination has 4.12.
JUNIT_OSV = (DATA / "advisories" / "osv" / "maven" / "GHSA-269g-pwp5-87pp.json").read_bytes()
CDX = (DATA / "sbom" / "cdx-1.6_pypi_torch-nvidia-cuda.json").read_bytes()
QUERY = "projectName=appbomination&projectVersion=1.0&autoCreate=true"
# Real generators' output the SPDX validator objects to in fields TrustRank does not read.
REAL = sorted((SPDX / "real").glob("*.json"))
KUBECTL = (SPDX / "real" / "spdx-2.2_syft-0.58_kubectl-linux-amd64.spdx.json").read_bytes()
# golang.org/x/net before 0.17.0 (HTTP/2 rapid reset); syft found v0.13.0 in kubectl.
X_NET_OSV = (DATA / "advisories" / "osv" / "go" / "GO-2023-2102.json").read_bytes()

BAD = [
    (b"SPDXVersion: SPDX-2.3\n", "not valid JSON"),
    (b'{"SPDXID": "SPDXRef-DOCUMENT"}', 'neither "spdxVersion"'),
    (CDX, "not an SPDX document"),
    ((SPDX / "bad" / "spdx-2.2_syft-bad_example7-go-module.spdx.json").read_bytes(),
     "Package name"),
    ((SPDX / "bad" / "spdx-2.2_syft_alpine-3.10-vendor.spdx.json").read_bytes(),
     'did not find the referenced spdx_id "SPDXRef-9fb3aa2f8b"'),
    ((SPDX / "bad" / "spdx-2.2_syft_alpine-3.10-dangling-contains.spdx.json").read_bytes(),
     'did not find the referenced spdx_id "SPDXRef-499bb68237b0f2b8"'),
    (HELLO_23.replace(b'"SPDXID": "SPDXRef-Package-SPDXRef-Package-cargo-hyper-0.14"',
                     b'"SPDXID": "SPDXRef-Package-SPDXRef-Package-cargo-tokio-1"'),
     "must be unique"),
    (APPBOMINATION_3.replace(b'"software_packageVersion" : "4.12"',
                             b'"software_packageVersion" : 4.12'),
     "SPDX 3.0.1 JSON schema"),
]


def finished(job_id: str) -> str | None:
    status = IngestJob.objects.values_list("status", flat=True).get(pk=job_id)
    return status if status in (JobStatus.DONE, JobStatus.FAILED) else None


# --- the receivers, in process ------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "content_type",
    ["application/spdx+json", "application/spdx+json; charset=utf-8", "application/json",
     "application/octet-stream"],
)
def test_spdx_upload_is_accepted_under_its_own_type_and_the_generic_ones(team, api, content_type):
    response = api(team, "sbom:write").post(
        f"/api/v1/sboms?{QUERY}", data=APPBOMINATION_22, content_type=content_type
    )
    assert response.status_code == 202, response.content
    job = IngestJob.objects.get(pk=response.json()["id"])
    assert bytes(job.payload.data) == APPBOMINATION_22
    assert job.content_type.startswith(content_type.split(";")[0])


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "detail"), BAD)
def test_bad_spdx_is_refused_with_400_naming_what_is_wrong_and_stores_nothing(
    team, api, body, detail
):
    response = api(team, "sbom:write").post(
        f"/api/v1/sboms?{QUERY}", data=body, content_type="application/spdx+json"
    )
    assert response.status_code == 400, response.content
    problem = response.json()
    assert problem["title"] == "The uploaded BOM is invalid"
    assert detail in problem["detail"]
    assert not IngestJob.objects.exists() and not Project.objects.exists()


@pytest.mark.django_db
def test_put_bom_with_base64_invalid_spdx_is_refused(team, api):
    body = (SPDX / "bad" / "spdx-2.2_syft_alpine-3.10-vendor.spdx.json").read_bytes()
    response = api(team, "sbom:write").put(
        "/api/v1/bom",
        data=json.dumps({"projectName": "a", "autoCreate": True,
                         "bom": base64.b64encode(body).decode()}),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "relationship SPDXRef-9fb3aa2f8b CONTAINS" in response.json()["detail"]
    assert not IngestJob.objects.exists()


@pytest.mark.django_db
def test_the_upload_route_documents_the_spdx_media_type(team, api):
    schema = api(team, "read").get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/sboms"]["post"]
    assert "application/spdx+json" in operation["requestBody"]["content"]
    assert "SPDX" in operation["summary"]
    put = next(iter(schema["paths"]["/api/v1/bom"]["put"]["requestBody"]["content"].values()))
    ref = put["schema"]["$ref"].rsplit("/", 1)[-1]
    assert "SPDX" in schema["components"]["schemas"][ref]["properties"]["bom"]["description"]


@pytest.mark.django_db
def test_dependency_track_multipart_post_takes_an_spdx_file(team, api):
    response = api(team, "sbom:write").post(
        "/api/v1/bom",
        {"projectName": "hello", "autoCreate": "true", "bom": io.BytesIO(HELLO_23)},
        format="multipart",
    )
    assert response.status_code == 200, response.content
    assert bytes(IngestJob.objects.get(pk=response.json()["token"]).payload.data) == HELLO_23


@pytest.mark.django_db
@pytest.mark.parametrize("body", [APPBOMINATION_22, APPBOMINATION_3])
def test_the_sbom_job_loads_spdx_and_matching_finds_the_vulnerable_package(
    team, body, make_user, client
):
    """The job handler in process (the worker's code path, without a worker)."""
    from tests.vulns.helpers import import_osv, load_sbom
    from trustrank.findings.models import Finding

    assert import_osv(team, [json.loads(JUNIT_OSV)]).status == JobStatus.DONE
    pv = load_sbom(team, body, project="appbomination", version="1.0")
    assert pv.current_sbom is not None and pv.current_sbom.format == "spdx"
    (finding,) = Finding.objects.filter(project_version=pv)
    assert finding.component.purl == "pkg:maven/junit/junit@4.12"
    client.force_login(make_user("alice", team=team))
    page = client.get(f"/projects/{pv.project_id}/")
    assert page.status_code == 200
    assert f"SPDX {pv.current_sbom.spec_version} JSON".encode() in page.content


@pytest.mark.django_db
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_generator_spdx_is_accepted_and_loaded_with_its_warnings(team, api, path):
    body = path.read_bytes()
    response = api(team, "sbom:write").post(
        f"/api/v1/sboms?{QUERY}", data=body, content_type="application/spdx+json"
    )
    assert response.status_code == 202, response.content
    from tests.vulns.helpers import load_sbom

    pv = load_sbom(team, body, project="real", version="1.0")
    sbom = pv.current_sbom
    assert sbom is not None and sbom.format == "spdx"
    assert sbom.warning_count > 0 and len(sbom.warnings) == min(sbom.warning_count, 20)
    assert Component.objects.filter(sbom=sbom).count() == sbom.component_count > 0


@pytest.mark.django_db
def test_the_project_page_says_accepted_with_n_warnings_and_shows_the_first(
    team, make_user, client
):
    from tests.vulns.helpers import load_sbom

    pv = load_sbom(team, KUBECTL, project="kubectl", version="1.28")
    client.force_login(make_user("alice", team=team))
    page = client.get(f"/projects/{pv.project_id}/").content.decode()
    assert "Accepted with 90 warnings" in page
    assert "creationInfo.created &#x27;2023-08-29T23:44:36.856125332Z&#x27;" in page
    assert "and 87 more" in page


# --- end to end: gunicorn, PostgreSQL, a Celery worker -----------------------------------------


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_real_syft_spdx_is_loaded_with_warnings_and_matched(
    web_server, celery_worker, team, make_key
):
    """Syft 0.58's kubectl image SBOM: nanoseconds in `created`, no copyrightText (SPDX 2.2
    wants one), nothing DESCRIBED; the SPDX validator refuses it, TrustRank takes it."""
    session = requests.Session()
    session.headers["X-Api-Key"] = make_key(team, "sbom:write", "read", "feeds:write")
    feed = session.post(
        f"{web_server.url}/api/v1/feeds/osv", data=X_NET_OSV,
        headers={"Content-Type": "application/json", "X-Filename": "GO-2023-2102.json"},
    )
    assert feed.status_code == 202, feed.text
    assert wait_for(lambda: finished(feed.json()["id"]), timeout=90) == JobStatus.DONE

    response = session.post(
        f"{web_server.url}/api/v1/sboms?projectName=kubectl&projectVersion=1.28&autoCreate=true",
        data=KUBECTL, headers={"Content-Type": "application/spdx+json"},
    )
    assert response.status_code == 202, response.text
    status_url = response.json()["status_url"]
    assert wait_for(lambda: finished(response.json()["id"]), timeout=90) == JobStatus.DONE
    job = session.get(f"{web_server.url}{status_url}").json()
    assert job["counts"]["components"] == 88
    assert job["result"]["warning_count"] == 90 and len(job["result"]["warnings"]) == 20
    assert job["result"]["warnings"][0].startswith("creationInfo.created")
    assert Component.objects.filter(purl="pkg:golang/golang.org/x/net@v0.13.0").exists()

    def x_net_findings():
        found = session.get(f"{web_server.url}/api/v1/findings?q=golang.org/x/net").json()
        return found["results"] if found["count"] else None

    findings = wait_for(x_net_findings, timeout=90)
    assert "GO-2023-2102" in {f["advisory"]["id"] for f in findings}




@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_spdx_upload_becomes_components_a_graph_and_a_finding(
    web_server, celery_worker, team, other_team, make_key
):
    session = requests.Session()
    session.headers["X-Api-Key"] = make_key(team, "sbom:write", "read", "feeds:write")
    feed = session.post(
        f"{web_server.url}/api/v1/feeds/osv", data=JUNIT_OSV,
        headers={"Content-Type": "application/json", "X-Filename": "GHSA-269g-pwp5-87pp.json"},
    )
    assert feed.status_code == 202, feed.text
    assert wait_for(lambda: finished(feed.json()["id"]), timeout=90) == JobStatus.DONE

    response = session.post(
        f"{web_server.url}/api/v1/sboms?{QUERY}", data=APPBOMINATION_22,
        headers={"Content-Type": "application/spdx+json"},
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert wait_for(lambda: finished(job_id), timeout=90) == JobStatus.DONE
    job = session.get(f"{web_server.url}/api/v1/jobs/{job_id}").json()
    assert job["counts"]["components"] == 6 and job["counts"]["dependencies"] == 4

    sbom = Sbom.objects.get()
    assert (sbom.format, sbom.spec_version) == ("spdx", "2.2")
    assert sbom.described_component["name"] == "App-BOM-ination"
    assert set(ComponentDependency.objects.values_list("ref", "depends_on")) == {
        ("SPDXRef-1", "SPDXRef-21"), ("SPDXRef-1", "SPDXRef-22"),
        ("SPDXRef-1", "SPDXRef-20"), ("SPDXRef-22", "SPDXRef-23"),
    }
    project_id = session.get(f"{web_server.url}/api/v1/projects").json()["results"][0]["id"]
    listed = session.get(f"{web_server.url}/api/v1/projects/{project_id}/components").json()
    assert {c["purl"] for c in listed["results"] if c["purl"]} == {
        "pkg:maven/junit/junit@4.12",
        "pkg:maven/org.hamcrest/hamcrest-core@1.3",
        "pkg:maven/org.apache.commons/commons-lang3@3.4",
        "pkg:maven/org.slf4j/slf4j-api@1.7.21",
    }

    # Matching runs on the worker after the load commits: junit 4.12 is affected.
    def junit_findings():
        found = session.get(f"{web_server.url}/api/v1/findings?q=junit").json()
        return found["results"] if found["count"] else None

    (finding,) = wait_for(junit_findings, timeout=90)
    assert finding["advisory"]["id"] == "GHSA-269g-pwp5-87pp"
    assert finding["component"]["purl"] == "pkg:maven/junit/junit@4.12"
    other = requests.get(
        f"{web_server.url}/api/v1/findings?q=junit",
        headers={"X-Api-Key": make_key(other_team, "read")},
    ).json()
    assert other["count"] == 0


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_dependency_track_put_with_base64_spdx_3_is_loaded(web_server, celery_worker, team,
                                                           make_key):
    headers = {"X-Api-Key": make_key(team, "sbom:write", "read")}
    response = requests.put(
        f"{web_server.url}/api/v1/bom", headers=headers,
        json={"projectName": "hello", "projectVersion": "3", "autoCreate": "true",
              "bom": base64.b64encode(APPBOMINATION_3).decode()},
    )
    assert response.status_code == 200, response.text
    token = response.json()["token"]
    wait_for(lambda: requests.get(f"{web_server.url}/api/v1/bom/token/{token}",
                                  headers=headers).json() == {"processing": False}, timeout=90)
    assert finished(token) == JobStatus.DONE
    sbom = Sbom.objects.get()
    assert (sbom.format, sbom.spec_version, sbom.component_count) == ("spdx", "3.0.1", 6)
    assert "pkg:maven/junit/junit@4.12" in set(
        Component.objects.filter(sbom=sbom).values_list("purl", flat=True)
    )

    # A bad SPDX document over the same route: 400 from gunicorn, no job row.
    bad = requests.put(
        f"{web_server.url}/api/v1/bom", headers=headers,
        json={"projectName": "hello", "autoCreate": True,
              "bom": base64.b64encode(b'{"spdxVersion": "SPDX-2.3"}').decode()},
    )
    assert bad.status_code == 400 and "cannot be read as SPDX" in bad.json()["detail"]
    assert IngestJob.objects.count() == 1
