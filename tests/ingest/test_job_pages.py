"""The job page names the uploaded file and shows parameters as a table people can read."""

from __future__ import annotations

import io
import re

import pytest

from tests.conftest import DATA

SMALL = (DATA / "sbom" / "cdx-1.6_pypi_torch-nvidia-cuda.json").read_bytes()
QUERY = "projectName=shop&projectVersion=1.0&autoCreate=true"

pytestmark = pytest.mark.django_db


def _logged_in(client, make_user, team):
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    return client


def test_job_page_names_the_uploaded_file(team, api, client, make_user):
    upload = io.BytesIO(SMALL)
    upload.name = "torch-bom.cdx.json"
    response = api(team, "sbom:write").post(
        f"/api/v1/sboms?{QUERY}", data={"bom": upload}, format="multipart"
    )
    assert response.status_code == 202, response.content
    page = _logged_in(client, make_user, team).get(f"/jobs/{response.json()['id']}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "torch-bom.cdx.json" in html
    assert "sent as a request body" not in html


def test_job_page_says_when_the_payload_was_a_request_body(team, api, client, make_user):
    response = api(team, "sbom:write").post(
        f"/api/v1/sboms?{QUERY}", data=SMALL, content_type="application/json"
    )
    page = _logged_in(client, make_user, team).get(f"/jobs/{response.json()['id']}/")
    html = page.content.decode()
    assert "— <span class=\"muted\">(sent as a request body)</span>" in html
    assert "application/json ?" not in html


def _no_python_repr(html: str) -> None:
    for text in ("{&#x27;", "[&#x27;", "True", "False", "None", "&#x27;:"):
        assert text not in html, text


def test_job_page_shows_parameters_as_labelled_fields(team, api, client, make_user):
    response = api(team, "sbom:write").post(
        f"/api/v1/sboms?{QUERY}", data=SMALL, content_type="application/json"
    )
    page = _logged_in(client, make_user, team).get(f"/jobs/{response.json()['id']}/")
    html = page.content.decode()
    params = html[html.index('data-testid="job-params"'):]
    params = params[: params.index("</dd>\n")]
    assert '<dl class="kv params">' in params
    assert "<dt>Project</dt><dd>shop</dd>" in params
    assert "<dt>Version</dt><dd>1.0</dd>" in params
    assert "<dt>Create the project if missing</dt><dd>yes</dd>" in params
    # Not Python's repr of the dict, nor its keys as the API spells them.
    assert "projectName" not in params
    _no_python_repr(html)


def test_a_finished_job_says_done_once(team, client, make_user):
    from tests.vulns.helpers import import_osv, osv

    job = import_osv(team, [osv("GHSA-0000-0000-0001", "npm", "left-pad", [{"introduced": "0"}])])
    assert job.status == "done" and job.phase == "done"
    html = _logged_in(client, make_user, team).get(f"/jobs/{job.pk}/").content.decode()
    status = html[html.index('data-testid="job-status">') + len('data-testid="job-status">'):]
    status = status[: status.index("</dd>")]
    assert re.sub(r"<[^>]+>", "", status).split() == ["done", "(1/1)"]
    assert "done done" not in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    counts = html[html.index('data-testid="job-counts"'):]
    assert '<dl class="kv params">' in counts[: counts.index("</dd>\n")]
    _no_python_repr(html)
    listing = client.get("/jobs/").content.decode()
    row = listing[listing.index(f'<tr data-job="{job.pk}"'):]
    row = re.sub(r"<[^>]+>", " ", row[: row.index("</tr>")])
    assert row.split().count("done") == 1
