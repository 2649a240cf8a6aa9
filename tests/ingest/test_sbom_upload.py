"""SBOM receivers: what is accepted, what is refused, and that refusals store nothing."""

from __future__ import annotations

import base64
import gzip
import io
import json

import pytest
from django.test import override_settings

from ingest.models import IngestJob, IngestPayload, JobStatus
from tests.conftest import DATA
from trustrank.inventory.models import Project, ProjectVersion

SMALL = (DATA / "sbom" / "cdx-1.6_pypi_torch-nvidia-cuda.json").read_bytes()
XML = (DATA / "sbom" / "cdx-1.2_maven_dropwizard-1.3.15.xml").read_bytes()

pytestmark = pytest.mark.django_db


def upload(
    client, body=SMALL, query="projectName=shop&projectVersion=1.0&autoCreate=true", **headers
):
    return client.post(
        f"/api/v1/sboms?{query}", data=body, content_type="application/json", **headers
    )


def test_upload_is_stored_before_the_answer_and_answers_202(team, api):
    response = upload(api(team, "sbom:write"))
    assert response.status_code == 202, response.content
    body = response.json()
    job = IngestJob.objects.get(pk=body["id"])
    assert body["status_url"] == f"/api/v1/jobs/{job.pk}"
    assert response["Location"] == body["status_url"]
    assert job.status == JobStatus.QUEUED
    assert job.kind == "sbom"
    assert job.team == team
    assert job.params["projectName"] == "shop"
    assert job.params["autoCreate"] is True
    assert bytes(IngestPayload.objects.get(job=job).data) == SMALL
    assert len(job.digest) == 64


def test_status_url_shows_the_job_to_the_uploading_key(team, api):
    client = api(team, "sbom:write")
    job_id = upload(client).json()["id"]
    shown = client.get(f"/api/v1/jobs/{job_id}")
    assert shown.status_code == 200
    assert shown.json()["status"] == "queued"
    assert shown.json()["kind"] == "sbom"


def test_multipart_upload_with_fields(team, api):
    client = api(team, "sbom:write")
    response = client.post(
        "/api/v1/sboms",
        {
            "projectName": "shop",
            "projectVersion": "2",
            "autoCreate": "true",
            "bom": io.BytesIO(XML),
        },
        format="multipart",
    )
    assert response.status_code == 202, response.content
    job = IngestJob.objects.get(pk=response.json()["id"])
    assert job.params["projectVersion"] == "2"
    assert bytes(job.payload.data) == XML


def test_dependency_track_put_with_string_autocreate(team, api):
    client = api(team, "sbom:write")
    response = client.put(
        "/api/v1/bom",
        data=json.dumps(
            {
                "projectName": "shop",
                "projectVersion": "3",
                "autoCreate": "true",
                "bom": base64.b64encode(SMALL).decode(),
            }
        ),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    token = response.json()["token"]
    job = IngestJob.objects.get(pk=token)
    assert job.params == {
        "projectName": "shop",
        "projectVersion": "3",
        "project": "",
        "autoCreate": True,
    }
    for url in (f"/api/v1/bom/token/{token}", f"/api/v1/event/token/{token}"):
        assert client.get(url).json() == {"processing": True}
    IngestJob.objects.filter(pk=token).update(status=JobStatus.DONE)
    assert client.get(f"/api/v1/bom/token/{token}").json() == {"processing": False}


def test_dependency_track_post_multipart(team, api):
    client = api(team, "sbom:write")
    response = client.post(
        "/api/v1/bom",
        {
            "projectName": "shop",
            "projectVersion": "4",
            "autoCreate": "true",
            "bom": io.BytesIO(SMALL),
        },
        format="multipart",
    )
    assert response.status_code == 200, response.content
    assert IngestJob.objects.filter(pk=response.json()["token"]).exists()


def test_dependency_track_upload_by_project_uuid(team, api):
    pv = ProjectVersion.objects.create(
        project=Project.objects.create(team=team, name="shop"), version="9"
    )
    client = api(team, "sbom:write")
    response = client.put(
        "/api/v1/bom",
        data=json.dumps({"project": str(pv.uuid), "bom": base64.b64encode(SMALL).decode()}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert IngestJob.objects.get(pk=response.json()["token"]).params["project"] == str(pv.uuid)


def test_invalid_bom_answers_400_problem_json_and_stores_nothing(team, api):
    client = api(team, "sbom:write")
    bad = json.dumps(
        {
            "bomFormat": "CycloneDX",
            "specVersion": "1.5",
            "version": 1,
            "components": [{"type": "spaceship", "name": "x"}],
        }
    ).encode()
    for response in (
        upload(client, body=bad),
        client.put(
            "/api/v1/bom",
            data=json.dumps(
                {"projectName": "a", "autoCreate": True, "bom": base64.b64encode(bad).decode()}
            ),
            content_type="application/json",
        ),
    ):
        assert response.status_code == 400
        assert response["Content-Type"] == "application/problem+json"
        problem = response.json()
        assert problem["status"] == 400
        assert "$.components[0].type" in problem["detail"]
    assert not IngestJob.objects.exists()
    assert not Project.objects.exists()


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"just text", "neither JSON nor XML"),
        (b'{"hello": 1}', "not a CycloneDX BOM"),
        (b'{"bomFormat": "CycloneDX", "specVersion": "1.1"}', "unsupported CycloneDX specVersion"),
        (b"", "empty"),
    ],
)
def test_not_a_bom_is_refused(team, api, body, detail):
    response = upload(api(team, "sbom:write"), body=body)
    assert response.status_code == 400
    assert detail in response.json()["detail"]
    assert not IngestJob.objects.exists()


