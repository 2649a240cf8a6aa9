"""Web pages: login, projects, a project's SBOM history and components, ingest jobs."""

from __future__ import annotations

import pytest

from ingest.models import IngestJob, JobStatus
from ingest.services import job_run
from tests.conftest import DATA
from tests.inventory.test_sbom_load import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def loaded(team):
    """Two SBOMs of one project version (history) loaded through the job service."""
    run = lambda job: job_run(job_id=str(job.pk))  # noqa: E731
    run(submit(team, (DATA / "sbom" / "cdx-1.6_pypi_poetry-project-56deps.json").read_bytes()))
    run(
        submit(
            team,
            (DATA / "sbom" / "cdx-1.4_maven_dependency-track-apiserver-4.5.0.json").read_bytes(),
        )
    )
    from trustrank.inventory.models import Project

    return Project.objects.get(team=team)


def test_pages_require_login(client, db):
    for url in ("/projects/", "/projects/1/", "/jobs/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_login_page_logs_in(client, make_user, team):
    make_user("alice", team=team)
    page = client.get("/login/")
    assert page.status_code == 200 and b"Log in" in page.content
    response = client.post("/login/", {"username": "alice", "password": "pw-alice"})
    assert response.status_code == 302
    assert client.get("/projects/").status_code == 200


def test_projects_page_lists_the_teams_projects(client, make_user, team, loaded):
    client.force_login(make_user("alice", team=team))
    page = client.get("/projects/")
    assert b"shop" in page.content
    assert b"132" in page.content  # components of the current SBOM


def test_project_page_shows_history_and_current_components(
    client, make_user, team, loaded, django_assert_max_num_queries
):
    client.force_login(make_user("alice", team=team))
    with django_assert_max_num_queries(14):
        page = client.get(f"/projects/{loaded.pk}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count("<td>1.0</td>") >= 2  # two SBOMs in the history
    assert "current" in html
    assert "jackson-databind" in html  # a component of the current SBOM
    assert "aiohttp" not in html  # the older SBOM is history, not inventory
    assert "132 total" in html


def test_component_search_by_name_and_purl(client, make_user, team, loaded):
    client.force_login(make_user("alice", team=team))
    by_name = client.get(f"/projects/{loaded.pk}/?q=jackson-databind").content.decode()
    assert "jackson-databind" in by_name and "snakeyaml" not in by_name
    by_purl = client.get(f"/projects/{loaded.pk}/?q=pkg:maven/org.yaml").content.decode()
    assert "snakeyaml" in by_purl and "jackson-databind" not in by_purl


def test_htmx_request_gets_only_the_table_fragment(client, make_user, team, loaded):
    client.force_login(make_user("alice", team=team))
    fragment = client.get(
        f"/projects/{loaded.pk}/?q=jackson", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "<table" in fragment and "<html" not in fragment and "SBOM history" not in fragment


def test_components_paginate(client, make_user, team, loaded):
    client.force_login(make_user("alice", team=team))
    second = client.get(f"/projects/{loaded.pk}/?page=2").content.decode()
    assert "Page 2 of 3" in second


def test_other_teams_cannot_see_the_project(client, make_user, other_team, loaded):
    client.force_login(make_user("mallory", team=other_team))
    assert client.get(f"/projects/{loaded.pk}/").status_code == 404
    assert b"shop" not in client.get("/projects/").content
    assert b"payments" not in client.get("/jobs/").content


def test_jobs_page_shows_status_timings_and_errors(
    client, make_user, team, django_assert_max_num_queries
):
    bad = submit(team, b"nonsense", name="broken")
    job_run(job_id=str(bad.pk))
    queued = submit(team, b"{}", name="waiting")
    client.force_login(make_user("alice", team=team))
    with django_assert_max_num_queries(8):
        page = client.get("/jobs/").content.decode()
    assert "failed" in page and "neither JSON nor XML" in page
    assert "queued" in page
    # While a job is unfinished the table polls for updates.
    assert 'hx-trigger="every 2s"' in page
    IngestJob.objects.filter(pk=queued.pk).update(status=JobStatus.DONE)
    assert 'hx-trigger="every 2s"' not in client.get("/jobs/").content.decode()
    detail = client.get(f"/jobs/{bad.pk}/").content.decode()
    assert "neither JSON nor XML" in detail


def test_projects_api_is_paginated_filtered_and_team_scoped(team, other_team, api, loaded):
    client = api(team, "read")
    body = client.get("/api/v1/projects?name=sho").json()
    assert body["count"] == 1
    assert body["results"][0]["versions"][0]["current_sbom"]["component_count"] == 132
    assert client.get("/api/v1/projects?name=zzz").json()["count"] == 0
    comps = client.get(f"/api/v1/projects/{loaded.pk}/components?page_size=10").json()
    assert comps["count"] == 132 and len(comps["results"]) == 10 and comps["next"]
    assert (
        client.get(f"/api/v1/projects/{loaded.pk}/components?name=jackson-databind").json()["count"]
        == 1
    )
    intruder = api(other_team, "read")
    assert intruder.get("/api/v1/projects").json()["count"] == 0
    assert intruder.get(f"/api/v1/projects/{loaded.pk}/components").status_code == 404


def test_read_api_needs_the_read_scope(team, api, loaded):
    assert api(team, "sbom:write").get("/api/v1/projects").status_code == 403


def test_read_api_works_with_a_session(client, make_user, team, loaded):
    client.force_login(make_user("alice", team=team, role="viewer"))
    assert client.get("/api/v1/projects").json()["count"] == 1


def test_openapi_schema_and_docs_are_served(client, make_user, team):
    client.force_login(make_user("alice", team=team))
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    text = schema.content.decode()
    for path in (
        "/api/v1/sboms",
        "/api/v1/bom",
        "/api/v1/projects/{project_id}/components",
        "/api/v1/jobs/{job_id}",
    ):
        assert path in text
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
