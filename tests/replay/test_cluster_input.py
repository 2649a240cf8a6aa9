"""Replaying a team's own cluster: stored pods and nodes in, the cluster issue's recommended
priorities and diagnoses steering the semantic-aware policy; the command, API and page."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from ingest.models import IngestJob, JobStatus
from ingest.services import job_run
from tests.cluster import k8s_build as k8s
from trustrank.accounts.models import Role
from trustrank.accounts.services import membership_set
from trustrank.cluster.models import Cluster, ReplayRun
from trustrank.cluster.services import replay_cluster_compute, replay_params_validate
from trustrank.cluster.services.diagnoses import cluster_diagnose
from trustrank.cluster.services.replay_cluster import (
    FROM_COMPUTED,
    FROM_STORED,
    cluster_replay_input,
    cluster_trace_load,
)
from trustrank.cluster.tasks import replay_run

from .cluster_build import contended_objects, gpu_less_objects, pods_only_objects
from .helpers import csv_subset

pytestmark = pytest.mark.django_db

TIMELINE = {"mode": "timeline", "placement": "best_fit"}


def load(api, team, body: bytes, name: str = "lab") -> Cluster:
    client = api(team, "metrics:write")
    response = client.post(f"/api/v1/clusters/{name}/objects", data=body,
                           content_type="application/json")
    assert response.status_code == 202, response.content
    for job in IngestJob.objects.filter(status=JobStatus.QUEUED):
        job_run(job_id=str(job.pk))
    assert all(j.status == JobStatus.DONE for j in IngestJob.objects.all())
    return Cluster.objects.get(team=team, name=name)


@pytest.fixture
def lab(api, team) -> Cluster:
    return load(api, team, contended_objects())


def order(result, policy: str) -> list[str]:
    return result["strategies"][policy]["start_order"]


def test_stored_pods_and_nodes_become_the_replay_arrays(lab):
    trace = cluster_trace_load(cluster=lab)
    wl, spec = trace.workload, trace.spec
    assert spec.names == ("n1",) and list(spec.gpus) == [1]
    assert list(spec.cpu) == [96_000] and list(spec.mem) == [1024 * 1024]
    assert spec.models == ("NVIDIA-H100-80GB-HBM3",)
    pods = {name: i for i, name in enumerate(wl.names)}
    assert set(pods) == {"ml/warm-0", "ml/train-0", "ml/web-5d9f-abcde", "ops/metrics-0"}
    warm, train, web, metrics = (pods[n] for n in (
        "ml/warm-0", "ml/train-0", "ml/web-5d9f-abcde", "ops/metrics-0"))
    # Creation relative to the earliest pod (metrics-0, an hour before the others).
    assert [int(wl.creation[i]) for i in (metrics, warm, train, web)] == [0, 3600, 3610, 3620]
    # warm-0 ran 10:00:00 -> 10:01:40 (finished); train-0 runs until the snapshot.
    assert int(wl.duration[warm]) == 100
    snapshot = lab.objects_at
    assert int(wl.duration[train]) == pytest.approx(
        (snapshot - trace.origin).total_seconds() - 3700, abs=2)
    assert (wl.num_gpu[warm], wl.gpu_milli[warm]) == (1, 1000)
    assert (wl.num_gpu[metrics], wl.cpu[metrics], wl.mem[metrics]) == (0, 500, 256)
    assert wl.qos[metrics] == "Burstable" and wl.qos[web] == "Guaranteed"
    assert trace.owners[web] == "ml/Deployment/web"
    assert trace.describe()["gpu_pods"] == 3


def test_semantic_policy_starts_the_higher_recommended_pod_first(lab):
    cluster_diagnose(cluster_id=lab.pk)
    params = replay_params_validate(**TIMELINE)
    result = replay_cluster_compute(cluster=lab, params=params)
    assert result["semantic_source"] == "cluster recommendations"
    assert result["input"]["source"] == "cluster" and result["input"]["cluster"] == "lab"
    assert result["input"]["recommendations"]["from"] == FROM_STORED
    semantic, static = order(result, "semantic_aware"), order(result, "static_weight_rr")
    # Equal declared priority (none) and QoS: static weights go by arrival, the semantic
    # policy by the recommendation (a service above batch training).
    assert semantic.index("ml/web-5d9f-abcde") < semantic.index("ml/train-0")
    assert static.index("ml/train-0") < static.index("ml/web-5d9f-abcde")
    assert result["strategies"]["static_weight_rr"]["violations"] >= 1
    assert result["strategies"]["semantic_aware"]["violations"] == 0


def test_recommendations_are_computed_when_no_diagnosis_has_run_since_the_upload(lab):
    result = replay_cluster_compute(cluster=lab, params=replay_params_validate(**TIMELINE))
    assert result["input"]["recommendations"]["from"] == FROM_COMPUTED
    semantic = order(result, "semantic_aware")
    assert semantic.index("ml/web-5d9f-abcde") < semantic.index("ml/train-0")


def test_diagnoses_of_a_workload_reach_its_pods_hints(api, team):
    evictable = k8s.pod("ft-0", node="n1", gpus=1, qos="BestEffort", owner=("Job", "finetune"))
    cluster = load(api, team, k8s.listing(k8s.node("n1"), evictable))
    cluster_diagnose(cluster_id=cluster.pk)
    loaded = cluster_replay_input(cluster=cluster)
    assert loaded.semantic.hints["ml/ft-0"].diagnoses == ("gpu_training_evictable",)
    assert loaded.semantic.recommended == 1 and loaded.semantic.declared == 0


def test_openb_timeline_says_its_priorities_are_the_stand_in(tmp_path):
    pods, nodes = csv_subset(pods=300, nodes=20, tmp=tmp_path)
    out = io.StringIO()
    call_command("replay_schedule", "--pods", str(pods), "--nodes", str(nodes), "--mode",
                 "timeline", "--strategy", "best_fit", "--policy", "semantic_aware", "--json",
                 stdout=out)
    assert json.loads(out.getvalue())["semantic_source"] == "trace stand-in"


# --- the command ---------------------------------------------------------------------------

def test_command_replays_a_stored_cluster(lab, team):
    out = io.StringIO()
    call_command("replay_schedule", "--cluster", "lab", "--team", team.name, "--mode",
                 "timeline", "--strategy", "best_fit", "--json", stdout=out)
    doc = json.loads(out.getvalue())
    assert doc["semantic_source"] == "cluster recommendations"
    assert set(doc["strategies"]) == {"static_weight_rr", "gpu_mem_reservation", "semantic_aware"}
    inflation = io.StringIO()
    call_command("replay_schedule", "--cluster", "lab", "--team", team.name, "--seeds", "1",
                 "--json", stdout=inflation)
    doc = json.loads(inflation.getvalue())
    assert doc["mode"] == "inflation" and doc["semantic_source"] == "cluster recommendations"


@pytest.mark.parametrize(
    ("body", "missing"),
    [(pods_only_objects(), "no nodes are stored"), (gpu_less_objects(), "no GPU pods: none of the 1 stored pods")],
)
def test_command_refuses_a_cluster_with_nothing_to_replay(api, team, body, missing):
    load(api, team, body)
    with pytest.raises(CommandError, match=missing) as caught:
        call_command("replay_schedule", "--cluster", "lab", "--team", team.name, "--json")
    assert caught.value.returncode == 2


def test_command_needs_a_known_cluster_and_no_csvs(lab, team, other_team):
    for args, message in (
        (["--cluster", "lab", "--team", other_team.name], "has no cluster named"),
        (["--cluster", "lab"], "needs --team"),
        (["--cluster", "lab", "--team", team.name, "--pods", "x.csv"], "leave out --pods"),
    ):
        with pytest.raises(CommandError, match=message) as caught:
            call_command("replay_schedule", *args, "--json")
        assert caught.value.returncode == 2


# --- the API --------------------------------------------------------------------------------

def test_api_replays_a_stored_cluster(lab, team, api, django_capture_on_commit_callbacks):
    client = api(team, "admin", "read")
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post("/api/v1/replay-runs", {**TIMELINE, "cluster": "lab"},
                               format="json")
    assert response.status_code == 202, response.content
    run = ReplayRun.objects.get(pk=response.json()["id"])
    assert run.cluster == lab and run.pods_csv is None
    assert run.trace_label == "cluster lab's stored pods and nodes"
    replay_run(run.pk)
    doc = client.get(f"/api/v1/replay-runs/{run.pk}").json()
    assert doc["status"] == "done", doc["error"]
    assert doc["cluster"] == "lab"
    assert doc["result"]["semantic_source"] == "cluster recommendations"
    assert doc["result"]["trace"] == {"pods": 4, "nodes": 1, "gpus": 1}


@pytest.mark.parametrize(
    ("body", "missing"),
    [(pods_only_objects(), "no nodes are stored"), (gpu_less_objects(), "no GPU pods: none of the 1 stored pods")],
)
def test_api_refuses_a_cluster_with_nothing_to_replay(api, team, body, missing):
    load(api, team, body)
    response = api(team, "admin").post("/api/v1/replay-runs", {"cluster": "lab"}, format="json")
    assert response.status_code == 400
    assert missing in response.json()["detail"] and "cluster" in response.json()["errors"]
    assert not ReplayRun.objects.exists()


def test_api_cannot_replay_another_teams_cluster(lab, other_team, api):
    response = api(other_team, "admin").post("/api/v1/replay-runs", {"cluster": "lab"},
                                             format="json")
    assert response.status_code == 400 and "no cluster named 'lab'" in response.json()["detail"]
    assert not ReplayRun.objects.exists()


def test_api_refuses_a_cluster_with_hints(lab, team, api):
    response = api(team, "admin").post(
        "/api/v1/replay-runs", {"cluster": "lab", "hints": {"ml/train-0": 3}}, format="json")
    assert response.status_code == 400 and "hints" in response.json()["errors"]
    assert not ReplayRun.objects.exists()


# --- the page -------------------------------------------------------------------------------

FORM = {"mode": "timeline", "seeds": 1, "placement": "best_fit", "compress": 1,
        "node_fraction": 1}


def test_page_offers_the_teams_clusters_and_replays_one(
    client, make_user, team, lab, django_capture_on_commit_callbacks
):
    client.force_login(make_user("admin", team=team, role=Role.ADMIN))
    html = client.get("/replay/").content.decode()
    assert "the openb trace" in html and "cluster lab's stored pods and nodes" in html
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post("/replay/", {**FORM, "cluster": "lab"})
    run = ReplayRun.objects.get()
    assert response.status_code == 302 and run.cluster == lab
    replay_run(run.pk)
    page = client.get(f"/replay/{run.pk}/").content.decode()
    assert "cluster lab's stored pods and nodes" in page
    assert "cluster recommendations" in page and "ml/web-5d9f-abcde" in page


def test_page_refuses_a_cluster_without_nodes(client, make_user, api, team):
    load(api, team, pods_only_objects())
    client.force_login(make_user("admin", team=team, role=Role.ADMIN))
    response = client.post("/replay/", {**FORM, "cluster": "lab"})
    assert response.status_code == 200
    assert "no nodes are stored" in response.content.decode()
    assert not ReplayRun.objects.exists()


def test_page_does_not_offer_another_teams_cluster(client, make_user, lab, other_team):
    client.force_login(make_user("outsider", team=other_team, role=Role.ADMIN))
    assert "cluster lab" not in client.get("/replay/").content.decode()
    response = client.post("/replay/", {**FORM, "cluster": "lab"})
    assert response.status_code == 200 and not ReplayRun.objects.exists()


def test_a_viewer_of_the_clusters_team_is_told_it_needs_admin(client, make_user, lab, team,
                                                                 other_team):
    user = make_user("two-hats", team=other_team, role=Role.ADMIN)
    membership_set(team=team, user=user, role=Role.VIEWER)
    client.force_login(user)
    response = client.post("/replay/", {**FORM, "cluster": "lab"})
    assert response.status_code == 200
    assert "needs the &#x27;admin&#x27; scope in its team" in response.content.decode()
    assert not ReplayRun.objects.exists()


def test_a_cluster_name_is_escaped_in_the_choice(client, make_user, team):
    Cluster.objects.create(team=team, name="<i>x</i>")
    client.force_login(make_user("admin", team=team, role=Role.ADMIN))
    html = client.get("/replay/").content.decode()
    assert "cluster &lt;i&gt;x&lt;/i&gt;'s stored pods and nodes" in html
    assert "<i>x</i>" not in html


def test_a_run_whose_cluster_was_deleted_fails_saying_so(lab, team, api,
                                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = api(team, "admin").post("/api/v1/replay-runs", {"cluster": "lab"},
                                           format="json")
    run_id = response.json()["id"]
    lab.delete()
    assert replay_run(run_id) == "failed"
    run = ReplayRun.objects.get(pk=run_id)
    assert run.status == "failed" and "has been deleted" in run.error