def test_xxe_is_refused(team, api):
    xxe = b'<?xml version="1.0"?><!DOCTYPE bom [<!ENTITY x SYSTEM "file:///etc/passwd">]><bom xmlns="http://cyclonedx.org/schema/bom/1.5" version="1"/>'
    response = upload(api(team, "sbom:write"), body=xxe)
    assert response.status_code == 400
    assert "DTD" in response.json()["detail"]
    assert not IngestJob.objects.exists()


def test_gzip_body_is_accepted(team, api):
    response = upload(
        api(team, "sbom:write"), body=gzip.compress(SMALL), HTTP_CONTENT_ENCODING="gzip"
    )
    assert response.status_code == 202
    assert bytes(IngestJob.objects.get().payload.data) == SMALL


@override_settings(TRUSTRANK_MAX_UPLOAD_BYTES=1_000_000)
def test_gzip_bomb_is_refused_with_413(team, api):
    bomb = gzip.compress(b"{" + b" " * 50_000_000 + b"}")
    assert len(bomb) < 1_000_000
    response = upload(api(team, "sbom:write"), body=bomb, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]
    assert not IngestJob.objects.exists()


@override_settings(TRUSTRANK_MAX_UPLOAD_BYTES=10_000)
def test_body_over_the_limit_is_refused_with_413(team, api):
    response = upload(api(team, "sbom:write"), body=SMALL)
    assert len(SMALL) > 10_000
    assert response.status_code == 413
    assert response["Content-Type"] == "application/problem+json"
    assert not IngestJob.objects.exists()


def test_unknown_project_without_autocreate_is_refused(team, api):
    response = upload(api(team, "sbom:write"), query="projectName=nope&projectVersion=1")
    assert response.status_code == 404
    assert "does not exist" in response.json()["detail"]
    assert not IngestJob.objects.exists()


def test_existing_project_without_autocreate_is_accepted(team, api):
    Project.objects.create(team=team, name="shop").versions.create(version="1.0")
    response = upload(api(team, "sbom:write"), query="projectName=shop&projectVersion=1.0")
    assert response.status_code == 202


def test_another_teams_project_is_not_found(team, other_team, api):
    Project.objects.create(team=other_team, name="shop").versions.create(version="1.0")
    response = upload(api(team, "sbom:write"), query="projectName=shop&projectVersion=1.0")
    assert response.status_code == 404


def test_key_without_sbom_write_gets_403(team, api):
    response = upload(api(team, "read"))
    assert response.status_code == 403
    assert "sbom:write" in response.json()["detail"]
    assert not IngestJob.objects.exists()


def test_no_key_gets_401(client, db):
    response = client.post(
        "/api/v1/sboms?projectName=a&autoCreate=true", data=SMALL, content_type="application/json"
    )
    assert response.status_code == 401
    assert not IngestJob.objects.exists()


