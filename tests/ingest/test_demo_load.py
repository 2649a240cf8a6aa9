"""`manage.py demo_load`: the demo's samples go in through the public HTTP API, processed
by a real worker, and a second run sends nothing twice."""

from __future__ import annotations

import shutil
from io import StringIO

import pytest
from django.core.management import call_command

from tests.conftest import DATA
from trustrank.inventory.models import Sbom
from trustrank.vulns.models import KevEntry

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_demo_load_sends_samples_through_the_api(
    live_server, celery_worker, team, make_key, tmp_path, settings
):
    settings.VAR_DIR = tmp_path
    data = tmp_path / "data"
    (data / "sbom").mkdir(parents=True)
    shutil.copy(DATA / "sbom" / "cdx-1.6_dt-valid-bom.json", data / "sbom")
    (data / "advisories" / "kev").mkdir(parents=True)
    shutil.copy(DATA / "advisories" / "kev" / "known_exploited_vulnerabilities.json",
                data / "advisories" / "kev")
    key = make_key(team, "sbom:write", "traces:write", "certs:write", "read", "admin",
                   "feeds:write")

    out = StringIO()
    call_command("demo_load", "--url", live_server.url, "--key", key, "--data", str(data),
                 stdout=out)
    text = out.getvalue()
    assert "POST /api/v1/sboms" in text and "POST /api/v1/feeds" in text, text
    assert text.count(": done") == 2, text
    assert Sbom.objects.filter(project_version__project__team=team).count() == 1
    assert KevEntry.objects.exists()

    again = StringIO()
    call_command("demo_load", "--url", live_server.url, "--key", key, "--data", str(data),
                 stdout=again)
    assert "already loaded" in again.getvalue() and "already imported" in again.getvalue()
