"""The findings list (page and API) and the finding groups after a real ranking run whose
stored rank columns were then made stale (tests/ranking/stale.py): the order is the queue
key's and every shown rank is counted from the key, never read from the stored columns."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache

from tests.ranking.stale import Truth, ranked_team, run_truth, stale_stored_ranks, stale_teams
from trustrank.accounts.services import membership_set
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.models import Finding
from trustrank.ranking.services import runs

pytestmark = pytest.mark.django_db

ROW = re.compile(r'<tr data-finding="(\d+)"[^>]*>.*?<td class="num rank">([^<]*)<', re.S)


@pytest.fixture(autouse=True)
def _fresh_worker():
    runs._PREVIOUS.clear()
    cache.clear()
    yield
    runs._PREVIOUS.clear()


# A small queue per team: the list's pages hold all of it.
SIZES = {"findings": 12, "services": 6, "edges": 10, "versions": 2}


def _ranks(truth: Truth) -> dict[int, tuple[int, int]]:
    """Finding id -> (rank, environment rank), as the run ranked them."""
    return {fid: (rank, env_rank) for fid, (_team, rank, _env, env_rank) in truth.items()}


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
    team = ranked_team("stale-one", 3, **SIZES)
    ranks = _ranks(run_truth([team.pk]))
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
    first, second, truth = stale_teams(("stale-first", "stale-second"), **SIZES)
    teams = [first.pk, second.pk]
    ranks = _ranks(truth)
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
    team = ranked_team("stale-groups", 3, **SIZES)
    ranks = _ranks(run_truth([team.pk]))
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
