"""`manage.py demo_load`: the demo's samples go in through the public HTTP API, processed
by a real worker, and a second run sends nothing twice."""

from __future__ import annotations

import shutil
from io import StringIO
from typing import Any

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


def test_demo_load_sends_a_gpu_cluster_whose_pages_have_data(
    live_server, celery_worker, team, make_key, tmp_path, settings, client, make_user
):
    """The GPU cluster goes in through the cluster receivers (objects, scrapes over the last
    hour) and comes out as workloads with GPUs, a priorities comparison and GPU lines."""
    from datetime import timedelta

    from django.utils import timezone

    from ingest import demo_cluster
    from trustrank.cluster.models import Cluster, ClusterWorkload
    from trustrank.cluster.selectors import gpu_lines

    settings.VAR_DIR = tmp_path
    data = tmp_path / "data"
    (data / "demo").mkdir(parents=True)
    for name in (demo_cluster.OBJECTS_FILE, *demo_cluster.SCRAPE_FILES):
        shutil.copy(DATA / "demo" / name, data / "demo")
    key = make_key(team, "metrics:write", "read")

    out = StringIO()
    call_command("demo_load", "--url", live_server.url, "--key", key, "--data", str(data),
                 stdout=out)
    text = out.getvalue()
    assert "24 scrapes" in text and "24 stored" in text and "diagnosed:" in text, text

    cluster = Cluster.objects.get(team=team, name=demo_cluster.CLUSTER)
    body = _api_get(live_server.url, key, "/api/v1/clusters/demo-gpu/workloads")
    rows = {row["key"]: row for row in body["results"]}
    assert sum(1 for row in rows.values() if row["gpus"] > 0) >= 4
    assert any(row["disagrees"] for row in rows.values())
    vllm = rows["inference/Deployment/vllm-chat"]
    assert vllm["gpus"] == 2 and vllm["tier"].startswith("latency")
    assert "inference server" in vllm["reasons"][0]["detail"]
    assert rows["training/PyTorchJob/llama-finetune"]["gpus"] == 4
    assert ClusterWorkload.objects.filter(cluster=cluster, gpus__gt=0).exists()

    util, fi, seen = gpu_lines(cluster=cluster, since=timezone.now() - timedelta(hours=2))
    assert seen == 8 and util and fi
    assert all(len(points) >= 2 for points in util.values())
    assert "/gpu" not in util and all(label.startswith("ip-10-0-1-") for label in util)

    client.force_login(make_user("ann", team=team))
    page = client.get("/clusters/demo-gpu/").content.decode()
    assert 'class="priorities-chart"' in page and page.count('class="line"') >= 2
    assert "9 pods stored, 7 request a GPU" in page
    # Issue 24: the list a newcomer opens first draws both charts too.
    listing = client.get("/clusters/").content.decode()
    assert 'aria-label="Cluster demo-gpu"' in listing
    assert 'class="priorities-chart"' in listing and listing.count('class="line"') >= 2

    again = StringIO()
    call_command("demo_load", "--url", live_server.url, "--key", key, "--data", str(data),
                 stdout=again)
    assert "already loaded" in again.getvalue() and "diagnosed:" in again.getvalue()


def _api_get(base: str, key: str, path: str) -> dict[str, Any]:
    import json
    import urllib.request

    request = urllib.request.Request(base + path, headers={"X-Api-Key": key})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())
