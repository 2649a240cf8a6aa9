"""The job page names the uploaded file and shows parameters as a table people can read."""

from __future__ import annotations

import io

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


def test_job_page_shows_parameters_as_a_key_value_table(team, api, client, make_user):
    response = api(team, "sbom:write").post(
        f"/api/v1/sboms?{QUERY}", data=SMALL, content_type="application/json"
    )
    page = _logged_in(client, make_user, team).get(f"/jobs/{response.json()['id']}/")
    html = page.content.decode()
    assert '<table class="params">' in html
    assert '<th scope="row">projectName</th><td>shop</td>' in html
    assert '<th scope="row">autoCreate</th><td>true</td>' in html
    # Not Python's repr of the dict.
    assert "{&#x27;" not in html
    assert "True" not in html
