"""The services list (API and page) holds the services a deployment declares that send no
traces, after the traced ones: `traced` false, the deployment's project and version, the
latest run's exposure ("unknown" before anything says how the internet reaches it), and
the ingress state the ingress API reports (operator mark on the deployment, Kubernetes
entry points). Filters, pagination and counts include them; the query count does not grow
with them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.cluster.test_entry_points import app_pod, service, upload
from tests.ranking.scenario import ETCD, build
from tests.ranking.test_ranking_runs import rerank
from tests.ranking.test_untraced_services import _declare_by_sbom
from tests.vulns.helpers import bom, load_sbom
from trustrank.runtime.models import Environment

pytestmark = pytest.mark.django_db
LIST = "/api/v1/environments/prod/services"


@pytest.fixture
def prod(team, api):
    """The seed scenario in prod (traced payment-gateway and etcd) plus etcd-edge, declared
    in prod by its SBOM upload, sending no traces; ranked once."""
    build(team)
    _declare_by_sbom(api(team, "sbom:write"), team, project="etcd-edge", environment="prod",
                     service="etcd-edge", human_impact="medium")
    rerank(team)
    return api(team, "read", "triage")


def _rows(client, query: str = "") -> dict[str, dict]:
    r = client.get(LIST + query)
    assert r.status_code == 200, r.content
    return {row["name"]: row for row in r.json()["results"]}


def test_a_declared_untraced_service_is_listed_with_its_deployment(prod):
    body = prod.get(LIST).json()
    rows = {row["name"]: row for row in body["results"]}
    assert set(rows) == {"payment-gateway", "etcd", "etcd-edge"}
    assert body["count"] == 3
    # Traced first, the declared one after.
    assert body["results"][-1]["name"] == "etcd-edge"
    edge = rows["etcd-edge"]
    assert (edge["traced"], edge["id"], edge["kind"], edge["exposure"]) == (
        False, None, "service", "unknown")
    assert (edge["ingress"], edge["ingress_source"], edge["ingress_override"]) == (
        False, "none", None)
    assert (edge["deployment"]["project"], edge["deployment"]["version"]) == (
        "etcd-edge", "3.4.9")
    assert (edge["calls_in"], edge["libraries"], edge["last_seen"]) == (0, [], None)
    etcd = rows["etcd"]
    assert (etcd["traced"], etcd["exposure"], etcd["ingress"], etcd["ingress_source"]) == (
        True, "small", False, "none")
    assert rows["payment-gateway"]["traced"] is True


def test_the_operator_mark_on_the_deployment_shows_in_the_list(team, prod):
    url = "/api/v1/environments/prod/services/etcd-edge/ingress"
    assert prod.put(url, {"ingress": True}, format="json").status_code == 200
    edge = _rows(prod)["etcd-edge"]
    assert (edge["traced"], edge["ingress"], edge["ingress_source"], edge["ingress_override"]) \
        == (False, True, "operator", True)
    # The list says what the ingress API says.
    state = prod.get(url).json()
    assert (state["ingress"], state["source"]) == (edge["ingress"], edge["ingress_source"])
    # The next run reads the mark: exposure open.
    rerank(team)
    assert _rows(prod)["etcd-edge"]["exposure"] == "open"


def test_a_traced_service_behind_a_load_balancer_shows_kubernetes_ingress(team, api, prod):
    assert _rows(prod)["etcd"]["ingress"] is False
    upload(api, team, service("etcd-lb", type_="LoadBalancer", selector={"app": "etcd"}),
           app_pod("etcd-7d9f8b6c5d-x1", "etcd"))
    etcd = _rows(prod)["etcd"]
    assert (etcd["traced"], etcd["ingress"], etcd["ingress_source"]) == (
        True, True, "kubernetes")
    assert etcd["ingress_candidate"] is False


def test_filters_include_the_declared_services(prod):
    assert set(_rows(prod, "?exposure=unknown")) == {"etcd-edge"}
    assert set(_rows(prod, "?exposure=small")) == {"etcd"}
    assert set(_rows(prod, "?traced=false")) == {"etcd-edge"}
    assert set(_rows(prod, "?traced=true")) == {"payment-gateway", "etcd"}
    assert set(_rows(prod, "?name=etcd")) == {"etcd", "etcd-edge"}
    assert set(_rows(prod, "?kind=service&name=edge")) == {"etcd-edge"}
    assert set(_rows(prod, "?kind=external")) == set()
    assert "etcd-edge" not in _rows(prod, "?ingress_candidate=true")
    assert "etcd-edge" in _rows(prod, "?ingress_candidate=false")
    r = prod.get(LIST + "?exposure=wide")
    assert r.status_code == 400 and "exposure" in r.json()["errors"]
    r = prod.get(LIST + "?untraced=1")
    assert r.status_code == 400 and "untraced" in str(r.json())


def test_pagination_counts_and_pages_through_both_parts(prod):
    names = []
    for page in (1, 2, 3):
        body = prod.get(LIST + f"?page_size=1&page={page}").json()
        assert body["count"] == 3
        names += [row["name"] for row in body["results"]]
    assert names[-1] == "etcd-edge" and len(set(names)) == 3
    body = prod.get(LIST + "?page_size=2&page=2").json()
    assert [row["name"] for row in body["results"]] == ["etcd-edge"]
    assert prod.get(LIST + "?page_size=2&page=3").status_code == 404


def test_another_teams_services_are_not_listed(team, other_team, api, prod):
    assert api(other_team, "read").get(LIST).status_code == 404
    # Its own prod, with a declared service of its own, lists only its service.
    load_sbom(other_team, bom([ETCD]), project="theirs", version="1.0")
    client = api(other_team, "sbom:write", "read")
    r = client.put("/api/v1/environments/prod/services/theirs/deployment",
                   {"project": "theirs", "version": "1.0"}, format="json")
    assert r.status_code == 200, r.content
    assert set(_rows(client)) == {"theirs"}
    assert "theirs" not in _rows(prod)


def test_the_query_count_does_not_grow_with_declared_services(team, api, prod):
    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert prod.get(LIST).status_code == 200
        return len(ctx)

    prod.get(LIST)  # the key's first use records it
    before = count()
    # The environment, the run's results, a count and a slice for each part, the rates,
    # libraries and deployments of the page's traced services, the team's entry points.
    assert before <= 12
    sbom = api(team, "sbom:write")
    for i in range(4):
        load_sbom(team, bom([ETCD]), project=f"extra-{i}", version="1.0")
        r = sbom.put(f"/api/v1/environments/prod/services/extra-{i}/deployment",
                     {"project": f"extra-{i}", "version": "1.0"}, format="json")
        assert r.status_code == 200, r.content
    assert len(_rows(prod)) == 7
    assert count() == before


def test_the_page_lists_the_declared_service(client, make_user, team, prod,
                                             django_assert_max_num_queries):
    client.force_login(make_user("viewer", team=team, role="viewer"))
    env = Environment.objects.get(team=team, name="prod")
    # 18, and the map's latest call edge write before its busiest calls are kept.
    with django_assert_max_num_queries(19):
        html = client.get(f"/services/?environment={env.pk}").content.decode()
    assert 'data-service="etcd-edge"' in html and "declared, no traces" in html
    assert "etcd-edge@3.4.9" in html and "exposure-unknown" in html
    response = client.get(f"/services/?environment={env.pk}")
    [node] = [n for n in response.context["graph"]["nodes"] if n["name"] == "etcd-edge"]
    assert node["untraced"] is True and node["exposure"] == "unknown"
    fragment = client.get(f"/services/?environment={env.pk}&traced=false",
                          HTTP_HX_REQUEST="true").content.decode()
    assert "etcd-edge" in fragment and 'data-service="etcd"' not in fragment
    fragment = client.get(f"/services/?environment={env.pk}&exposure=unknown",
                          HTTP_HX_REQUEST="true").content.decode()
    assert 'data-service="etcd-edge"' in fragment and "payment-gateway" not in fragment


@pytest.mark.parametrize("exposure", ["open", "controlled", "small", "unknown"])
def test_the_map_page_and_the_api_filter_by_exposure_alike(
        team, prod, client, make_user, exposure):
    """The page (one environment) and the API (each environment of the name) filter by
    exposure in SQL over the run's results (at 100,000 services a list of names made in
    Python made every statement): both list the services the run says, declared ones
    included."""
    client.force_login(make_user("viewer", team=team, role="viewer"))
    env = Environment.objects.get(team=team, name="prod")
    response = client.get(f"/services/?environment={env.pk}&exposure={exposure}")
    assert response.status_code == 200
    page = {row.name for row in response.context["rows"]}
    assert page == set(_rows(prod, f"?exposure={exposure}"))
    assert page == {"open": {"payment-gateway"}, "controlled": set(), "small": {"etcd"},
                    "unknown": {"etcd-edge"}}[exposure]
