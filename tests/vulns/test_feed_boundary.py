"""The tenant boundary on shared reference data: the attacks a team admin could run through
the feed endpoints, replayed, and shown to fail."""

from __future__ import annotations

import io
from datetime import timedelta

import orjson
import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from ingest.models import IngestJob, JobKind
from tests.vulns.helpers import ADVISORIES, bom, import_osv, load_sbom, osv, run_job
from trustrank.accounts.models import SITE_SCOPES, ApiKey
from trustrank.accounts.services import InvalidScope, api_key_issue
from trustrank.findings.models import Finding
from trustrank.vulns.models import Advisory, KevEntry

pytestmark = pytest.mark.django_db

LODASH = ("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")
EVENTS = [{"introduced": "0"}, {"fixed": "4.17.19"}]
REAL = osv("GHSA-aaaa-bbbb-cccc", "npm", "lodash", EVENTS, aliases=["CVE-2020-8203"])


def _future(days: int = 3650) -> str:
    return (timezone.now() + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("scopes", [("admin",), ("admin", "read", "triage", "sbom:write")])
def test_a_team_admin_key_cannot_change_any_feed(team, api, scopes):
    client = api(team, *scopes)
    for kind in ("osv", "kev", "epss"):
        response = client.post(f"/api/v1/feeds/{kind}", b"{}", content_type="application/json")
        assert response.status_code == 403, (kind, response.content)
    assert not IngestJob.objects.filter(kind__in=["osv", "kev", "epss"]).exists()


def test_a_team_admin_cannot_mint_a_feeds_key_on_the_web_or_through_the_service(
    team, make_user
):
    for scope in SITE_SCOPES:
        with pytest.raises(InvalidScope):
            api_key_issue(team=team, name="sneaky", scopes=[scope])
    client = Client()
    client.force_login(make_user("boss", team=team, role="admin"))
    response = client.post(
        "/settings/keys/", {"team": team.pk, "name": "sneaky", "scopes": ["feeds:write"]}
    )
    assert response.status_code < 500
    assert not any("feeds:write" in k.scopes for k in ApiKey.objects.all())


def test_only_the_command_line_grants_feeds_write(team):
    out = io.StringIO()
    call_command("issue_api_key", "--team", team.name, "--scope", "feeds:write", stdout=out,
                 stderr=io.StringIO())
    key = ApiKey.objects.get(team=team)
    assert key.scopes == ["feeds:write"]
    response = Client().post("/api/v1/feeds/osv", orjson.dumps([REAL]),
                             content_type="application/json",
                             HTTP_X_API_KEY=out.getvalue().strip().splitlines()[-1])
    assert response.status_code == 202


def test_withdrawing_through_a_far_future_modified_is_refused(team, other_team):
    import_osv(team, [REAL])
    pv = load_sbom(other_team, bom([LODASH]))
    assert Finding.objects.filter(project_version=pv).count() == 1
    attack = dict(REAL, modified=_future(), withdrawn=_future())
    job = import_osv(team, [attack])
    assert job.status == "done"
    assert job.counts["refused_future"] == 1
    assert "in the future" in job.result["refused"][0]
    advisory = Advisory.objects.get(pk=REAL["id"])
    assert advisory.withdrawn is None and advisory.modified.year < 2100
    # The genuine record still updates.
    genuine = dict(REAL, modified="2025-02-01T00:00:00Z", summary="genuine update")
    assert import_osv(team, [genuine]).counts["updated"] == 1


def test_a_future_published_date_is_refused_too(team):
    job = import_osv(team, [dict(REAL, published=_future(30))])
    assert job.counts["refused_future"] == 1
    assert not Advisory.objects.exists()


def _kev(version: str, cves: list[str], released: str = "") -> bytes:
    doc: dict[str, object] = {
        "catalogVersion": version,
        "vulnerabilities": [
            {"cveID": c, "vendorProject": "v", "product": "p", "vulnerabilityName": c,
             "dateAdded": "2024-01-01"}
            for c in cves
        ],
    }
    if released:
        doc["dateReleased"] = released
    return orjson.dumps(doc)


def test_a_kev_catalog_from_the_future_is_refused(team):
    real = (ADVISORIES / "kev" / "known_exploited_vulnerabilities.json").read_bytes()
    assert run_job(team, "kev", real).status == "done"
    before = KevEntry.objects.count()
    for attack in (_kev("2099.01.01", ["CVE-2099-0001"]),
                   _kev("2025.01.01", ["CVE-2099-0001"], released=_future())):
        job = run_job(team, "kev", attack, params={"allow_shrink": True})
        assert job.status == "failed" and "future" in job.error
    assert KevEntry.objects.count() == before
    assert run_job(team, "kev", real).status == "done"


def test_a_kev_catalog_that_drops_most_entries_needs_allow_shrink(team):
    many = [f"CVE-2024-{i:04d}" for i in range(1, 11)]
    assert run_job(team, "kev", _kev("2025.01.01", many)).status == "done"
    job = run_job(team, "kev", _kev("2025.01.02", many[:1]))
    assert job.status == "failed" and "allow-shrink" in job.error
    assert KevEntry.objects.count() == 10
    assert run_job(team, "kev", _kev("2025.01.02", many[:6])).status == "done"
    job = run_job(team, "kev", _kev("2025.01.03", many[:1]), params={"allow_shrink": True})
    assert job.status == "done" and KevEntry.objects.count() == 1


def test_import_feed_allow_shrink_flag_reaches_the_job(team, tmp_path):
    path = tmp_path / "kev.json"
    path.write_bytes(_kev("2025.01.01", ["CVE-2024-0001"]))
    call_command("import_feed", "kev", str(path), "--allow-shrink", stdout=io.StringIO())
    assert IngestJob.objects.get(kind="kev").params["allow_shrink"] is True


def test_an_epss_file_dated_in_the_future_is_refused(team):
    day = (timezone.now() + timedelta(days=30)).date().isoformat()
    body = (f"#model_version:v2025.03.14,score_date:{day}T00:00:00Z\n"
            "cve,epss,percentile\nCVE-2020-8203,0.9,0.99\n").encode()
    job = run_job(team, "epss", body)
    assert job.status == "failed" and "future" in job.error


def test_feed_jobs_of_another_team_show_nothing_about_who_ran_them(team, other_team, api,
                                                                  make_user):
    job = run_job(other_team, "osv", orjson.dumps([REAL]), filename="secret-name.json")
    IngestJob.objects.filter(pk=job.pk).update(requested_by_label="api-key:intruder-ci")
    client = api(team, "read")
    listed = client.get("/api/v1/jobs").json()["results"]
    shown = client.get(f"/api/v1/jobs/{job.pk}").json()
    for row in (next(r for r in listed if r["id"] == str(job.pk)), shown):
        assert row["kind"] == JobKind.OSV
        assert row["team"] is None and row["submitter_label"] == "" and row["filename"] == ""
    person = Client()
    person.force_login(make_user("reader", team=team, role="viewer"))
    for url in ("/jobs/", f"/jobs/{job.pk}/"):
        page = person.get(url).content.decode()
        assert other_team.name not in page and "intruder-ci" not in page, url
        assert "secret-name" not in page, url
    # The team that ran it still sees everything.
    own = api(other_team, "read").get(f"/api/v1/jobs/{job.pk}").json()
    assert own["team"] == other_team.name and own["submitter_label"] == "api-key:intruder-ci"
