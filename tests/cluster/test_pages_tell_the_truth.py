"""What the cluster and replay pages say: GPU counts from the pods' requests (or their DCGM
series), pods stored without GPUs named as such, GPU lines labelled by node/gpu or UUID,
legends outside the plot, vLLM pods as inference, replay parameters as fields."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.cluster import k8s_build as k8s
from trustrank.cluster.charts import priorities_chart, time_chart
from trustrank.cluster.models import Cluster, ClusterWorkload, ReplayRun, ReplayStatus
from trustrank.cluster.selectors import gpu_lines
from trustrank.cluster.services import replay_params_validate
from trustrank.cluster.services.diagnoses import cluster_diagnose
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.objects import objects_load
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.series import MetricKind, Series
from trustrank.risk.cluster.priorities import workload_priorities, workloads_from_pods

pytestmark = pytest.mark.django_db


def _stamps(minutes: int = 5) -> tuple[int, ...]:
    now = timezone.now()
    return tuple(int((now - timedelta(minutes=m)).timestamp() * 1000)
                 for m in range(minutes, 0, -1))


def _load(cluster: Cluster, *items: dict) -> None:
    objects_load(cluster=cluster, snapshot=kubernetes_parse(body=k8s.listing(*items)))


def _vllm_pod(name: str, **extra) -> dict:
    pod = k8s.pod(name, namespace="inference", node="n1", gpus=1, priority=1000,
                  owner=("StatefulSet", name.rsplit("-", 1)[0]), **extra)
    pod["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.6.3"
    return pod


def test_workloads_keep_the_gpus_their_pods_request(team, client, make_user):
    cluster = Cluster.objects.create(team=team, name="gpus")
    _load(cluster, k8s.node("n1"),
          k8s.pod("train-0", node="n1", gpus=2, owner=("Job", "train")),
          k8s.pod("train-1", node="n1", gpus=2, owner=("Job", "train")),
          # No GPU request: the GPU the runtime gave it shows in its DCGM series.
          k8s.pod("bare-0", node="n1", owner=("StatefulSet", "bare")))
    series_store(cluster=cluster, series=[Series(
        "DCGM_FI_DEV_GPU_UTIL", (("Hostname", "n1"), ("UUID", f"GPU-{g}"), ("gpu", str(g)),
                                 ("namespace", "ml"), ("pod", "bare-0")),
        MetricKind.GAUGE, _stamps(), (50.0,) * 5) for g in (5, 6, 7)])
    cluster_diagnose(cluster_id=cluster.pk)
    gpus = dict(ClusterWorkload.objects.filter(cluster=cluster).values_list("key", "gpus"))
    assert gpus == {"ml/Job/train": 4.0, "ml/StatefulSet/bare": 3.0}
    client.force_login(make_user("ann", team=team))
    page = client.get("/clusters/gpus/workloads/ml/Job/train/").content.decode()
    assert "<dt>GPUs</dt><dd>4</dd>" in page


def test_pods_without_gpus_are_named_not_hidden(team, client, make_user):
    cluster = Cluster.objects.create(team=team, name="cpu-only")
    _load(cluster, k8s.pod("web-0", node="n1", owner=("StatefulSet", "web")),
          k8s.pod("web-1", node="n1", owner=("StatefulSet", "web")))
    client.force_login(make_user("ann", team=team))
    page = client.get("/clusters/cpu-only/").content.decode()
    assert "2 pods stored, none requests a GPU." in page
    assert "not diagnosed yet" in page and "No workloads yet" not in page
    cluster_diagnose(cluster_id=cluster.pk)
    page = client.get("/clusters/cpu-only/").content.decode()
    assert "2 pods stored, none requests a GPU." in page and "ml/StatefulSet/web" in page
    empty = Cluster.objects.create(team=team, name="empty")
    assert "No workloads yet" in client.get(f"/clusters/{empty.name}/").content.decode()


def test_gpu_lines_are_labelled_by_node_and_gpu_or_uuid_never_a_bare_slash(team):
    cluster = Cluster.objects.create(team=team, name="labels")
    stamps = _stamps()
    series_store(cluster=cluster, series=[
        # Remote write with Kubernetes SD: `node` and a lower-case `uuid`, no Hostname.
        Series("DCGM_FI_DEV_GPU_UTIL", (("node", "n2"), ("gpu", "1")), MetricKind.GAUGE,
               stamps, (40.0,) * 5),
        Series("DCGM_FI_DEV_GPU_UTIL", (("uuid", "GPU-abc"),), MetricKind.GAUGE, stamps,
               (30.0,) * 5),
        # Names no GPU at all: no line.
        Series("DCGM_FI_DEV_GPU_UTIL", (("namespace", ""), ("pod", "")), MetricKind.GAUGE,
               stamps, (20.0,) * 5),
    ])
    util, _fi, _seen = gpu_lines(cluster=cluster, since=timezone.now() - timedelta(hours=1))
    assert sorted(util) == ["GPU-abc", "n2/gpu1"]
    assert all(len(points) == 5 for points in util.values())


def test_the_legend_sits_below_the_axis_labels():
    lines = {f"node-{i}/gpu{i}": [(0.0, 10.0 * i), (600.0, 10.0 * i + 5)] for i in range(8)}
    chart = time_chart(lines, y_label="GPU utilisation %", y_max=100.0)
    assert chart is not None
    x_axis_label_y = chart.height - 6
    assert [row.y for row in chart.legend] == sorted(row.y for row in chart.legend)
    assert min(row.y for row in chart.legend) > x_axis_label_y
    assert max(row.y for row in chart.legend) < chart.full_height
    assert chart.left + chart.plot_w <= chart.width


def test_priorities_chart_places_declared_and_recommended_on_a_log_axis():
    chart = priorities_chart([("a/Deployment/chat", 1_000, 100_000, "raise"),
                              ("a/Job/train", 1_000_000, 1_000, "lower")])
    assert chart is not None and len(chart.rows) == 2
    chat, train = chart.rows
    assert chat.declared_x < chat.recommended_x and train.declared_x > train.recommended_x
    assert [t.label for t in chart.x_ticks][-1] == "1M"
    assert priorities_chart([]) is None


def test_vllm_pods_are_latency_sensitive_inference():
    pods = kubernetes_parse(body=k8s.listing(
        _vllm_pod("chat-0"),
        k8s.pod("embed-0", namespace="inference", gpus=1, owner=("Deployment", "embed"),
                labels={"app.kubernetes.io/component": "inference"}),
        k8s.pod("quiet-0", namespace="inference", gpus=1, owner=("Deployment", "quiet")),
        k8s.pod("tool-0", gpus=1, owner=("Deployment", "tool")),
    )).pods
    workloads = workloads_from_pods(pods=pods, vllm_pods={"inference/quiet-0"})
    by_key = {r.workload: r for r in workload_priorities(workloads=workloads, diagnoses=[])}
    for key in ("inference/StatefulSet/chat", "inference/Deployment/embed",
                "inference/Deployment/quiet"):
        assert by_key[key].tier == "latency-sensitive", key
        assert "an inference server" in by_key[key].reasons[0].detail
        assert "neither" not in by_key[key].reasons[0].detail
    assert "image vllm/vllm-openai" in by_key["inference/StatefulSet/chat"].reasons[0].detail
    assert "exports vLLM metrics" in by_key["inference/Deployment/quiet"].reasons[0].detail
    assert by_key["ml/Deployment/tool"].tier == "service"


def test_the_cluster_page_draws_the_priorities_chart(team, client, make_user,
                                                     django_assert_max_num_queries):
    cluster = Cluster.objects.create(team=team, name="chart")
    _load(cluster, k8s.node("n1"), _vllm_pod("chat-0"),
          k8s.pod("train-0", node="n1", gpus=2, priority=1_000_000, owner=("Job", "train")))
    cluster_diagnose(cluster_id=cluster.pk)
    client.force_login(make_user("ann", team=team))
    with django_assert_max_num_queries(20):
        page = client.get("/clusters/chart/").content.decode()
    assert 'class="priorities-chart"' in page and page.count('class="workload"') == 2
    assert "2 pods stored, 2 request a GPU." in page


def test_the_diagnosis_api_wants_metrics_write_in_the_clusters_team(api, team, other_team):
    Cluster.objects.create(team=team, name="lab")
    assert api(team, "read").post("/api/v1/clusters/lab/diagnoses").status_code == 403
    assert api(other_team, "metrics:write").post(
        "/api/v1/clusters/lab/diagnoses").status_code == 404
    answer = api(team, "metrics:write").post("/api/v1/clusters/lab/diagnoses")
    assert answer.status_code == 202 and answer.json()["cluster"] == "lab"


def test_replay_parameters_read_as_fields_and_the_status_shows_once(team, client, make_user):
    params = replay_params_validate(mode="timeline", policies=["semantic_aware"],
                                    placement="best_fit", compress=1000, node_fraction=0.1)
    run = ReplayRun.objects.create(team=team, mode="timeline", parameters=params.to_json(),
                                   status=ReplayStatus.DONE, phase="done")
    client.force_login(make_user("ann", team=team))
    page = client.get(f"/replay/{run.pk}/").content.decode()
    assert "{'" not in page and "['" not in page and "strategies=" not in page
    assert "<dt>Priority policies</dt><dd>Semantic-aware dynamic scheduling</dd>" in page
    assert "<dt>Arrival times</dt><dd>compressed ×1000</dd>" in page
    assert "<dt>Nodes replayed</dt><dd>10% of them</dd>" in page
    status = page.split("<dt>Status</dt>", 1)[1].split("</dd>", 1)[0]
    assert status.count(">done<") == 1 and "done done" not in page, status
    inflation = ReplayRun.objects.create(
        team=team, mode="inflation", status=ReplayStatus.DONE, phase="done",
        parameters=replay_params_validate(strategies=["fgd", "best_fit"], seeds=2).to_json())
    page = client.get(f"/replay/{inflation.pk}/").content.decode()
    assert "<dt>Placement strategies</dt><dd>fgd, best fit</dd>" in page
    assert "<dt>Seeds</dt><dd>2</dd>" in page and "Priority policies" not in page
