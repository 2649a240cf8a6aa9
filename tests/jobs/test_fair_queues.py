"""Fair queues: batch work runs in bounded slots shared fairly among teams, interactive work
never waits behind it, and a team's burst is refused past its queue limit with 429."""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.conftest import wait_for
from trustrank.accounts.models import Team
from trustrank.cluster.models import ReplayRun
from trustrank.jobs.claim import batch_claim, batch_next
from trustrank.jobs.models import JobClass, JobStatus
from trustrank.ranking.models import RankingRun

from ..replay.helpers import NODES, PODS


def _replay(team: Team, **fields: Any) -> ReplayRun:
    return ReplayRun.objects.create(team=team, mode="inflation", parameters={}, **fields)


@pytest.mark.django_db
def test_the_next_batch_job_is_the_least_recently_served_teams(team, other_team):
    # Team B ("payments") queued three replays long ago; team C queued one just now.
    old = timezone.now() - timedelta(minutes=10)
    b_runs = [_replay(team, created_at=old + timedelta(seconds=i)) for i in range(3)]
    c_run = _replay(other_team)
    # B was served a minute ago (a finished batch job); C never.
    _replay(team, status=JobStatus.DONE, started_at=timezone.now() - timedelta(minutes=1))
    assert batch_next() == ("replay_run", str(c_run.pk))
    # Once C runs, C is at its per-team slot: B's oldest is next.
    ReplayRun.objects.filter(pk=c_run.pk).update(
        status=JobStatus.RUNNING, started_at=timezone.now(),
        lease_until=timezone.now() + timedelta(minutes=5),
    )
    assert batch_next() == ("replay_run", str(b_runs[0].pk))


@pytest.mark.django_db
def test_batch_slots_bound_what_runs_at_once(team, other_team, settings):
    settings.TRUSTRANK_JOBS_BATCH_SLOTS = 1
    _replay(team, status=JobStatus.RUNNING, started_at=timezone.now(),
            lease_until=timezone.now() + timedelta(minutes=5))
    _replay(other_team)
    # The one slot is taken: the other team's replay waits (nothing is claimed).
    assert batch_claim() is None
    settings.TRUSTRANK_JOBS_BATCH_SLOTS = 2
    claimed = batch_claim()
    assert claimed is not None and claimed[1].team_id == other_team.pk
    assert claimed[1].status == JobStatus.RUNNING and claimed[1].attempts == 1


@pytest.mark.django_db
def test_a_running_job_whose_worker_died_frees_its_slot(team, other_team, settings):
    settings.TRUSTRANK_JOBS_BATCH_SLOTS = 1
    _replay(team, status=JobStatus.RUNNING, started_at=timezone.now(),
            lease_until=timezone.now() - timedelta(seconds=1))
    waiting = _replay(other_team)
    claimed = batch_claim()
    assert claimed is not None and claimed[1].pk == waiting.pk


@pytest.mark.django_db
def test_batch_kinds_share_the_slots_and_a_debounced_run_is_not_ready(team, settings):
    settings.TRUSTRANK_JOBS_BATCH_SLOTS = 2
    RankingRun.objects.create(team=team, job_class=JobClass.BATCH,
                              not_before=timezone.now() + timedelta(hours=1))
    assert batch_next() is None  # its debounce delay has not passed
    run = RankingRun.objects.create(team=team, job_class=JobClass.BATCH)
    assert batch_next() == ("ranking_run", str(run.pk))


def _replay_post(client: Any, pods: bytes, nodes: bytes) -> Any:
    return client.post(
        "/api/v1/replay-runs",
        {"mode": "inflation", "seeds": 1, "strategies": ["best_fit"],
         "pods": _file("pods.csv", pods), "nodes": _file("nodes.csv", nodes)},
        format="multipart",
    )


def _file(name: str, data: bytes) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data, content_type="text/csv")


def _head(path: Any, rows: int) -> bytes:
    return b"\n".join(path.read_bytes().splitlines()[: rows + 1]) + b"\n"


