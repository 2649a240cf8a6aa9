"""The gatherer passes per-minute rates and deployment names; the stored explanation and
the finding page show them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.ranking.scenario import build
from tests.ranking.test_pages import login
from tests.ranking.test_ranking_runs import rerank
from trustrank.findings.models import Finding
from trustrank.ranking.inputs import ranking_inputs_gather
from trustrank.runtime.models import CallEdgeBucket, LibraryBucket

pytestmark = pytest.mark.django_db


def _factors(team) -> dict[str, dict]:
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    return {f["name"]: f for f in log4j.rank_context.data["explanation"]}


def test_reachability_rate_gives_last_hour_and_peak_over_the_window(team):
    data = build(team)
    # Ten minutes of 120 spans in the last hour, and a burst of 600 three hours ago.
    at = data["gateway"].last_seen - timedelta(hours=3)
    LibraryBucket.objects.create(service=data["gateway"], bucket_start=at, kind="scope",
                                 name="io.opentelemetry.log4j-context-data-2.17", spans=600)
    rerank(team)
    reach = _factors(team)["reachability"]["source"]
    assert reach == ("scope io.opentelemetry.log4j-context-data-2.17 on prod/payment-gateway, "
                     "called 0.333/s (last hour; peak 10/s over 24 h)")


def test_without_per_minute_buckets_the_rate_is_the_window_average(team, settings):
    build(team)
    settings.TRUSTRANK_TRACE_BUCKET_SECONDS = 3600
    rerank(team)
    reach = _factors(team)["reachability"]["source"]
    # 1,200 spans over 1,440 minutes: 50 an hour.
    assert reach.endswith("called 50/h (average over 24 h)"), reach


def test_edge_rates_reach_the_engine(team):
    data = build(team)
    gw = data["gateway"]
    for minute in range(3):
        CallEdgeBucket.objects.create(
            environment=gw.environment, caller=gw, callee=data["etcd"],
            bucket_start=gw.last_seen - timedelta(minutes=minute), calls=60 * (minute + 1),
            last_seen=gw.last_seen,
        )
    (edge,) = [e for e in ranking_inputs_gather(team_id=team.pk).inputs.edges
               if e.callee == "etcd"]
    assert (edge.calls_per_minute, edge.recent_calls_per_minute,
            edge.peak_calls_per_minute) == (0.25, 6.0, 180.0)


def test_human_impact_names_the_deployment_on_the_api_and_the_page(api, client, make_user,
                                                                   team):
    build(team)
    rerank(team)
    source = _factors(team)["human_impact"]["source"]
    assert source == "deployment prod/payment-gateway → payment-gateway@1.0 (source: API)"
    items = api(team, "read").get("/api/v1/priorities?environment=prod").json()["results"]
    first = next(i for i in items if i["vuln_id"] == "CVE-2021-44228")
    assert {"name": "human_impact", "source": source}.items() <= next(
        f for f in first["explanation"] if f["name"] == "human_impact").items()
    login(client, make_user, team)
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    html = client.get(f"/findings/{log4j.pk}/").content.decode()
    assert (f'data-testid="rank-deployment">{source}<') in html