def test_wrong_or_revoked_key_gets_401(team, make_key, client):
    from trustrank.accounts.models import ApiKey
    from trustrank.accounts.services import api_key_revoke

    secret = make_key(team, "sbom:write")
    bad = client.post(
        "/api/v1/sboms?projectName=a&autoCreate=true",
        data=SMALL,
        content_type="application/json",
        HTTP_X_API_KEY=secret + "x",
    )
    assert bad.status_code == 401
    api_key_revoke(api_key=ApiKey.objects.get())
    revoked = client.post(
        "/api/v1/sboms?projectName=a&autoCreate=true",
        data=SMALL,
        content_type="application/json",
        HTTP_X_API_KEY=secret,
    )
    assert revoked.status_code == 401


@pytest.mark.parametrize(("header", "priority"), [(None, 10), ("1", 1), ("10", 10), ("200", 200)])
def test_x_priority_is_recorded(team, api, header, priority):
    headers = {"HTTP_X_PRIORITY": header} if header else {}
    response = upload(api(team, "sbom:write"), **headers)
    assert response.status_code == 202
    assert IngestJob.objects.get().priority == priority


def test_bad_x_priority_is_refused(team, api):
    response = upload(api(team, "sbom:write"), HTTP_X_PRIORITY="urgent")
    assert response.status_code == 400
    assert "X-Priority" in response.json()["detail"]


def test_priority_below_fallback_goes_to_the_high_queue(settings):
    from trustrank.jobs.send import queue_for

    def queue_for_priority(priority: int) -> str:
        return queue_for(job_class="interactive", priority=priority)

    assert queue_for_priority(0) == settings.INGEST_HIGH_QUEUE
    assert queue_for_priority(9) == settings.INGEST_HIGH_QUEUE
    assert queue_for_priority(10) == settings.INGEST_QUEUE
    assert queue_for_priority(50) == settings.INGEST_QUEUE


def test_jobs_of_another_team_are_invisible(team, other_team, api):
    job_id = upload(api(team, "sbom:write")).json()["id"]
    intruder = api(other_team, "read")
    assert intruder.get(f"/api/v1/jobs/{job_id}").status_code == 404
    assert intruder.get("/api/v1/jobs").json()["count"] == 0
    # As Dependency-Track answers for a token it does not know: not processing, nothing more.
    assert intruder.get(f"/api/v1/bom/token/{job_id}").json() == {"processing": False}


@override_settings(TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT=2, TRUSTRANK_INGEST_OVERLOAD_CACHE_SECONDS=0)
def test_deep_queue_answers_503_with_retry_after_from_formula_6(team, api):
    client = api(team, "sbom:write")
    assert upload(client).status_code == 202
    assert upload(client).status_code == 202
    response = upload(client)
    assert response.status_code == 503
    # delay = 0.01 s · (1 + 0.02 · 2)² = 0.0108 s, rounded up to whole seconds.
    assert response["Retry-After"] == "1"
    assert IngestJob.objects.count() == 2


def test_retry_after_grows_with_the_queue():
    from trustrank.jobs.admission import retry_after_seconds

    assert retry_after_seconds(queue_depth=0) == 1
    assert retry_after_seconds(queue_depth=1000) == 5  # 0.01 · 21² = 4.41 s
    assert retry_after_seconds(queue_depth=5000) == 103  # 0.01 · 101² = 102.01 s, rounded up


def test_feed_imports_are_visible_to_every_team(team, other_team, api):
    from ingest.models import JobKind

    feed = IngestJob.objects.create(team=other_team, kind=JobKind.KEV, digest="1" * 64)
    private = IngestJob.objects.create(team=other_team, kind=JobKind.SBOM, digest="2" * 64)
    client = api(team, "read")
    assert client.get(f"/api/v1/jobs/{feed.pk}").status_code == 200
    assert client.get(f"/api/v1/jobs/{private.pk}").status_code == 404


@pytest.mark.parametrize("value", ["١٠", "1_0", "²", "-1", "256"])
def test_x_priority_takes_ascii_digits_from_0_to_255_only(value):
    from ingest.services import InvalidPriority, priority_parse

    with pytest.raises(InvalidPriority):
        priority_parse(value)
