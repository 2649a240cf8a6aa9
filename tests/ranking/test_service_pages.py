"""Trust and exposure on the service map, the service page (with its deployment form) and
the services API, from the latest ranking run."""

from __future__ import annotations

import pytest

from tests.ranking.scenario import build
from tests.ranking.test_ranking_runs import rerank
from trustrank.ranking.models import RankingRun, ServiceResultRow, ServiceResults
from trustrank.ranking.services.requests import ranking_evidence_sweep
from trustrank.runtime.models import Deployment

pytestmark = pytest.mark.django_db


def login(client, make_user, team, role="viewer"):
    user = make_user(f"u-{role}-{team.pk}", team=team, role=role)
    client.force_login(user)
    return user


@pytest.fixture
def ranked(team):
    data = build(team)
    rerank(team)
    return data


def test_a_run_keeps_each_services_trust_exposure_and_path(team, ranked):
    run = RankingRun.objects.get(team=team)
    gateway = run.services["prod"]["payment-gateway"]
    assert gateway["exposure"] == "open" and gateway["path"] == ["internet", "payment-gateway"]
    assert gateway["hops"][0]["target"] == "payment-gateway" and 0 <= gateway["trust"] <= 1
    assert run.services["prod"]["etcd"]["exposure"] == "small"


def test_the_services_api_over_two_teams_reads_and_filters_each_teams_run(
        client, make_user, team, other_team, ranked):
    """A member of two teams lists both teams' prod: each row shows its own team's latest
    run, and the filter by exposure, made in PostgreSQL for each environment, keeps in each
    the services that team's run says (etcd is small in one, open in the other)."""
    from trustrank.accounts.services import membership_set
    from trustrank.runtime.models import Service

    build(other_team)
    Service.objects.filter(environment__team=other_team, name="etcd").update(
        ingress_override=True)
    rerank(other_team)
    user = login(client, make_user, team)
    membership_set(team=other_team, user=user, role="viewer")
    runs = {t.name: RankingRun.objects.filter(team=t).latest("pk").services["prod"]
            for t in (team, other_team)}

    def listed(query: str) -> dict[tuple[str, str], tuple[object, object]]:
        r = client.get(f"/api/v1/environments/prod/services?page_size=100{query}")
        assert r.status_code == 200, r.content
        return {(row["team"], row["name"]): (row["trust"], row["exposure"])
                for row in r.json()["results"]}

    every = listed("")
    assert {(team.name, "etcd"), (other_team.name, "etcd")} <= set(every)
    for (team_name, name), shown in every.items():
        entry = runs[team_name].get(name)
        if entry:
            assert shown == (entry["trust"], entry["exposure"])
    assert every[(team.name, "etcd")][1] == "small"
    assert every[(other_team.name, "etcd")][1] == "open"
    for exposure in ("open", "controlled", "small", "unknown"):
        expected = {key for key in every
                    if (runs[key[0]].get(key[1]) or {}).get("exposure") == exposure}
        assert set(listed(f"&exposure={exposure}")) == expected, exposure
    assert (team.name, "etcd") in listed("&exposure=small")
    assert (other_team.name, "etcd") in listed("&exposure=open")


def test_runs_that_found_the_same_share_one_copy_of_their_service_results(team, ranked):
    from trustrank.runtime.models import Service

    rerank(team)
    first, second = RankingRun.objects.filter(team=team).order_by("pk")
    assert first.services_digest and second.services_digest == first.services_digest
    assert ServiceResults.objects.count() == 1
    # An operator marks etcd as taking internet traffic: its exposure, so the results, change.
    etcd = ranked["etcd"]
    assert isinstance(etcd, Service)
    Service.objects.filter(pk=etcd.pk).update(ingress_override=True)
    rerank(team)
    third = RankingRun.objects.filter(team=team).order_by("-pk").first()
    assert third is not None and third.services_digest != first.services_digest
    assert third.services["prod"]["etcd"]["exposure"] == "open"
    assert first.services["prod"]["etcd"]["exposure"] == "small"
    assert ServiceResults.objects.count() == 2
    # A row per service in each set, none for the run that shared the first set.
    per_set = sum(map(len, first.services.values()))
    assert ServiceResultRow.objects.count() == 2 * per_set
    assert per_set == sum(map(len, third.services.values()))


def test_service_map_colours_by_trust_and_marks_exposure(client, make_user, team, ranked,
                                                         django_assert_max_num_queries):
    login(client, make_user, team)
    with django_assert_max_num_queries(16):
        response = client.get("/services/")
    assert response.status_code == 200
    nodes = {n["label"]: n for n in response.context["graph"]["nodes"]}
    assert nodes["payment-gateway"]["exposure"] == "open"
    assert nodes["etcd"]["exposure"] == "small"
    assert isinstance(nodes["payment-gateway"]["trust"], float)
    assert nodes["internet"]["trust"] is None
    html = response.content.decode()
    assert "exposure-open" in html and "exposure-small" in html and "<meter" in html


def test_service_map_before_any_run_says_so(client, make_user, team):
    build(team)
    login(client, make_user, team)
    response = client.get("/services/")
    assert response.status_code == 200
    assert "none has yet" in response.content.decode()
    assert all(n["trust"] is None for n in response.context["graph"]["nodes"])


