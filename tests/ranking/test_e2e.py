"""The source document's story end to end, through the public API, a real Celery worker
and PostgreSQL: feeds, SBOMs that name their services, SPIFFE certificates and OTLP traces
go in; a ranking run ranks Log4Shell in the internet-facing payment gateway first and the
etcd that only its local agent calls low, and the priorities API says why."""

from __future__ import annotations

import shutil
from io import StringIO

import pytest
from django.core.management import call_command

from tests.conftest import DATA

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_shop_story(live_server, celery_worker, team, make_key, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    data = tmp_path / "data"
    shutil.copytree(DATA / "demo", data / "demo")
    (data / "advisories" / "kev").mkdir(parents=True)
    shutil.copy(DATA / "advisories" / "kev" / "known_exploited_vulnerabilities.json",
                data / "advisories" / "kev")
    key = make_key(team, "sbom:write", "traces:write", "certs:write", "read", "triage",
                   "admin", "feeds:write")

    out = StringIO()
    call_command("demo_load", "--url", live_server.url, "--key", key, "--data", str(data),
                 stdout=out)
    text = out.getvalue()
    assert "ranking run" in text and ": done" in text, text

    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_X_API_KEY=key)
    queue = api.get("/api/v1/priorities?environment=shop&page_size=100").json()["results"]
    assert queue, text
    first = queue[0]
    assert (first["vuln_id"], first["decision"], first["service"]) == (
        "CVE-2021-44228", "immediate", "payment-gateway",
    )
    assert first["exposure"] == "open" and first["reachability"] == "observed"
    assert first["exploitation"] == "active" and first["path"][0] == "internet"
    assert {f["name"] for f in first["explanation"]} >= {"exploitation", "exposure",
                                                         "reachability"}
    etcd = next(r for r in queue if r["vuln_id"] == "CVE-2018-16886")
    assert etcd["exposure"] == "small" and etcd["rank"] > len(queue) // 2
    # The expired certificate of the internet-facing storefront is in the same queue, above
    # the scheduled vulnerabilities.
    expired = next(r for r in queue if r["kind"] == "identity")
    assert expired["service"] == "storefront" and expired["decision"] == "out-of-cycle"