@pytest.mark.django_db
def test_a_teams_burst_past_its_queue_limit_is_answered_429(team, other_team, api, settings):
    settings.TRUSTRANK_JOBS_QUEUED_MAX_PER_TEAM = {"replay_run": 2}
    pods, nodes = _head(PODS, 40), _head(NODES, 10)
    client = api(team, "admin", "read")
    assert [_replay_post(client, pods, nodes).status_code for _ in range(2)] == [202, 202]
    refused = _replay_post(client, pods, nodes)
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert "queued replay run" in refused.json()["detail"]
    assert ReplayRun.objects.filter(team=team).count() == 2  # nothing stored for the 429
    # Another team's queue is its own.
    assert _replay_post(api(other_team, "admin", "read"), pods, nodes).status_code == 202


def test_interactive_work_is_not_delayed_by_another_teams_batch_burst(
    transactional_db, team, other_team, make_key, start_worker, web_server
):
    """Two workers; team B's replays are slow and keep the one batch slot busy; team A's
    SBOM is done within a few seconds all the same, and B's replays all finish later."""
    import requests

    slow = {"TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS": "0.5", "TRUSTRANK_SWEEP_SECONDS": "2"}
    start_worker(beat=True, **slow)
    start_worker(**slow)
    b = requests.Session()
    b.headers["X-Api-Key"] = make_key(other_team, "admin", "read")
    pods, nodes = _head(PODS, 300), _head(NODES, 40)
    runs = []
    for _ in range(3):
        response = b.post(
            f"{web_server.url}/api/v1/replay-runs",
            data={"mode": "inflation", "seeds": "2", "strategies": ["best_fit", "fgd"]},
            files={"pods": ("pods.csv", pods), "nodes": ("nodes.csv", nodes)}, timeout=30,
        )
        assert response.status_code == 202, response.text
        runs.append(response.json()["id"])
    wait_for(lambda: ReplayRun.objects.filter(status=JobStatus.RUNNING).exists(), timeout=30)
    a = requests.Session()
    a.headers["X-Api-Key"] = make_key(team, "sbom:write", "read")
    bom = {"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1, "components": [
        {"type": "library", "name": f"lib{i}", "version": "1.0.0",
         "purl": f"pkg:npm/lib{i}@1.0.0"} for i in range(50)]}
    started = time.monotonic()
    response = a.post(
        f"{web_server.url}/api/v1/sboms?projectName=shop&projectVersion=1&autoCreate=true",
        data=json.dumps(bom), headers={"Content-Type": "application/json"}, timeout=30,
    )
    assert response.status_code == 202, response.text
    status_url = web_server.url + response.json()["status_url"]
    job = wait_for(lambda: (lambda j: j if j["status"] in ("done", "failed") else None)(
        a.get(status_url, timeout=10).json()), timeout=30, interval=0.05)
    waited = time.monotonic() - started
    assert job["status"] == "done", job
    # B's replays were still queued or running: A did not wait behind them.
    assert ReplayRun.objects.filter(pk__in=runs).exclude(status=JobStatus.DONE).exists()
    # A's job was taken at once, not when the batch slot came free: a replay of B held the
    # slot when A's job started, and A's wait in the queue is short.
    a_created, a_started = (datetime.fromisoformat(job[name]) for name in ("created_at", "started_at"))
    queued = (a_started - a_created).total_seconds()
    assert queued < 2, f"A's SBOM waited {queued:.1f} s in the queue behind B's replays"
    assert ReplayRun.objects.filter(pk__in=runs, started_at__lte=a_started).exclude(
        finished_at__lte=a_started).exists(), "no replay of B held the slot when A's job started"
    # The whole turn, upload to done, stays short too (a loose bound: the machine is shared).
    assert waited < 15, f"A's SBOM took {waited:.1f} s from upload to done"
    # Every replay of B ends, one batch slot at a time.
    wait_for(lambda: ReplayRun.objects.filter(pk__in=runs, status=JobStatus.DONE).count() == 3,
             timeout=180, interval=0.5)
    spans = sorted(ReplayRun.objects.filter(pk__in=runs).values_list("started_at", "finished_at"))
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
    print("replay seconds:", [round((f - s).total_seconds(), 1) for s, f in spans])
