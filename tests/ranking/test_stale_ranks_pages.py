"""The priorities page, its API, a finding's rank and the notify payloads show the ranks
counted from the queue key, in queue order, when the stored `rank` and `env_rank` columns
are stale (a run writes only the rows whose own key changed): the true ranks are recorded
after a real run, the stored ones reversed (tests/ranking/stale.py), and every reader must
still show the true ones."""

from __future__ import annotations

import pytest

from tests.ranking.stale import STALE, Truth, stale_teams
from trustrank.accounts.models import Team
from trustrank.findings.models import Finding
from trustrank.ranking import selectors, views
from trustrank.ranking.services import runs
from trustrank.ranking.services.notify_sources import finding_payloads

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_worker():
    runs._PREVIOUS.clear()
    yield
    runs._PREVIOUS.clear()


@pytest.fixture
def teams() -> tuple[Team, Team, Truth]:
    alpha, beta, truth = stale_teams(("alpha", "beta"), findings=40, services=8, edges=16,
                                     versions=3)
    assert len([t for t in truth.values() if t[0] == alpha.pk]) > 20
    return alpha, beta, truth


def _team_order(truth: Truth, team_ids: set[int], env: str | None = None) -> list[int]:
    """The merged queue: by (rank, team, finding), the environment's rank for one."""
    at = 1 if env is None else 3
    rows = [(t[at], t[0], fid) for fid, t in truth.items()
            if t[0] in team_ids and (env is None or t[2] == env)]
    return [fid for _r, _t, fid in sorted(rows)]


def _walk(client, path: str) -> list[tuple[int, int | None, int | None]]:
    """(finding, rank, environment rank) of every row of every page, following `Next`."""
    out: list[tuple[int, int | None, int | None]] = []
    query = path
    for _ in range(100):
        response = client.get(query)
        assert response.status_code == 200
        out += [(f.pk, r["rank"], r["environment_rank"]) for f, r in response.context["rows"]]
        if not response.context["next_query"]:
            return out
        query = "/?" + response.context["next_query"]
    raise AssertionError("the pages never end")


def _expected(truth: Truth, order: list[int]) -> list[tuple[int, int, int]]:
    return [(fid, truth[fid][1], truth[fid][3]) for fid in order]


def test_one_teams_pages_show_the_counted_ranks_in_key_order(
        client, make_user, teams, monkeypatch):
    alpha, _beta, truth = teams
    monkeypatch.setattr(views, "PAGE_SIZE", 7)
    client.force_login(make_user("viewer", team=alpha, role="viewer"))
    assert _walk(client, "/") == _expected(truth, _team_order(truth, {alpha.pk}))
    envs = {t[2] for t in truth.values() if t[0] == alpha.pk and t[2]}
    assert envs
    for env in envs:
        assert _walk(client, f"/?environment={env}") == _expected(
            truth, _team_order(truth, {alpha.pk}, env))


def test_several_teams_pages_merge_by_counted_rank_then_team(
        client, make_user, teams, monkeypatch):
    alpha, beta, truth = teams
    monkeypatch.setattr(views, "PAGE_SIZE", 6)
    user = make_user("both", team=alpha, role="viewer")
    from trustrank.accounts.services import membership_set

    membership_set(team=beta, user=user, role="viewer")
    client.force_login(user)
    order = _team_order(truth, {alpha.pk, beta.pk})
    assert _walk(client, "/") == _expected(truth, order)
    # A filter (the page's `decision`) narrows each team's heads alike.
    immediate = [fid for fid in order if Finding.objects.get(pk=fid).decision == "immediate"]
    got = _walk(client, "/?decision=immediate")
    assert [fid for fid, _r, _e in got] == immediate
    # The API (the session's two teams): page-number pages of the same merged order.
    ranks = []
    for page in (1, 2, 3):
        body = client.get(f"/api/v1/priorities?page_size=5&page={page}").json()
        ranks += [(r["finding"], r["rank"], r["environment_rank"]) for r in body["results"]]
    assert ranks == _expected(truth, order)[:15]


def test_the_api_pages_show_the_counted_ranks(api, teams):
    alpha, _beta, truth = teams
    reader = api(alpha, "read")
    got = []
    for page in range(1, 20):
        body = reader.get(f"/api/v1/priorities?page_size=9&page={page}").json()
        got += [(r["finding"], r["rank"], r["environment_rank"]) for r in body["results"]]
        if body["next"] is None:
            break
    assert got == _expected(truth, _team_order(truth, {alpha.pk}))


def test_a_findings_rank_is_counted_in_one_query(teams, django_assert_num_queries):
    alpha, _beta, truth = teams
    fid = _team_order(truth, {alpha.pk})[4]
    finding = Finding.objects.select_related("ranked").get(pk=fid)
    with django_assert_num_queries(1):
        assert (finding.rank, finding.env_rank) == (truth[fid][1], truth[fid][3])
    assert finding.ranked.rank > STALE // 2  # the stored one is the stale one
    # A list's ranks are counted for all its rows in one statement, then read: no query a row.
    listed = list(Finding.objects.filter(team=alpha, ranked__isnull=False)
                  .select_related("ranked"))
    with django_assert_num_queries(1):
        selectors.ranks_attach(listed)
    with django_assert_num_queries(0):
        assert {f.pk: (f.rank, f.env_rank) for f in listed} == {
            f.pk: (truth[f.pk][1], truth[f.pk][3]) for f in listed}


def test_the_finding_page_and_notify_payloads_show_the_counted_rank(
        client, make_user, teams):
    alpha, _beta, truth = teams
    fid = _team_order(truth, {alpha.pk})[2]
    client.force_login(make_user("viewer", team=alpha, role="viewer"))
    html = client.get(f"/findings/{fid}/").content.decode()
    assert f"<strong>#{truth[fid][1]}</strong> in the team's queue" in html
    assert finding_payloads([fid])[fid]["rank"] == truth[fid][1]
