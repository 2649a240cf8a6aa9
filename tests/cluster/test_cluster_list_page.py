"""`/clusters/` draws, for the most recently updated clusters of the page, GPU use over time
and declared vs recommended priorities, each card linking to the cluster's page; a cluster
without metrics or workloads says so; the query count stays bounded however many there are."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.cluster import k8s_build as k8s
from trustrank.cluster.models import Cluster
from trustrank.cluster.services.diagnoses import cluster_diagnose
from trustrank.cluster.services.metrics import series_store
from trustrank.cluster.services.objects import objects_load
from trustrank.cluster.views import LIST_CARDS
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.series import MetricKind, Series

pytestmark = pytest.mark.django_db


def _gpu_cluster(team: object, name: str) -> Cluster:
    cluster = Cluster.objects.create(team=team, name=name)
    objects_load(cluster=cluster, snapshot=kubernetes_parse(body=k8s.listing(
        k8s.node("n1"),
        k8s.pod("train-0", node="n1", gpus=2, priority=1_000_000, owner=("Job", "train")),
        k8s.pod("chat-0", node="n1", gpus=1, priority=1000, owner=("Deployment", "chat")),
    )))
    now = timezone.now()
    stamps = tuple(int((now - timedelta(minutes=m)).timestamp() * 1000) for m in range(5, 0, -1))
    series_store(cluster=cluster, series=[
        Series("DCGM_FI_DEV_GPU_UTIL", (("Hostname", "n1"), ("gpu", str(g))), MetricKind.GAUGE,
               stamps, (10.0 * g, 20.0, 30.0, 40.0, 50.0)) for g in range(3)])
    cluster_diagnose(cluster_id=cluster.pk)
    return cluster


def _card(page: str, name: str) -> str:
    match = re.search(rf'<section class="card cluster-card" aria-label="Cluster {name}">'
                      r"(.*?)</section>", page, re.S)
    assert match, f"no card for {name}"
    return match.group(1)


def _points(svg: str) -> list[str]:
    return re.findall(r'<polyline class="line"[^>]* points="([^"]+)"', svg)


def test_the_list_draws_gpu_use_and_priorities_for_a_cluster_with_data(
    team, client, make_user, django_assert_max_num_queries
):
    _gpu_cluster(team, "gpu-a")
    client.force_login(make_user("ann", team=team))
    with django_assert_max_num_queries(20):
        page = client.get("/clusters/").content.decode()
    card = _card(page, "gpu-a")
    assert 'href="/clusters/gpu-a/?team=' in card
    lines = _points(card)
    assert len(lines) == 3 and all(len(p.split()) == 5 for p in lines), lines
    assert 'aria-label="GPU utilisation % over time"' in card
    assert "3 of 3 GPUs, the least utilised first" in card
    priorities = card.split('class="priorities-chart"', 1)[1]
    assert priorities.count('class="workload"') == 2
    assert len(re.findall(r'<circle class="(?:declared|recommended)" cx="[\d.]+" cy="[\d.]+"',
                          priorities)) == 4
    assert "2 pods stored, 2 request a GPU." in card
    assert "No GPU metrics" not in card and "No workloads yet" not in card


def test_empty_clusters_say_what_is_missing(team, client, make_user):
    Cluster.objects.create(team=team, name="empty")
    quiet = Cluster.objects.create(team=team, name="cpu-only")
    objects_load(cluster=quiet, snapshot=kubernetes_parse(body=k8s.listing(
        k8s.pod("web-0", node="n1", owner=("StatefulSet", "web")))))
    # Sent metrics once, none of them GPU metrics.
    series_store(cluster=quiet, series=[Series(
        "up", (("job", "web"),), MetricKind.GAUGE, (int(timezone.now().timestamp() * 1000),),
        (1.0,))])
    client.force_login(make_user("ann", team=team))
    page = client.get("/clusters/").content.decode()
    empty = _card(page, "empty")
    assert "No GPU metrics yet: this cluster has sent no metrics." in empty
    assert "No pods stored yet." in empty and "No workloads yet: upload the cluster" in empty
    assert "<svg" not in empty
    quiet_card = _card(page, "cpu-only")
    assert "No GPU metrics (DCGM_FI_DEV_GPU_UTIL" in quiet_card and "in the last 6 h" in quiet_card
    assert "1 pod stored, none requests a GPU." in quiet_card
    assert "not diagnosed yet" in quiet_card and "<svg" not in quiet_card


def test_only_the_most_recently_updated_clusters_get_cards_and_queries_stay_bounded(
    team, client, make_user, django_assert_max_num_queries
):
    names = [f"gpu-{i}" for i in range(LIST_CARDS + 2)]
    for name in names:
        _gpu_cluster(team, name)
    # gpu-0 was updated last: it leads, whatever the names' order.
    Cluster.objects.filter(name="gpu-0").update(metrics_at=timezone.now() + timedelta(minutes=1))
    client.force_login(make_user("ann", team=team))
    with django_assert_max_num_queries(8 + 8 * LIST_CARDS):
        page = client.get("/clusters/").content.decode()
    cards = re.findall(r'aria-label="Cluster ([^"]+)"', page)
    assert len(cards) == LIST_CARDS and cards[0] == "gpu-0", cards
    assert cards[1:] == [names[-1], names[-2]]  # then the newest
    for name in names:  # the table still lists every cluster
        assert f'href="/clusters/{name}/?team=' in page


def test_another_teams_cluster_gets_no_card(team, other_team, client, make_user):
    _gpu_cluster(other_team, "theirs")
    client.force_login(make_user("ann", team=team))
    page = client.get("/clusters/").content.decode()
    assert "theirs" not in page and "cluster-card" not in page
    assert "No cluster has sent evidence yet." in page