def test_service_page_shows_trust_exposure_path_and_deployment(client, make_user, team,
                                                               ranked):
    login(client, make_user, team)
    html = client.get(f"/services/{ranked['gateway'].pk}/").content.decode()
    card = html.split('data-testid="service-rank"', 1)[1].split("</div>\n<h2>", 1)[0]
    assert "exposure-open" in card and "<svg" in card and ">payment-gateway<" in card
    deployment = html.split('data-testid="deployment"', 1)[1]
    assert "payment-gateway</a> 1.0" in deployment and "High" in deployment
    assert "api" in deployment
    # A viewer reads the deployment but gets no form.
    assert "Save deployment" not in html


def test_manual_deployment_form_records_source_manual(client, make_user, team, ranked):
    login(client, make_user, team, role="triager")
    etcd = ranked["etcd"]
    assert "Save deployment" in client.get(f"/services/{etcd.pk}/").content.decode()
    response = client.post(f"/services/{etcd.pk}/deployment",
                           {"project": "etcd", "version": "3.4.9", "human_impact": "very high"})
    assert response.status_code == 302
    d = Deployment.objects.get(environment__team=team, service_name="etcd")
    assert d.source == "manual" and d.human_impact == "very high"
    assert d.set_by
    # A later run is scheduled (debounced, by ranking's sweep) so the rank follows.
    assert ranking_evidence_sweep() == 1
    assert RankingRun.objects.filter(team=team, status="queued").exists()
    page = client.get(f"/services/{etcd.pk}/").content.decode()
    assert "Set by a person on the service page" in page
    bad = client.post(f"/services/{etcd.pk}/deployment",
                      {"project": "nope", "version": "1", "human_impact": "low"}, follow=True)
    assert "nope" in bad.content.decode()
    assert Deployment.objects.get(pk=d.pk).project_version.project.name == "etcd"


def test_manual_deployment_is_refused_to_a_viewer_and_to_another_team(client, make_user, team,
                                                                       other_team, ranked):
    etcd = ranked["etcd"]
    login(client, make_user, team)
    response = client.post(f"/services/{etcd.pk}/deployment",
                           {"project": "etcd", "version": "3.4.9", "human_impact": "low"})
    assert response.status_code == 403
    client.logout()
    login(client, make_user, other_team, role="triager")
    response = client.post(f"/services/{etcd.pk}/deployment",
                           {"project": "etcd", "version": "3.4.9", "human_impact": "low"})
    assert response.status_code == 404
    d = Deployment.objects.get(environment__team=team, service_name="etcd")
    assert d.source == "api" and d.human_impact == "medium"


def test_services_api_has_trust_exposure_and_deployment(api, team, other_team, ranked):
    body = api(team, "read").get("/api/v1/environments/prod/services?window=all").json()
    by_name = {s["name"]: s for s in body["results"]}
    gw = by_name["payment-gateway"]
    assert gw["exposure"] == "open" and isinstance(gw["trust"], float)
    assert gw["deployment"] == {"project": "payment-gateway", "version": "1.0",
                                "human_impact": "high", "source": "api"}
    assert by_name["etcd"]["exposure"] == "small"
    assert api(other_team, "read").get("/api/v1/environments/prod/services").status_code == 404


def test_services_api_before_any_run_has_nulls(api, team):
    build(team)
    body = api(team, "read").get("/api/v1/environments/prod/services").json()
    gw = next(s for s in body["results"] if s["name"] == "payment-gateway")
    assert gw["trust"] is None and gw["exposure"] is None
    assert gw["deployment"]["source"] == "api"


def test_the_map_and_list_read_their_own_services_results_which_equal_the_runs(
        client, make_user, team, other_team, ranked):
    """The page reads only the results of the services it shows (at 100,000 services the
    environment's whole part was 3.3 s); what it shows is the run's entry all the same."""
    from trustrank.ranking import selectors

    run = RankingRun.objects.get(team=team)
    prod = run.services["prod"]
    login(client, make_user, team)
    response = client.get("/services/")
    drawn = [n for n in response.context["graph"]["nodes"] if n["kind"] == "service"]
    assert {"payment-gateway", "etcd"} <= {n["name"] for n in drawn}
    for node in drawn:
        entry = prod.get(node["name"]) or {}
        assert (node["trust"], node["exposure"]) == (entry.get("trust"), entry.get("exposure"))
    rows = response.context["rows"]
    assert rows and all(row.result == (prod.get(row.name) or {}) for row in rows)
    # The list filtered to etcd: the map still draws (and colours) the other services.
    named = client.get("/services/?name=etcd")
    assert {row.name for row in named.context["rows"]} == {"etcd"}
    gateway = next(n for n in named.context["graph"]["nodes"] if n["name"] == "payment-gateway")
    assert gateway["trust"] == prod["payment-gateway"]["trust"]
    # Filtered by exposure, every service's result is read to filter by.
    small = client.get("/services/?exposure=small")
    assert {row.name for row in small.context["rows"]} == {"etcd"}
    assert small.context["rows"][0].result == prod["etcd"]
    # The selector: the names the run has, none from another team or environment.
    assert selectors.service_results_named(
        team_id=team.pk, environment="prod", names=["etcd", "etcd", "no-such"]
    ) == {"etcd": prod["etcd"]}
    assert selectors.service_results_named(team_id=team.pk, environment="prod",
                                           names=[]) == {}
    assert selectors.service_results_named(
        team_id=team.pk, environment="nowhere", names=["etcd"]) is None
    assert selectors.service_results_named(
        team_id=other_team.pk, environment="prod", names=["etcd"]) is None
