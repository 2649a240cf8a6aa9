"""The auditor: reads everything of their team (and only their team), changes nothing. The
same for an `audit:read` key, which opens every route that asks for `read`."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from trustrank.accounts.models import ROLE_SCOPES, ApiKey, Role, Scope
from trustrank.accounts.principal import principal_for_key
from trustrank.accounts.services import api_key_issue
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent, Comment
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.inventory.models import Project

pytestmark = pytest.mark.django_db

SBOM = (b'{"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1, "components": '
        b'[{"type": "library", "name": "lodash", "version": "4.17.15", '
        b'"purl": "pkg:npm/lodash@4.17.15"}]}')


@pytest.fixture
def world(team, other_team, make_user):
    shop = Project.objects.create(team=team, name="shop")
    mine = Finding.objects.create(team=team, kind="identity", source="certificate",
                                  fingerprint="mine", title="my expired cert", project=shop)
    theirs = Finding.objects.create(team=other_team, kind="identity", source="certificate",
                                    fingerprint="theirs", title="their expired cert")
    for f in (mine, theirs):
        audit_event_record(actor=Actor.system("test"), action="created", team_id=f.team_id,
                           finding_id=f.pk, reason=f.title)
    return {
        "mine": mine,
        "theirs": theirs,
        "shop": shop,
        "auditor": make_user("audrey", team=team, role=Role.AUDITOR),
        "admin": make_user("ada", team=team, role=Role.ADMIN),
    }


def session(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def auditors(world, api, team):
    """The two ways to audit: a person with the auditor role, and an audit:read key."""
    return {"session": session(world["auditor"]), "key": api(team, "audit:read")}


def test_roles_and_scopes():
    assert ROLE_SCOPES[Role.AUDITOR] == {Scope.READ, Scope.AUDIT_READ}
    assert Scope.AUDIT_READ == "audit:read"
    assert Scope.AUDIT_READ in ROLE_SCOPES[Role.ADMIN]
    assert Scope.AUDIT_READ not in ROLE_SCOPES[Role.TRIAGER]
    assert Scope.AUDIT_READ not in ROLE_SCOPES[Role.VIEWER]


def test_audit_read_key_implies_read_and_nothing_else(team):
    key = api_key_issue(team=team, name="auditor", scopes=["audit:read"]).api_key
    principal = principal_for_key(key)
    assert principal.scopes_by_team[team.pk] == {"audit:read", "read"}
    assert key.scopes == ["audit:read"]  # stored as issued


READ_ROUTES = [
    "/api/v1/findings",
    "/api/v1/findings/{mine}",
    "/api/v1/audit-events",
    "/api/v1/projects",
    "/api/v1/projects/{shop}",
    "/api/v1/environments",
    "/api/v1/identities",
    "/api/v1/identity-findings",
    "/api/v1/certificates",
    "/api/v1/jobs",
    "/api/v1/priorities",
    "/api/v1/ranking-runs",
    "/api/v1/replay-runs",
]
PAGES = [
    "/",
    "/findings/",
    "/findings/{mine}/",
    "/audit/",
    "/audit/chain/",
    "/projects/",
    "/projects/{shop}/",
    "/services/",
    "/identities/",
    "/identities/policies/",
    "/jobs/",
    "/clusters/",
    "/replay/",
    "/settings/keys/",
]


@pytest.mark.parametrize("how", ["session", "key"])
@pytest.mark.parametrize("route", READ_ROUTES)
def test_auditor_reads_every_api_listing(auditors, world, how, route):
    url = route.format(mine=world["mine"].pk, shop=world["shop"].pk)
    admin = session(world["admin"]).get(url)
    response = auditors[how].get(url)
    assert admin.status_code == 200, (url, admin.status_code)
    assert response.status_code == 200, (url, response.status_code, response.content[:300])


@pytest.mark.parametrize("route", PAGES)
def test_auditor_reads_every_page(client, world, route):
    url = route.format(mine=world["mine"].pk, shop=world["shop"].pk)
    client.force_login(world["auditor"])
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)


@pytest.mark.parametrize("how", ["session", "key"])
def test_auditor_cannot_triage_comment_upload_or_rank(auditors, world, how):
    client = auditors[how]
    fid = world["mine"].pk
    triage = client.post(f"/api/v1/findings/{fid}/triage",
                         {"state": "false_positive", "reason": "looks fine"}, format="json")
    comment = client.post(f"/api/v1/findings/{fid}/comments", {"body": "hi"}, format="json")
    sbom = client.post("/api/v1/sboms?projectName=shop&projectVersion=2&autoCreate=true",
                       SBOM, content_type="application/vnd.cyclonedx+json")
    rank = client.post("/api/v1/ranking-runs", {}, format="json")
    for response in (triage, comment, sbom, rank):
        assert response.status_code == 403, (response.status_code, response.content[:300])
    assert Finding.objects.get(pk=fid).state == "in_triage"
    assert not Comment.objects.exists()
    assert AuditEvent.objects.filter(team=world["mine"].team).count() == 1


def test_auditor_session_cannot_triage_or_comment_on_the_pages(client, world):
    client.force_login(world["auditor"])
    fid = world["mine"].pk
    triage = client.post(f"/findings/{fid}/triage", {"state": "false_positive", "reason": "x"})
    comment = client.post(f"/findings/{fid}/comment", {"body": "hi"})
    assert triage.status_code == 403 and comment.status_code == 403
    assert Finding.objects.get(pk=fid).state == "in_triage" and not Comment.objects.exists()
    page = client.get(f"/findings/{fid}/").content.decode()
    assert f'action="/findings/{fid}/triage"' not in page


def test_auditor_cannot_issue_or_revoke_keys_but_sees_them(client, world, team, other_team):
    existing = api_key_issue(team=team, name="ci-uploader", scopes=["sbom:write"]).api_key
    api_key_issue(team=other_team, name="their-key", scopes=["read"])
    client.force_login(world["auditor"])
    page = client.post("/settings/keys/", {"team": team.pk, "name": "mine",
                                           "scopes": ["audit:read"]})
    html = page.content.decode()
    assert page.status_code == 200 and "Only team admins manage keys" in html
    assert "ci-uploader" in html and "sbom:write" in html and "their-key" not in html
    assert "/revoke/" not in html
    revoke = client.post(f"/settings/keys/{existing.pk}/revoke/")
    assert revoke.status_code == 404
    assert sorted(ApiKey.objects.values_list("name", "revoked_at")) == [
        ("ci-uploader", None), ("their-key", None)]


def test_admin_issues_an_audit_read_key_on_the_keys_page(client, world, team):
    client.force_login(world["admin"])
    form = client.get("/settings/keys/").content.decode()
    assert 'value="audit:read"' in form
    page = client.post("/settings/keys/", {"team": team.pk, "name": "external audit",
                                           "scopes": ["audit:read"]})
    assert page.status_code == 200
    key = ApiKey.objects.get(name="external audit")
    assert key.scopes == ["audit:read"]
    secret = page.context["issued"].secret
    assert secret in page.content.decode()
    auditor = APIClient()
    auditor.credentials(HTTP_X_API_KEY=secret)
    assert auditor.get("/api/v1/audit-events").json()["count"] == 1
    assert auditor.get("/api/v1/findings").status_code == 200
    assert auditor.post(f"/api/v1/findings/{world['mine'].pk}/triage",
                        {"state": "false_positive", "reason": "x"},
                        format="json").status_code == 403


@pytest.mark.parametrize("how", ["session", "key"])
def test_auditor_sees_nothing_of_another_team(auditors, world, how):
    client = auditors[how]
    theirs = world["theirs"]
    assert client.get(f"/api/v1/findings/{theirs.pk}").status_code == 404
    titles = [f["title"] for f in client.get("/api/v1/findings").json()["results"]]
    assert titles == ["my expired cert"]
    events = client.get("/api/v1/audit-events").json()
    assert [e["reason"] for e in events["results"]] == ["my expired cert"]
    assert client.get(f"/api/v1/audit-events?team={theirs.team_id}").json()["count"] == 0
    assert client.get(f"/api/v1/audit-events?finding={theirs.pk}").json()["count"] == 0


def test_auditor_pages_show_nothing_of_another_team(client, world, other_team):
    client.force_login(world["auditor"])
    assert client.get(f"/findings/{world['theirs'].pk}/").status_code == 404
    for url in ("/findings/", "/audit/", "/audit/chain/"):
        html = client.get(url).content.decode()
        assert "their expired cert" not in html and other_team.name not in html, url
    assert "my expired cert" in client.get("/audit/").content.decode()


def test_auditor_session_cannot_upload_or_rank_on_the_pages(client, world, team):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from ingest.models import IngestJob
    from trustrank.ranking.models import RankingRun
    from trustrank.runtime.models import Environment

    client.force_login(world["auditor"])
    pem = SimpleUploadedFile("c.pem", b"-----BEGIN CERTIFICATE-----\nMIIB\n"
                                      b"-----END CERTIFICATE-----\n")
    upload = client.post("/identities/upload/", {"kind": "cert", "cert-file": pem,
                                                 "cert-environment": "prod"})
    rank = client.post("/priorities/rank", {"team": team.pk})
    assert upload.status_code == 403 and rank.status_code == 403
    assert not IngestJob.objects.exists() and not RankingRun.objects.exists()
    assert not Environment.objects.exists()
