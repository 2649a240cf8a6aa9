"""The replay page and API: login or key required, runs scoped to the owning team."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from trustrank.accounts.models import Role
from trustrank.cluster.models import ReplayRun, ReplayStatus
from trustrank.cluster.services import replay_params_validate
from trustrank.cluster.tasks import replay_run

from .helpers import csv_subset

pytestmark = pytest.mark.django_db


def login(client, make_user, team, role=Role.ADMIN):
    user = make_user(f"u-{role}-{team.pk}", team=team, role=role)
    client.force_login(user)
    return user


@pytest.fixture
def finished_run(team, tmp_path):
    pods, nodes = csv_subset(pods=800, nodes=40, tmp=tmp_path)
    run = ReplayRun.objects.create(
        team=team,
        mode="inflation",
        parameters=replay_params_validate(seeds=1, strategies=["best_fit", "fgd"]).to_json(),
        pods_csv=pods.read_bytes(),
        nodes_csv=nodes.read_bytes(),
        trace_label="subset",
    )
    replay_run(run.pk)
    run.refresh_from_db()
    assert run.status == ReplayStatus.DONE, run.error
    return run


def test_page_requires_login(client):
    response = client.get("/replay/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_finished_run_shows_the_chart_and_table(
    client, make_user, team, finished_run, django_assert_max_num_queries
):
    login(client, make_user, team, role=Role.VIEWER)
    with django_assert_max_num_queries(8):
        response = client.get(f"/replay/{finished_run.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<svg" in html and html.count("<polyline") == 2
    assert "Unallocated GPU at 100" in html and "fgd" in html
    with django_assert_max_num_queries(8):
        listing = client.get("/replay/")
    assert f"/replay/{finished_run.pk}/" in listing.content.decode()


def test_running_run_polls_for_progress(client, make_user, team):
    run = ReplayRun.objects.create(
        team=team, mode="inflation", parameters={}, status=ReplayStatus.RUNNING,
        phase="inflation", progress_done=3, progress_total=12,
    )
    login(client, make_user, team, role=Role.VIEWER)
    response = client.get(f"/replay/{run.pk}/", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert 'hx-trigger="every 2s"' in html and "25%" in html
    assert "<h1>" not in html  # the fragment only


def test_other_team_cannot_see_a_run(client, make_user, team, other_team, finished_run, api):
    login(client, make_user, other_team)
    assert client.get(f"/replay/{finished_run.pk}/").status_code == 404
    assert f"/replay/{finished_run.pk}/" not in client.get("/replay/").content.decode()
    outsider = api(other_team, "read")
    assert outsider.get(f"/api/v1/replay-runs/{finished_run.pk}").status_code == 404
    listed = outsider.get("/api/v1/replay-runs").json()
    assert listed["count"] == 0


def test_page_starts_a_run_with_the_bundled_trace(client, make_user, team, django_capture_on_commit_callbacks):
    login(client, make_user, team)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/replay/", {"mode": "inflation", "seeds": 2, "strategies": ["fgd"],
                                             "placement": "fgd", "compress": 1, "node_fraction": 1})
    run = ReplayRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/replay/{run.pk}/"
    assert run.team == team and run.status == ReplayStatus.QUEUED and run.pods_csv is None
    assert run.parameters["strategies"] == ["fgd"] and run.parameters["seeds"] == 2
    assert len(callbacks) == 1  # the task is enqueued only once the row is committed


def test_page_refuses_a_bad_upload_with_its_line(client, make_user, team, tmp_path):
    login(client, make_user, team)
    _, nodes = csv_subset(pods=10, nodes=5, tmp=tmp_path)
    bad = SimpleUploadedFile("pods.csv", b"name,cpu_milli\np0,1\n")
    response = client.post("/replay/", {
        "mode": "inflation", "seeds": 1, "placement": "fgd", "compress": 1, "node_fraction": 1,
        "pods_file": bad, "nodes_file": SimpleUploadedFile("nodes.csv", nodes.read_bytes()),
    })
    assert response.status_code == 200
    assert "line 1: missing column" in response.content.decode()
    assert not ReplayRun.objects.exists()


def test_viewer_cannot_start_a_run(client, make_user, team):
    login(client, make_user, team, role=Role.VIEWER)
    response = client.post("/replay/", {"mode": "inflation", "seeds": 1, "placement": "fgd",
                                        "compress": 1, "node_fraction": 1})
    assert response.status_code == 200 and "admin" in response.content.decode()
    assert not ReplayRun.objects.exists()


def test_api_requires_a_key(client):
    assert client.get("/api/v1/replay-runs/1").status_code in (401, 403)
    assert client.post("/api/v1/replay-runs", {}).status_code in (401, 403)


def test_api_post_needs_admin_scope(team, api):
    response = api(team, "read").post("/api/v1/replay-runs", {"mode": "inflation"}, format="json")
    assert response.status_code == 403


def test_api_creates_a_run_and_reports_its_status(team, api, django_capture_on_commit_callbacks):
    client = api(team, "admin", "read")
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            "/api/v1/replay-runs",
            {"mode": "timeline", "placement": "best_fit", "compress": 1000, "node_fraction": 0.1},
            format="json",
        )
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "queued" and body["status_url"] == f"/api/v1/replay-runs/{body['id']}"
    detail = client.get(body["status_url"])
    assert detail.status_code == 200
    doc = detail.json()
    assert doc["team"] == team.name and doc["mode"] == "timeline"
    assert doc["parameters"]["placement"] == "best_fit" and doc["parameters"]["node_fraction"] == 0.1


def test_api_rejects_unknown_strategy(team, api):
    response = api(team, "admin").post(
        "/api/v1/replay-runs", {"strategies": ["tetris"]}, format="json"
    )
    assert response.status_code == 400
