"""`replay_schedule --json` and the `replay_run` task on a ReplayRun row."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from trustrank.cluster.models import ReplayRun, ReplayStatus
from trustrank.cluster.services import replay_params_validate
from trustrank.cluster.tasks import replay_run

from .helpers import csv_subset

FIELDS = {
    "inflation": {"unallocated_at_100", "unallocated_spread"},
    "timeline": {"p95_delay_s", "violation_rate", "util_fluctuation_pct", "allocation_rate"},
}


@pytest.fixture
def small_trace(tmp_path):
    return csv_subset(pods=1500, nodes=60, tmp=tmp_path)


def test_inflation_json_has_one_entry_per_strategy(small_trace):
    pods, nodes = small_trace
    out = io.StringIO()
    call_command(
        "replay_schedule", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "2",
        "--strategy", "best_fit", "--strategy", "fgd", "--json", stdout=out,
    )
    doc = json.loads(out.getvalue())
    assert doc["mode"] == "inflation"
    assert set(doc["strategies"]) == {"best_fit", "fgd"}
    for row in doc["strategies"].values():
        assert set(row) == FIELDS["inflation"]
        assert 0.0 <= row["unallocated_at_100"] <= 1.0 and row["unallocated_spread"] >= 0.0
    assert "fgd_reduction" in doc


def test_timeline_json_has_one_entry_per_policy(small_trace):
    pods, nodes = small_trace
    out = io.StringIO()
    call_command(
        "replay_schedule", "--pods", str(pods), "--nodes", str(nodes), "--mode", "timeline",
        "--strategy", "best_fit", "--compress", "500", "--json", stdout=out,
    )
    doc = json.loads(out.getvalue())
    assert doc["mode"] == "timeline" and doc["placement"] == "best_fit"
    assert set(doc["strategies"]) == {"static_weight_rr", "gpu_mem_reservation", "semantic_aware"}
    for row in doc["strategies"].values():
        assert set(row) == FIELDS["timeline"]
        assert 0.0 <= row["violation_rate"] <= 1.0 and 0.0 < row["allocation_rate"] <= 1.0


def test_a_bad_trace_is_refused_with_its_line(tmp_path, small_trace):
    _, nodes = small_trace
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\np0,x,1,0,0,,BE,Running,0,1,0\n"
    )
    with pytest.raises(CommandError, match="line 2, column cpu_milli"):
        call_command("replay_schedule", "--pods", str(bad), "--nodes", str(nodes), "--json")


def _run(team, small_trace, **params):
    pods, nodes = small_trace
    return ReplayRun.objects.create(
        team=team,
        mode=params.get("mode", "inflation"),
        parameters=replay_params_validate(**params).to_json(),
        pods_csv=pods.read_bytes(),
        nodes_csv=nodes.read_bytes(),
    )


@pytest.mark.django_db
def test_task_runs_a_queued_row_once(team, small_trace):
    run = _run(team, small_trace, seeds=1, strategies=["best_fit", "fgd"])
    replay_run(run.pk)
    run.refresh_from_db()
    assert run.status == ReplayStatus.DONE and run.error == ""
    assert run.started_at and run.finished_at and run.progress_pct == 100
    assert set(run.result["strategies"]) == {"best_fit", "fgd"}
    assert len(run.result["strategies"]["fgd"]["curve"]) == 131
    finished = run.finished_at
    # A second delivery of the message finds the row taken and changes nothing.
    replay_run(run.pk)
    run.refresh_from_db()
    assert run.finished_at == finished and run.status == ReplayStatus.DONE


@pytest.mark.django_db
def test_task_marks_a_bad_trace_failed(team, small_trace):
    run = _run(team, small_trace, seeds=1)
    ReplayRun.objects.filter(pk=run.pk).update(nodes_csv=b"sn,cpu_milli\nn0,1\n")
    replay_run(run.pk)
    run.refresh_from_db()
    assert run.status == ReplayStatus.FAILED
    assert "missing column" in run.error


@pytest.mark.django_db
def test_task_runs_timeline_mode(team, small_trace):
    run = _run(
        team, small_trace, mode="timeline", placement="best_fit", compress=500,
        policies=["semantic_aware"],
    )
    replay_run(run.pk)
    run.refresh_from_db()
    assert run.status == ReplayStatus.DONE, run.error
    assert set(run.result["strategies"]) == {"semantic_aware"}


def test_timeline_takes_supplied_priorities(tmp_path, small_trace):
    pods, nodes = small_trace
    names = [line.split(",")[0] for line in pods.read_text().splitlines()[1:]]
    hints = tmp_path / "hints.json"
    # Everyone equal: no pair has different priorities, so nothing can be a violation.
    hints.write_text(json.dumps({name: {"priority": 2, "diagnoses": []} for name in names}))
    out = io.StringIO()
    call_command(
        "replay_schedule", "--pods", str(pods), "--nodes", str(nodes), "--mode", "timeline",
        "--strategy", "best_fit", "--compress", "500", "--policy", "semantic_aware",
        "--hints", str(hints), "--json", stdout=out,
    )
    doc = json.loads(out.getvalue())
    assert doc["strategies"]["semantic_aware"]["violation_rate"] == 0.0
    assert doc["semantic_source"] == "supplied hints"


def test_malformed_hints_are_refused():
    with pytest.raises(ValueError, match="priority must be an integer"):
        replay_params_validate(mode="timeline", hints={"p0": {"priority": "high"}})


@pytest.mark.django_db
def test_a_run_whose_worker_died_is_taken_over_after_its_lease(team, small_trace):
    from datetime import timedelta

    from django.utils import timezone

    run = _run(team, small_trace, seeds=1, strategies=["best_fit"])
    live = timezone.now() + timedelta(minutes=5)
    ReplayRun.objects.filter(pk=run.pk).update(
        status=ReplayStatus.RUNNING, lease_until=live, attempts=1
    )
    # Another worker holds it (its lease is live): this delivery leaves it alone.
    assert replay_run(run.pk) == "no batch job to run or no free slot"
    run.refresh_from_db()
    assert run.status == ReplayStatus.RUNNING and run.attempts == 1
    # Its lease lapsed (the worker died): the sweep queues it again, the next delivery
    # runs it to the end.
    lapsed = timezone.now() - timedelta(seconds=1)
    ReplayRun.objects.filter(pk=run.pk).update(lease_until=lapsed)
    from trustrank.jobs.sweep import jobs_sweep

    assert jobs_sweep()["requeued"] == 1
    assert replay_run(run.pk) == "done"
    run.refresh_from_db()
    assert run.status == ReplayStatus.DONE and run.lease_until is None and run.attempts == 2
