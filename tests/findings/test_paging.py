"""Paging the findings list: contextual order without a team-wide sort, totals kept under the
team's generation and never stale after a write."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db.models import F
from django.utils import timezone

from trustrank.accounts.models import Team
from trustrank.findings.choices import FindingKind, FindingSource
from trustrank.findings.generation import findings_generation
from trustrank.findings.models import Finding
from trustrank.findings.paging import cached_count
from trustrank.findings.rank_rows import RankOrderedRows
from trustrank.ranking.models import RankContext, RankedFinding, RankingRun

pytestmark = pytest.mark.django_db


def _findings(team: Team, n: int, *, prefix: str = "f") -> list[Finding]:
    return [
        Finding.objects.create(
            team=team,
            kind=FindingKind.VULNERABILITY,
            source=FindingSource.OSV,
            fingerprint=f"{prefix}{i:04d}",
            title=f"finding {i}",
            severity_score=float(i % 10),
        )
        for i in range(n)
    ]


def _rank(team: Team, findings: list[Finding]) -> None:
    context = RankContext.objects.create(digest="c" * 64, data={})
    for place, finding in enumerate(findings, start=1):
        RankedFinding.objects.create(
            finding=finding, team=team, rank=place, env_rank=place, qkey=place, score=50.0,
            decision="scheduled", context=context,
        )


def _reference(team_ids: list[int]) -> list[int]:
    return list(
        Finding.objects.filter(team_id__in=team_ids)
        .order_by(F("ranked__rank").asc(nulls_last=True), "-baseline_priority", "-id")
        .values_list("id", flat=True)
    )


def test_rank_order_pages_match_the_sorted_query_across_the_ranked_boundary(team: Team) -> None:
    cache.clear()
    findings = _findings(team, 23)
    # Ranked in an order unrelated to creation; 8 findings stay unranked.
    _rank(team, sorted(findings[:15], key=lambda f: (f.pk * 7) % 15))
    rows = RankOrderedRows(Finding.objects.filter(team=team), team_ids=[team.pk])
    expected = _reference([team.pk])
    assert rows.count() == 23
    paged = [f.pk for start in range(0, 23, 5) for f in rows[start : start + 5]]
    assert paged == expected
    assert [f.pk for f in rows[13:17]] == expected[13:17]  # a page across the boundary
    assert rows[30:35] == []


def test_rank_order_applies_the_filter_to_both_parts(team: Team) -> None:
    cache.clear()
    findings = _findings(team, 12)
    _rank(team, findings[:6])
    qs = Finding.objects.filter(team=team, severity_score__gte=5)
    rows = RankOrderedRows(qs, team_ids=[team.pk])
    expected = [
        pk
        for pk in _reference([team.pk])
        if Finding.objects.get(pk=pk).severity_score >= 5
    ]
    assert [f.pk for f in rows[0:50]] == expected
    assert rows.count() == len(expected)


def test_a_total_follows_every_write_and_every_ranking_run(team: Team, other_team: Team) -> None:
    cache.clear()
    findings = _findings(team, 5)
    qs = Finding.objects.filter(team=team, title__startswith="finding")
    assert cached_count(qs, team_ids=[team.pk]) == 5
    before = findings_generation(team_ids=[team.pk])
    Finding.objects.filter(pk=findings[0].pk).update(
        title="renamed", updated_at=timezone.now()
    )
    assert findings_generation(team_ids=[team.pk]) != before
    assert cached_count(qs, team_ids=[team.pk]) == 4
    # Another team's writes leave this team's totals (and generation) alone.
    generation = findings_generation(team_ids=[team.pk])
    _findings(other_team, 2, prefix="o")
    assert findings_generation(team_ids=[team.pk]) == generation
    # A finished ranking run makes a new generation: decisions and ranks changed.
    RankingRun.objects.create(team=team, status="done")
    assert findings_generation(team_ids=[team.pk]) != generation


def test_capped_totals_are_kept_apart_from_exact_ones(team: Team) -> None:
    cache.clear()
    _findings(team, 7)
    qs = Finding.objects.filter(team=team)
    assert cached_count(qs, team_ids=[team.pk], cap=3) == 4
    assert cached_count(qs, team_ids=[team.pk]) == 7


def test_a_queryset_that_matches_nothing_counts_zero(team: Team) -> None:
    _findings(team, 3)
    assert cached_count(Finding.objects.none(), team_ids=[team.pk]) == 0
    assert RankOrderedRows(Finding.objects.none(), team_ids=[team.pk]).count() == 0


def test_the_page_walks_the_contextual_order_page_by_page(team: Team, make_user, client) -> None:
    cache.clear()
    findings = _findings(team, 120)
    _rank(team, sorted(findings[:70], key=lambda f: (f.pk * 13) % 70))
    client.force_login(make_user("walker", team=team))
    seen: list[int] = []
    url = "/findings/?ordering=rank&open=all"
    for _ in range(5):
        response = client.get(url)
        assert response.status_code == 200
        seen.extend(f.pk for f in response.context["findings"])
        if not response.context["next_query"]:
            break
        url = "/findings/?" + response.context["next_query"]
    assert seen == _reference([team.pk])


def test_the_api_pages_the_contextual_order_with_exact_totals(team: Team, api) -> None:
    cache.clear()
    findings = _findings(team, 30)
    _rank(team, findings[10:25])
    client = api(team, "read")
    first = client.get("/api/v1/findings?ordering=rank&open=all&page_size=20").json()
    second = client.get("/api/v1/findings?ordering=rank&open=all&page_size=20&page=2").json()
    assert first["count"] == 30
    assert [f["id"] for f in first["results"] + second["results"]] == _reference([team.pk])


def test_a_total_follows_a_deletion(team: Team) -> None:
    """Deleting findings (a project removed) leaves updated_at alone; the table's deletion
    counter still makes a new generation once PostgreSQL has flushed its statistics."""
    import time

    from django.db import connection

    cache.clear()
    findings = _findings(team, 4)
    qs = Finding.objects.filter(team=team)
    assert cached_count(qs, team_ids=[team.pk]) == 4
    before = findings_generation(team_ids=[team.pk])
    Finding.objects.filter(pk=findings[-1].pk).delete()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + 10
    while findings_generation(team_ids=[team.pk]) == before and time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_stat_clear_snapshot()")
        time.sleep(0.2)
    assert cached_count(qs, team_ids=[team.pk]) == 3
