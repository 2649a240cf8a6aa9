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
