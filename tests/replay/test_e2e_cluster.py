"""End to end: a kubectl List posted to gunicorn is stored and diagnosed by a real Celery
worker; a replay of that cluster, started by the API and by the page, runs on the worker
and its result (semantic priorities from the cluster's recommendations) shows on the run
row, in the API and on the page."""

from __future__ import annotations

import pytest
import requests

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for
from trustrank.accounts.models import Role
from trustrank.cluster.models import Cluster, ClusterWorkload, ReplayRun, ReplayStatus

from .cluster_build import contended_objects

pytestmark = pytest.mark.e2e


def _jobs_done() -> bool:
    jobs = list(IngestJob.objects.all())
    failed = [j.error for j in jobs if j.status == JobStatus.FAILED]
    assert not failed, failed
    return bool(jobs) and all(j.status == JobStatus.DONE for j in jobs)


def _finished(run_id: int):
    def check():
        run = ReplayRun.objects.get(pk=run_id)
        return run if run.is_finished else None

    return check


def test_replay_of_a_stored_cluster_runs_on_the_worker(
    web_server, start_worker, team, other_team, make_key, make_user, client
):
    start_worker(TRUSTRANK_CLUSTER_DIAGNOSE_DEBOUNCE_SECONDS="0")
    key = make_key(team, "metrics:write", "admin", "read")
    headers = {"Authorization": f"Bearer {key}"}
    response = requests.post(
        f"{web_server.url}/api/v1/clusters/lab/objects", data=contended_objects(),
        headers={**headers, "Content-Type": "application/json"}, timeout=30,
    )
    assert response.status_code == 202, response.text
    wait_for(_jobs_done, timeout=90)
    cluster = Cluster.objects.get(team=team, name="lab")
    # The worker's debounced diagnosis stores the recommendations the replay reads.
    wait_for(lambda: ClusterWorkload.objects.filter(
        cluster=cluster, key="ml/Deployment/web").exists(), timeout=90)

    started = requests.post(
        f"{web_server.url}/api/v1/replay-runs", headers=headers, timeout=30,
        json={"cluster": "lab", "mode": "timeline", "placement": "best_fit"},
    )
    assert started.status_code == 202, started.text
    run = wait_for(_finished(started.json()["id"]), timeout=120)
    assert run.status == ReplayStatus.DONE, run.error
    assert run.cluster_id == cluster.pk
    result = run.result
    assert result["semantic_source"] == "cluster recommendations"
    assert result["input"]["recommendations"]["from"] == "stored diagnosis"
    assert result["trace"] == {"pods": 4, "nodes": 1, "gpus": 1}
    semantic = result["strategies"]["semantic_aware"]["start_order"]
    static = result["strategies"]["static_weight_rr"]["start_order"]
    assert semantic.index("ml/web-5d9f-abcde") < semantic.index("ml/train-0")
    assert static.index("ml/train-0") < static.index("ml/web-5d9f-abcde")
    detail = requests.get(f"{web_server.url}{started.json()['status_url']}", headers=headers,
                          timeout=30).json()
    assert detail["cluster"] == "lab" and detail["status"] == "done"

    # The page: choose the cluster, the worker runs it, the page shows the result.
    client.force_login(make_user("lead", team=team, role=Role.ADMIN))
    response = client.post("/replay/", {
        "cluster": "lab", "mode": "timeline", "seeds": 1, "placement": "best_fit",
        "compress": 1, "node_fraction": 1,
    })
    assert response.status_code == 302
    page_run = ReplayRun.objects.exclude(pk=run.pk).get()
    finished = wait_for(_finished(page_run.pk), timeout=120)
    assert finished.status == ReplayStatus.DONE, finished.error
    html = client.get(f"/replay/{page_run.pk}/").content.decode()
    assert "cluster lab's stored pods and nodes" in html
    assert "cluster recommendations" in html and "ml/web-5d9f-abcde" in html

    # Another team sees neither run nor the cluster.
    outsider = make_key(other_team, "admin", "read")
    assert requests.get(f"{web_server.url}/api/v1/replay-runs/{run.pk}", timeout=30,
                        headers={"Authorization": f"Bearer {outsider}"}).status_code == 404
    refused = requests.post(f"{web_server.url}/api/v1/replay-runs", timeout=30,
                            headers={"Authorization": f"Bearer {outsider}"},
                            json={"cluster": "lab", "mode": "timeline"})
    assert refused.status_code == 400
    assert ReplayRun.objects.count() == 2
