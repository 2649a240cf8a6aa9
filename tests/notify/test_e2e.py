"""Webhooks end to end: HTTP (gunicorn) → PostgreSQL → a real Celery worker → local receivers.
A team admin adds webhooks through the API; a real ranking run, a KEV import and a failed
ingest job emit their events; the receivers verify each signature with the secret."""

from __future__ import annotations

import io

import orjson
import pytest
import requests
from django.core.management import call_command

from ingest.models import IngestJob
from tests.conftest import WebServer, wait_for
from tests.notify.helpers import Receiver
from tests.vulns.helpers import ADVISORIES, SBOMS
from trustrank.findings.models import Finding
from trustrank.notify.models import Delivery
from trustrank.ranking.models import RankingRun

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ENV = {
    "TRUSTRANK_OUTBOUND_ALLOW_PRIVATE": "1",
    "TRUSTRANK_WEBHOOK_RETRY_BASE_SECONDS": "0.5",
    # Runs start when the test asks for them.
    "TRUSTRANK_RANKING_DEBOUNCE_SECONDS": "600",
}
SECRET = "e2e-secret"
KEV = {
    "catalogVersion": "2025.09.01",
    "vulnerabilities": [{
        "cveID": "CVE-2022-1471", "vendorProject": "SnakeYAML", "product": "SnakeYAML",
        "vulnerabilityName": "SnakeYAML deserialization", "dateAdded": "2025-09-01",
    }],
}


def _run(base: str, headers: dict[str, str]) -> int:
    resp = requests.post(f"{base}/api/v1/ranking-runs", json={}, headers=headers, timeout=30)
    assert resp.status_code == 202, resp.text
    run_id = int(resp.json()["id"])
    wait_for(lambda: RankingRun.objects.filter(pk=run_id, status="done").exists(), timeout=120)
    return run_id


def test_ranking_kev_and_failed_jobs_reach_the_webhooks_signed(
    team, make_key, start_worker, tmp_path
):
    server = WebServer(log_path=tmp_path / "gunicorn.log", extra_env=ENV)
    findings_rx, kev_rx, jobs_rx = Receiver(answers=[500]), Receiver(), Receiver()
    try:
        start_worker(**ENV)
        base = server.url
        headers = {"X-Api-Key": make_key(team, "admin", "sbom:write", "read", "triage")}
        for rx, events, fmt in [
            (findings_rx, ["finding.decision_changed", "finding.immediate"], "json"),
            (kev_rx, ["feed.kev_added"], "slack"),
            (jobs_rx, ["job.failed"], "json"),
        ]:
            resp = requests.post(f"{base}/api/v1/webhooks", json={
                "url": rx.url, "events": events, "secret": SECRET, "format": fmt,
            }, headers=headers, timeout=30)
            assert resp.status_code == 201, resp.text
            assert SECRET not in resp.text

        # Findings: advisories, then an SBOM; the first run ranks them.
        call_command("import_feed", "osv", str(ADVISORIES / "osv" / "maven"), "--wait",
                     "--timeout", "120", stdout=io.StringIO())
        resp = requests.post(
            f"{base}/api/v1/sboms?projectName=dropwizard&projectVersion=1.3.15&autoCreate=true",
            data=(SBOMS / "cdx-1.2_maven_dropwizard-1.3.15.xml").read_bytes(),
            headers={**headers, "Content-Type": "application/xml"}, timeout=60,
        )
        assert resp.status_code == 202, resp.text
        wait_for(lambda: Finding.objects.filter(team=team).count() == 5, timeout=90)
        _run(base, headers)
        snake = Finding.objects.get(team=team, vuln_id="CVE-2022-1471")
        before = snake.ranked.decision

        # KEV lists SnakeYAML's CVE: the team hears of it, and the next run changes its
        # decision.
        feeds = {"X-Api-Key": make_key(team, "feeds:write")}
        resp = requests.post(f"{base}/api/v1/feeds/kev", data=orjson.dumps(KEV),
                             headers={**feeds, "Content-Type": "application/json"}, timeout=30)
        assert resp.status_code == 202, resp.text
        wait_for(lambda: kev_rx.count >= 1, timeout=90)
        kev_msg = kev_rx.requests[0]
        assert kev_msg.signed_by(SECRET) and kev_msg.headers["X-TrustRank-Event"] == (
            "feed.kev_added")
        assert "CVE-2022-1471" in orjson.dumps(kev_msg.json).decode()
        assert kev_msg.json["text"] and kev_msg.json["blocks"]

        run_id = _run(base, headers)
        snake.ranked.refresh_from_db()
        assert snake.ranked.decision != before
        wait_for(lambda: any(r.json.get("finding_id") == snake.pk and r.json.get("ranking_run")
                             == run_id for r in findings_rx.requests[1:]), timeout=90)
        got = [r for r in findings_rx.requests if r.json.get("ranking_run") == run_id]
        assert all(r.signed_by(SECRET) for r in got)
        change = next(r.json for r in got if r.json["finding_id"] == snake.pk
                      and r.json["event"] == "finding.decision_changed")
        assert (change["previous_decision"], change["decision"]) == (
            before, snake.ranked.decision)
        assert change["vuln_id"] == "CVE-2022-1471" and change["rank"] >= 1
        assert change["project"] == "dropwizard" and change["version"] == "1.3.15"
        assert "snakeyaml" in change["component"] and change["explanation"]
        assert change["finding_url"].endswith(f"/findings/{snake.pk}/")
        # The receiver answered 500 once: that delivery was tried again and delivered.
        retried = Delivery.objects.get(uuid=findings_rx.requests[0].headers[
            "X-TrustRank-Delivery"])
        wait_for(lambda: Delivery.objects.get(pk=retried.pk).status == "delivered", timeout=30)
        assert Delivery.objects.get(pk=retried.pk).attempts == 2

        # Bad input reaching the worker (past the receiver's checks, as in the ingest
        # tests): its ingest job fails, and the team hears of it.
        from ingest.services import job_create
        from trustrank.accounts.principal import principal_for_key
        from trustrank.accounts.services import api_key_issue

        principal = principal_for_key(
            api_key_issue(team=team, name="ci", scopes=["sbom:write"]).api_key)
        bad = job_create(team=team, kind="sbom", payload=b"<bom/>", principal=principal,
                         params={"projectName": "x", "autoCreate": True})
        wait_for(lambda: jobs_rx.count >= 1, timeout=90)
        body = jobs_rx.requests[0].json
        assert jobs_rx.requests[0].signed_by(SECRET) and body["event"] == "job.failed"
        assert body["job"]["id"] == str(bad.pk) and body["job"]["kind"] == "ingest"
        assert "not a CycloneDX BOM" in body["job"]["error"]
        assert IngestJob.objects.get(pk=bad.pk).status == "failed"
    finally:
        server.stop()
        for rx in (findings_rx, kev_rx, jobs_rx):
            rx.stop()
