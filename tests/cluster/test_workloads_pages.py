"""The workloads API and the cluster and workload pages."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.cluster import k8s_build as k8s
from trustrank.cluster.models import Cluster
from trustrank.cluster.services.diagnoses import cluster_diagnose
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.objects import objects_load
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.series import MetricKind, Series

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(team):
    cluster = Cluster.objects.create(team=team, name="gpu-prod")
    objects_load(cluster=cluster, snapshot=kubernetes_parse(body=k8s.listing(
        k8s.node("n1"),
        k8s.pod("infer-0", node="n1", gpus=1, priority=10, owner=("StatefulSet", "infer")),
        k8s.pod("train-0", node="n1", gpus=2, qos="BestEffort", priority=500000,
                owner=("Job", "train")),
        k8s.pod("wait-0", phase="Pending", gpus=4, priority=7),
    )))
    now = timezone.now()
    start = int((now - timedelta(minutes=70)).timestamp() * 1000)
    stamps = tuple(start + i * 60_000 for i in range(71))
    for name, value in (("DCGM_FI_DEV_GPU_UTIL", 10.0), ("DCGM_FI_DEV_FB_FREE", 60000.0),
                        ("DCGM_FI_DEV_FB_USED", 20000.0)):
        series_store(cluster=cluster, series=[Series(
            name, (("Hostname", "n1"), ("gpu", "0"), ("namespace", "ml"), ("pod", "infer-0")),
            MetricKind.GAUGE, stamps, (value,) * len(stamps))])
    cluster_diagnose(cluster_id=cluster.pk, now=now)
    return cluster


def test_workloads_api_lists_declared_and_recommended_with_ordering(api, team, cluster):
    client = api(team, "read")
    body = client.get("/api/v1/clusters/gpu-prod/workloads").json()
    assert body["count"] == 3
    first = body["results"][0]
    assert first["disagrees"] is True
    assert set(first["declared"]) == {"priority", "priority_class", "qos_class"}
    assert first["reasons"] and "priority" in first["recommended"]
    by_declared = client.get("/api/v1/clusters/gpu-prod/workloads?ordering=-declared").json()
    assert by_declared["results"][0]["key"] == "ml/Job/train"
    infer = next(w for w in body["results"] if w["key"] == "ml/StatefulSet/infer")
    assert infer["diagnoses"]


def test_other_team_cannot_see_the_cluster(api, other_team, cluster, client, make_user):
    assert api(other_team, "read").get("/api/v1/clusters/gpu-prod/workloads").status_code == 404
    client.force_login(make_user("eve", team=other_team))
    assert client.get("/clusters/gpu-prod/").status_code == 404
    assert client.get("/clusters/").content.count(b"gpu-prod") == 0


def test_cluster_page_draws_gpu_charts_and_lists_pending_pods(client, make_user, team, cluster,
                                                              django_assert_max_num_queries):
    client.force_login(make_user("ann", team=team))
    with django_assert_max_num_queries(20):
        response = client.get("/clusters/gpu-prod/")
    html = response.content.decode()
    assert response.status_code == 200
    assert html.count("<polyline") >= 2  # utilisation and FI
    assert "ml/wait-0" in html
    assert "<script" not in html.split("<main", 1)[-1]
    page = client.get("/clusters/gpu-prod/workloads/ml/StatefulSet/infer/")
    assert page.status_code == 200
    assert b"DCGM_FI_DEV_GPU_UTIL" in page.content and b"<polyline" in page.content


def test_gpu_charts_pick_the_least_utilised_gpus(team):
    from trustrank.cluster.selectors import gpu_lines

    big = Cluster.objects.create(team=team, name="big")
    now = timezone.now()
    stamps = tuple(int((now - timedelta(minutes=m)).timestamp() * 1000) for m in (3, 2, 1))
    series_store(cluster=big, series=[
        Series("DCGM_FI_DEV_GPU_UTIL", (("Hostname", f"n{g // 4}"), ("gpu", str(g % 4))),
               MetricKind.GAUGE, stamps, (float(g * 5),) * 3)
        for g in range(12)
    ])
    util, _fi, seen = gpu_lines(cluster=big, since=now - timedelta(hours=1), limit=3)
    assert seen == 12
    assert sorted(util) == ["n0/gpu0", "n0/gpu1", "n0/gpu2"]
