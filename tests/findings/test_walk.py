"""The contextual order's first page from a bounded walk of the rank order, or from the
matches sorted when that walk comes back short (trustrank/findings/walk.py): the same ids in
the same order as the walk of the whole rank index, wherever the matches sit in the order."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db.models import QuerySet

from trustrank.accounts.models import Team
from trustrank.findings import walk
from trustrank.findings.choices import FindingKind, FindingSource
from trustrank.findings.models import Finding
from trustrank.findings.rank_rows import RankOrderedRows
from trustrank.findings.search import purl_condition, substring_condition
from trustrank.ranking.models import RankContext, RankedFinding

pytestmark = pytest.mark.django_db

RANKED = 150
UNRANKED = 30


def _package(place: int) -> str:
    """Where each package's findings sit in the rank order (`place`, 0 first; unranked
    findings have places RANKED and up)."""
    if place < 12:
        return "alpha"  # the top of the order only
    if RANKED - 20 <= place < RANKED:
        return "omega"  # the bottom of the ranked part only
    if place >= RANKED + 10:
        return "tail"  # unranked only
    if place % 9 == 0:
        return "spread"  # every ninth, ranked and unranked
    return f"filler{place % 4}"


@pytest.fixture
def seeded(team: Team, other_team: Team) -> Team:
    """RANKED ranked findings (keys in threes: ties broken by id) in an order unrelated to
    their ids, then UNRANKED more, and another team's findings of the same packages."""
    context = RankContext.objects.create(digest="w" * 64, data={})
    places = sorted(range(RANKED + UNRANKED), key=lambda p: (p * 37) % (RANKED + UNRANKED))
    for n, place in enumerate(places):
        package = _package(place)
        finding = Finding.objects.create(
            team=team, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
            fingerprint=f"w{n:04d}", title=f"finding {n}", severity_score=float(n % 10),
            package_name=package, component_purl=f"pkg:maven/org.walk/{package}@1.{n}",
            vuln_id=f"CVE-2024-{place % 40:05d}", cve_id=f"CVE-2024-{place % 40:05d}",
        )
        if place < RANKED:
            RankedFinding.objects.create(
                finding=finding, team=team, rank=place // 3, env_rank=place, qkey=place // 3,
                score=50.0,
                decision="scheduled", context=context,
            )
    for n in range(10):
        Finding.objects.create(
            team=other_team, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
            fingerprint=f"o{n:04d}", title=f"other {n}", package_name="alpha",
            component_purl=f"pkg:maven/org.walk/alpha@9.{n}",
        )
    return team


def _walked(qs: QuerySet[Finding], team: Team) -> list[int]:
    """The order as the walk of the whole key index gives it (ties of the key by id), then
    the unranked by baseline priority."""
    ranked = qs.filter(ranked__team_id=team.pk).order_by("ranked__qkey", "id")
    unranked = qs.filter(ranked__isnull=True).order_by("-baseline_priority", "-id")
    return [*ranked.values_list("id", flat=True), *unranked.values_list("id", flat=True)]


def _searches(team: Team) -> dict[str, QuerySet[Finding]]:
    mine = Finding.objects.filter(team=team)
    return {
        "purl prefix at the top": purl_condition(mine, "pkg:maven/org.walk/alpha"),
        "purl prefix at the bottom": purl_condition(mine, "pkg:maven/org.walk/omega"),
        "substring spread": substring_condition(mine, ["spread"]),
        "substring unranked only": substring_condition(mine, ["tail"]),
        "cve fragment": substring_condition(mine, ["cve-2024-0000"]),
        "two packages": substring_condition(mine, ["omega", "alpha"]),
        "with a filter": substring_condition(mine.filter(severity_score__gte=5), ["filler"]),
        "no match": substring_condition(mine, ["nowhere"]),
        "everything": mine,
    }


@pytest.mark.parametrize(("walk_rows", "sort_max"), [
    (5000, 250_000),  # the bounded walk reaches the end of the ranked part
    (20, 250_000),  # short walks fall back to the sort
    (20, 5),  # ... and to the walk of the whole order past SORT_MATCHES_MAX
    (1, 250_000),
])
def test_first_pages_are_those_of_the_walk_wherever_the_matches_sit(
    seeded: Team, monkeypatch: pytest.MonkeyPatch, walk_rows: int, sort_max: int
) -> None:
    monkeypatch.setattr(walk, "WALK_ROWS", walk_rows)
    monkeypatch.setattr(walk, "SORT_MATCHES_MAX", sort_max)
    for name, qs in _searches(seeded).items():
        cache.clear()
        expected = _walked(qs, seeded)
        for size in (1, 4, 10, 50):
            rows = RankOrderedRows(qs, team_ids=[seeded.pk])
            assert [f.pk for f in rows[0:size]] == expected[:size], (name, size)
        # A later page within the bound, across the ranked part's end too.
        rows = RankOrderedRows(qs, team_ids=[seeded.pk])
        assert [f.pk for f in rows[5:60]] == expected[5:60], name


def test_the_bounded_walk_says_when_it_came_back_short(seeded: Team) -> None:
    mine = Finding.objects.filter(team=seeded)
    bottom = purl_condition(mine, "pkg:maven/org.walk/omega")
    expected = _walked(bottom, seeded)
    # The omega findings sit in the last 20 ranked places: 30 rows of the walk find none.
    assert walk.bounded_walk(bottom, team_id=seeded.pk, stop=5, rows=30) == ([], False)
    # The whole ranked part walked: what it found is the answer, however short.
    ids, complete = walk.bounded_walk(bottom, team_id=seeded.pk, stop=50, rows=RANKED + 1)
    assert complete and ids == expected[:20]
    # The sort gives the same page, and declines above its bound.
    assert walk.sorted_matches(bottom, team_id=seeded.pk, start=0, stop=5) == expected[:5]
    assert walk.sorted_matches(bottom, team_id=seeded.pk, start=0, stop=5, most=19) is None
