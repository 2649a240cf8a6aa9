"""The findings list (page and API) and the finding groups after a real ranking run whose
stored rank columns were then made stale (tests/ranking/stale.py): the order is the queue
key's and every shown rank is counted from the key, never read from the stored columns."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache
from django.db import connection

from bench.rerank import build
from tests.ranking.stale import stale_stored_ranks
from trustrank.accounts.models import Team
from trustrank.accounts.services import membership_set
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.models import Finding
from trustrank.ranking.services import runs
from trustrank.ranking.services.requests import ranking_run_request

pytestmark = pytest.mark.django_db

ROW = re.compile(r'<tr data-finding="(\d+)"[^>]*>.*?<td class="num rank">([^<]*)<', re.S)


@pytest.fixture(autouse=True)
def _fresh_worker():
    runs._PREVIOUS.clear()
    cache.clear()
    yield
    runs._PREVIOUS.clear()


def _ranked_team(name: str, seed: int) -> Team:
    team_id = build(findings=12, services=6, edges=10, versions=2, seed=seed)
    Team.objects.filter(pk=team_id).update(name=name)
    run = ranking_run_request(team_id=team_id, trigger="test", delay_seconds=0)
    runs.ranking_run_execute(run_id=run.pk)
    return Team.objects.get(pk=team_id)


def _true_ranks(team_ids: list[int]) -> dict[int, tuple[int, int]]:
    """Finding id -> (rank, environment rank): places in the key order, as the run left it."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT finding_id, row_number() OVER (PARTITION BY team_id ORDER BY qkey,"
            " finding_id), row_number() OVER (PARTITION BY team_id, environment ORDER BY"
            " qkey, finding_id), rank, env_rank FROM ranking_rankedfinding"
            " WHERE team_id = ANY(%s)", [team_ids])
        rows = cur.fetchall()
    # In this branch the run still writes dense ranks: the key order is theirs.
    assert all(rank == stored and env == stored_env for _, rank, env, stored, stored_env in rows)
    return {fid: (rank, env) for fid, rank, env, _, _ in rows}


def _expected(team_ids: list[int], ranks: dict[int, tuple[int, int]], *,
              descending: bool = False) -> list[int]:
    """The list's order: the ranked by rank (between teams: baseline priority, then id,
    descending), then the unranked by baseline priority; `descending` as `-rank` has it."""
    rows = list(Finding.objects.filter(team_id__in=team_ids, state__in=OPEN_STATES)
                .values_list("id", "baseline_priority"))
    ranked = [(pk, prio) for pk, prio in rows if pk in ranks]
    unranked = [(pk, prio) for pk, prio in rows if pk not in ranks]
    if descending:
        return ([pk for pk, _ in sorted(unranked)]
                + [pk for pk, _ in sorted(ranked, key=lambda r: (-ranks[r[0]][0], r[0]))])
    return ([pk for pk, _ in sorted(ranked, key=lambda r: (ranks[r[0]][0], -r[1], -r[0]))]
            + [pk for pk, _ in sorted(unranked, key=lambda r: (-r[1], -r[0]))])


def _api_rows(reader, query: str) -> list[dict]:
    response = reader.get(f"/api/v1/findings?page_size=500{query}")
    assert response.status_code == 200, response.content[:500]
    return response.json()["results"]


def _page_rows(client, query: str = "") -> list[tuple[int, str]]:
    response = client.get(f"/findings/?{query}")
    assert response.status_code == 200
    return [(int(pk), rank.strip()) for pk, rank in ROW.findall(response.content.decode())]


def test_one_teams_list_shows_the_counted_ranks_in_key_order(client, api, make_user) -> None:
    team = _ranked_team("stale-one", seed=3)
    ranks = _true_ranks([team.pk])
    assert len(ranks) > 5
    stale_stored_ranks(team.pk)
    reader = api(team, "read")
    for query, descending in (("", False), ("&ordering=rank", False), ("&ordering=-rank", True)):
        rows = _api_rows(reader, query)
        assert [r["id"] for r in rows] == _expected([team.pk], ranks, descending=descending)
        for r in rows:
            rank, env = ranks.get(r["id"], (None, None))
            assert (r["rank"], r["environment_rank"]) == (rank, env), query
    client.force_login(make_user("stale-viewer", team=team, role="viewer"))
    shown = _page_rows(client)
    assert [pk for pk, _ in shown] == _expected([team.pk], ranks)[:len(shown)]
    for pk, rank in shown:
        assert rank == (str(ranks[pk][0]) if pk in ranks else "–")


def test_several_teams_merge_by_counted_rank(client, make_user) -> None:
    first = _ranked_team("stale-first", seed=3)
    second = _ranked_team("stale-second", seed=5)
    teams = [first.pk, second.pk]
    ranks = _true_ranks(teams)
    stale_stored_ranks()
    user = make_user("stale-both", team=first, role="viewer")
    membership_set(team=second, user=user, role="viewer")
    client.force_login(user)
    for query, descending in (("", False), ("ordering=-rank", True)):
        cache.clear()
        shown = _page_rows(client, query)
        assert [pk for pk, _ in shown] == _expected(teams, ranks, descending=descending)[
            :len(shown)], query
        for pk, rank in shown:
            assert rank == (str(ranks[pk][0]) if pk in ranks else "–")


def test_groups_show_the_counted_rank_of_their_first_finding(api) -> None:
    team = _ranked_team("stale-groups", seed=3)
    ranks = _true_ranks([team.pk])
    stale_stored_ranks(team.pk)
    reader = api(team, "read")
    body = reader.get("/api/v1/findings/groups?by=vulnerability&page_size=100").json()
    assert body["results"]
    for group in body["results"]:
        found = [ranks[i][0] for i in group["finding_ids"] if i in ranks]
        assert group["best_rank"] == (min(found) if found else None)
        # The ids in rank order, the unranked after.
        assert found == sorted(found)
    body = reader.get("/api/v1/findings/groups?by=fix&page_size=100").json()
    for group in body["results"]:
        found = [ranks[i][0] for i in (*group["finding_ids"], *group["no_fix"]["finding_ids"])
                 if i in ranks]
        assert group["best_rank"] is None or group["best_rank"] in found
