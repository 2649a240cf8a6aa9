"""A search's matches (paging.SortedMatches): counted first, sorted by their ranks only when
they are not too many; a broad search's answer is the cap passed, without a rank asked."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from tests.findings.test_paging import _findings, _rank
from trustrank.accounts.models import Team
from trustrank.findings import paging
from trustrank.findings.filters import findings_ordered
from trustrank.findings.models import Finding

pytestmark = pytest.mark.django_db


def _matches(team: Team, prefix: str, ordering: str = "rank") -> paging.SortedMatches:
    qs = Finding.objects.filter(team=team, fingerprint__startswith=prefix)
    return paging.SortedMatches(findings_ordered(qs, ordering), team_ids=[team.pk])


def test_matches_up_to_the_cap_are_sorted_by_rank_and_more_are_broad(
    team: Team, monkeypatch
) -> None:
    cache.clear()
    monkeypatch.setattr(paging, "SEARCH_SORT_MAX", 3)
    at_cap = _findings(team, 3, prefix="a")
    over_cap = _findings(team, 4, prefix="b")
    # Ranked oldest first: the baseline order (priority, then id, descending) is the reverse,
    # so a page sorted without the ranks would come out otherwise.
    everything = sorted(at_cap + over_cap, key=lambda f: f.pk)
    _rank(team, everything)
    by_rank = [f.pk for f in at_cap]
    assert by_rank != list(
        Finding.objects.filter(pk__in=by_rank).order_by("-baseline_priority", "-id")
        .values_list("pk", flat=True)
    )

    narrow = _matches(team, "a")
    assert not narrow.broad and narrow.count() == 3
    assert narrow.ids(slice(0, 10)) == by_rank == narrow.query_ids(slice(0, 10))
    assert narrow.ids_after(by_rank[0], 2) == by_rank[1:]

    broad = _matches(team, "b")
    with CaptureQueriesContext(connection) as queries:
        assert broad.broad and broad.count() == 4
    # Counted without asking a rank for them: the rank's subquery never runs.
    (counted,) = [q["sql"] for q in queries.captured_queries if "match_total" in q["sql"]]
    with connection.cursor() as cur:
        cur.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {counted}")
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert "ranking_rankedfinding" in plan
    assert all("never executed" in line for line in plan.splitlines() if "rankedfinding" in line)
    assert broad.ids(slice(0, 2)) == [f.pk for f in over_cap[:2]]

    # The same matches in another order sort by its own keys, not the rank order's kept ones:
    # no due dates, so the baseline order.
    due = _matches(team, "a", ordering="due")
    assert due.ids(slice(0, 10)) == list(
        Finding.objects.filter(pk__in=by_rank)
        .order_by(F("due__due_date").asc(nulls_last=True), "-baseline_priority", "-id")
        .values_list("pk", flat=True)
    )


@pytest.mark.parametrize("ordering", ["rank", "-rank"])
def test_matches_read_each_rank_once_and_sort_as_the_list_does(team: Team, ordering) -> None:
    """The rank order sorts by the rank row's key and its link to the finding: the link is
    the match's own id where the row exists, so each match's rank row is probed once (at 10M
    findings a second probe was half of a 20,000-match search). Ranked and unranked matches
    come out in the order PostgreSQL gives the queryset itself."""
    cache.clear()
    found = _findings(team, 12, prefix="m")
    # Ranked in an order unlike the ids; equal keys are broken by the finding id.
    ranked = [found[i] for i in (7, 2, 9, 4, 0, 5)]
    _rank(team, ranked)
    from trustrank.ranking.models import RankedFinding

    RankedFinding.objects.filter(finding__in=ranked[2:4]).update(qkey=3)
    qs = findings_ordered(Finding.objects.filter(team=team, fingerprint__startswith="m"),
                          ordering)
    expected = list(qs.values_list("pk", flat=True))
    matches = paging.SortedMatches(qs, team_ids=[team.pk])
    with CaptureQueriesContext(connection) as queries:
        assert matches.count() == 12
    assert matches.ids(slice(0, 12)) == expected == matches.query_ids(slice(0, 12))
    assert matches.ids(slice(3, 7)) == expected[3:7]
    (sorted_sql,) = [q["sql"] for q in queries.captured_queries if "match_total" in q["sql"]]
    assert sorted_sql.count('FROM "ranking_rankedfinding"') == 1
    with connection.cursor() as cur:
        cur.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sorted_sql}")
        plan = "\n".join(row[0] for row in cur.fetchall())
    probes = [line for line in plan.splitlines() if "on ranking_rankedfinding" in line]
    assert len(probes) == 1 and "loops=12" in probes[0], plan
