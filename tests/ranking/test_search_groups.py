"""A package search from the search groups (trustrank/findings/search_groups.py): the same
ids, order and total as the filter itself, before and after findings are written since the
latest run; and every ranked row holding its finding's group after each kind of store."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import numpy as np
import pytest
from django.core.cache import cache
from django.db import connection
from django.db.models.functions import Lower
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.rerank import build
from tests.ranking.test_incremental_store import _run
from trustrank.accounts.models import Team
from trustrank.findings import paging
from trustrank.findings.choices import OPEN_STATES, FindingKind, FindingSource, TriageState
from trustrank.findings.filters import findings_ordered
from trustrank.findings.models import Finding, SearchGroup
from trustrank.findings.search_groups import GroupedMatches
from trustrank.ranking.inputs.ids import FindingIds
from trustrank.ranking.models import RankingRun
from trustrank.ranking.ranks import ranked_rows_as_of
from trustrank.ranking.services import runs

pytestmark = pytest.mark.django_db

# Findings' groups and their rows' groups that differ (a row without one counts).
_STALE_ROWS = """
SELECT count(*) FROM ranking_rankedfinding r JOIN findings_finding f ON f.id = r.finding_id
 WHERE r.team_id = %s AND r.search_group IS DISTINCT FROM
       findings_search_group(f.package_name, f.component_name, f.component_purl)
"""


def _stale_rows(team_id: int) -> int:
    with connection.cursor() as cur:
        cur.execute(_STALE_ROWS, [team_id])
        return int(cur.fetchone()[0])


def _expected(team_id: int, q: str) -> list[int]:
    """The filter's own answer: open findings whose search text holds `q`, in the rank
    order as PostgreSQL sorts it."""
    qs = Finding.objects.filter(team_id=team_id, state__in=OPEN_STATES)
    if q.lower().startswith("pkg:"):  # a purl search: purls that start with it
        qs = qs.alias(purl=Lower("component_purl")).filter(purl__startswith=q.lower())
    else:
        qs = qs.filter(search_text__contains=q.lower())
    return list(findings_ordered(qs, "rank").values_list("id", flat=True))


def _listed(client, q: str) -> tuple[int, list[int], bool]:
    """(count, ids of the whole list, whether the groups answered it) from the API."""
    cache.clear()
    with CaptureQueriesContext(connection) as queries:
        body = client.get("/api/v1/findings", {"q": q, "page_size": 1000}).json()
    # The groups were asked, and the matches were not sorted from the findings
    # (`paging.SortedMatches` counts them as `match_total`).
    sql = [x["sql"] for x in queries.captured_queries]
    grouped = any("findings_searchgroup" in x for x in sql) and not any(
        "match_total" in x for x in sql)
    return body["count"], [row["id"] for row in body["results"]], grouped


@pytest.fixture
def bench_team() -> Team:
    runs._PREVIOUS.clear()
    team_id = build(findings=3000, services=30, edges=60, versions=12, seed=11)
    # Written long before the run, as a team's findings mostly are: the list reads them
    # from the index, not as findings written since the run.
    Finding.objects.filter(team_id=team_id).update(
        updated_at=timezone.now() - timedelta(hours=2))
    _run(team_id)
    return Team.objects.get(pk=team_id)


def test_a_package_search_from_the_groups_is_the_filters_answer(
    bench_team: Team, api, make_user, client
) -> None:
    reader = api(bench_team, "read")
    assert _stale_rows(bench_team.pk) == 0
    # A finding whose package name holds a purl's start, but whose purl does not.
    odd = Finding.objects.create(
        team=bench_team, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
        fingerprint="odd", vuln_id="CVE-2024-88888", package_name="pkg:maven/org.bench/odd",
        component_name="odd", component_purl="pkg:npm/odd@1.0", severity_score=5.0)
    _run(bench_team.pk)
    # As if the run was long after it was written.
    Finding.objects.filter(pk=odd.pk).update(updated_at=timezone.now() - timedelta(hours=2))
    found = GroupedMatches.find(Finding.objects.filter(team=bench_team), team_id=bench_team.pk,
                                spellings=["pkg345"], as_of=ranked_rows_as_of)
    assert found is not None and found._written == []  # every match from the index
    # Package names, parts of them, component names, purl prefixes (a purl search matches
    # a purl from its start: `maven/org.bench/pkg12` is in every text of pkg12, but
    # `pkg:bench` starts none).
    for q in ("pkg345", "PKG34", "kg49", "org.bench:pkg7", "pkg:maven/org.bench/pkg12@",
              "pkg:maven/org.bench/pkg4", "pkg:MAVEN/org.bench/pkg49", "pkg:maven/org.bench/od",
              "pkg:npm/odd"):
        expected = _expected(bench_team.pk, q)
        assert len(expected) == (1 if "odd" in q else 0) or len(expected) > 1, q
        count, ids, grouped = _listed(reader, q)
        assert (count, ids) == (len(expected), expected), q
        # pkg4, pkg40…49 and pkg400…499: more texts than GROUPS_MAX, answered as before.
        assert grouped == (q != "pkg:maven/org.bench/pkg4"), q
    # The page reads the same matches: its first row is the search's first.
    client.force_login(make_user("ann", team=bench_team))
    page = client.get("/findings/", {"q": "pkg345"})
    assert page.status_code == 200
    linked = re.findall(r'<a href="/findings/(\d+)/', page.content.decode())
    assert linked and int(linked[0]) == _expected(bench_team.pk, "pkg345")[0]
    # The groups table answers only one team's list in the rank order: another order is
    # answered by the matches sorted as before, with the same findings.
    body = reader.get("/api/v1/findings", {"q": "pkg345", "ordering": "baseline"}).json()
    assert sorted(row["id"] for row in body["results"]) == sorted(_expected(bench_team.pk,
                                                                            "pkg345"))


def test_a_broad_package_search_is_counted_to_the_cap_and_paged_like_the_list(
    bench_team: Team, api, monkeypatch
) -> None:
    """More matches than a search sorts: the index's count stops past the cap, and the
    list's order gives the page, as for any broad search (`paging.SEARCH_SORT_MAX`)."""
    monkeypatch.setattr(paging, "SEARCH_SORT_MAX", 20)
    reader = api(bench_team, "read")
    expected = _expected(bench_team.pk, "pkg34")
    assert len(expected) > 20
    found = GroupedMatches.find(Finding.objects.filter(team=bench_team), team_id=bench_team.pk,
                                spellings=["pkg34"], as_of=ranked_rows_as_of)
    assert found is not None and found.broad and found.count() == 21
    cache.clear()
    body = reader.get("/api/v1/findings", {"q": "pkg34"}).json()
    # Paged by walking the list's order, its total the API's cap, not counted.
    assert body["count_exact"] is False
    assert [row["id"] for row in body["results"]] == expected[:50]


def test_an_advisory_match_or_a_space_is_answered_as_before(bench_team: Team, api) -> None:
    client = api(bench_team, "read")
    since = ranked_rows_as_of(bench_team.pk)
    assert since is not None
    qs = Finding.objects.filter(team=bench_team)
    # An id is in the advisory half; a space could span the two halves.
    assert GroupedMatches.find(qs, team_id=bench_team.pk, spellings=["cve-2024-00345"],
                               as_of=ranked_rows_as_of) is None
    assert GroupedMatches.find(qs, team_id=bench_team.pk, spellings=["pkg345 pkg"],
                               as_of=ranked_rows_as_of) is None
    assert GroupedMatches.find(qs, team_id=bench_team.pk, spellings=["pkg345"],
                               as_of=ranked_rows_as_of) is not None
    for q in ("CVE-2024-00345", "00345 pkg"):
        count, ids, grouped = _listed(client, q)
        assert not grouped
        assert (count, ids) == (len(_expected(bench_team.pk, q)), _expected(bench_team.pk, q))


def test_findings_written_since_the_run_are_checked_against_the_filter(
    bench_team: Team, api
) -> None:
    """Closed, renamed and new findings show as the filter says before the next run; the
    next run (incremental) sets the renamed finding's row to its new group."""
    client = api(bench_team, "read")
    team_id = bench_team.pk
    matching = _expected(team_id, "pkg345")
    closed, renamed = matching[0], matching[1]
    now = timezone.now()
    Finding.objects.filter(pk=closed).update(state=TriageState.NOT_AFFECTED, updated_at=now)
    Finding.objects.filter(pk=renamed).update(
        package_name="zzlib", component_name="org.bench:zzlib",
        component_purl="pkg:maven/org.bench/zzlib@1.0", updated_at=now)
    new = Finding.objects.create(
        team=bench_team, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
        fingerprint="new-pkg345", vuln_id="CVE-2024-99999", package_name="pkg345",
        component_name="org.bench:pkg345", component_purl="pkg:maven/org.bench/pkg345@2.0",
        severity_score=9.9,
    )
    # The triggers keep the groups table: the new texts are there before any run.
    assert SearchGroup.objects.filter(text__contains="zzlib").exists()
    assert SearchGroup.objects.filter(text="pkg345 org.bench:pkg345 pkg:maven/org.bench/pkg345@2.0",
                                      part=SearchGroup.COMPONENT_PART).exists()
    for q, inside, outside in (("pkg345", new.pk, (closed, renamed)),
                               ("zzlib", renamed, (closed,))):
        expected = _expected(team_id, q)
        count, ids, grouped = _listed(client, q)
        # pkg4, pkg40…49 and pkg400…499: more texts than GROUPS_MAX, answered as before.
        assert grouped == (q != "pkg:maven/org.bench/pkg4"), q
        assert (count, ids) == (len(expected), expected), q
        assert inside in ids and not set(outside) & set(ids), q
    # The unranked new finding comes after every ranked one.
    assert _listed(client, "pkg345")[1][-1] == new.pk
    assert _stale_rows(team_id) == 1  # the renamed finding's row, until the next run

    run = _run(team_id)
    assert run.incremental
    assert run.counts["search_groups_set"] >= 1
    assert _stale_rows(team_id) == 0
    for q in ("pkg345", "zzlib"):
        expected = _expected(team_id, q)
        assert _listed(client, q)[:2] == (len(expected), expected), q


def test_every_ranked_row_holds_its_findings_group_after_each_kind_of_store(
    bench_team: Team,
) -> None:
    team_id = bench_team.pk
    # The first store writes the group with each row (no mend needed).
    first = RankingRun.objects.filter(team_id=team_id).order_by("pk").first()
    assert first is not None and first.counts["search_groups_set"] == 0
    # Rows without a group (a store before ranking.0012) get theirs at the next store.
    with connection.cursor() as cur:
        cur.execute("UPDATE ranking_rankedfinding SET search_group = NULL "
                    "WHERE team_id = %s AND finding_id %% 3 = 0", [team_id])
    assert _stale_rows(team_id) > 0
    _run(team_id)
    assert _stale_rows(team_id) == 0
    # An incremental run that writes new rows writes them with their groups.
    for n in range(5):
        Finding.objects.create(
            team_id=team_id, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
            fingerprint=f"new-{n}", vuln_id=f"CVE-2024-9000{n}", package_name=f"newlib{n}",
            component_name=f"org.bench:newlib{n}",
            component_purl=f"pkg:maven/org.bench/newlib{n}@1.0", severity_score=9.0,
        )
    run = _run(team_id)
    assert run.incremental and run.counts["updated"] > 0
    assert _stale_rows(team_id) == 0
    # A full run over a stored queue.
    runs._PREVIOUS.clear()
    run = _run(team_id)
    assert not run.incremental
    assert _stale_rows(team_id) == 0


def test_each_finding_stores_its_component_search_group(bench_team: Team) -> None:
    """`Finding.search_group`, what the gather reads, is the function's value and names a
    component `SearchGroup`, and follows a changed component."""
    sql = """SELECT count(*),
       count(*) FILTER (WHERE f.search_group IS DISTINCT FROM
                        findings_search_group(f.package_name, f.component_name, f.component_purl)),
       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM findings_searchgroup g
                                           WHERE g.id = f.search_group AND g.part = 0))
  FROM findings_finding f WHERE f.team_id = %s"""
    with connection.cursor() as cur:
        cur.execute(sql, [bench_team.pk])
        total, differ, unnamed = cur.fetchone()
    assert total >= 3000 and differ == 0 and unnamed == 0
    f = Finding.objects.filter(team=bench_team).order_by("pk").first()
    before = f.search_group
    f.package_name, f.component_purl = "Ünïcode-Pkg", "pkg:npm/%C3%BCn%C3%AFcode-pkg@1.0"
    f.save()
    f.refresh_from_db()
    assert f.search_group != before
    assert SearchGroup.objects.get(pk=f.search_group).text == (
        f"ünïcode-pkg {f.component_name.lower()} pkg:npm/%c3%bcn%c3%afcode-pkg@1.0")


def test_finding_ids_keep_each_group_with_its_id() -> None:
    rnd = random.Random(5)
    for _ in range(50):
        pks = rnd.sample(range(1, 400), rnd.randint(0, 120))
        groups = {pk: rnd.randint(-(2**63), 2**63 - 1) for pk in pks}
        ids = FindingIds(pks, groups=[groups[pk] for pk in pks])
        closed = rnd.sample(pks, min(len(pks), rnd.randint(0, 10)))
        read = rnd.sample(range(1, 400), rnd.randint(0, 30))
        read = [pk for pk in read if pk not in closed]
        new_groups = {pk: rnd.randint(-100, 100) for pk in read}
        out = ids.updated(closed=[str(pk) for pk in closed], read=read,
                          read_groups=[new_groups[pk] for pk in read])
        want = {pk: g for pk, g in groups.items() if pk not in closed} | new_groups
        assert out.pks.tolist() == sorted(want)
        assert out.groups is not None
        assert out.groups.tolist() == [want[pk] for pk in sorted(want)]
        # The groups of ids asked in any order; None for one that is not there.
        asked = np.array(rnd.sample(sorted(want), len(want)), dtype=np.int64)
        found = out.groups_of(asked)
        assert found is not None and found.tolist() == [want[pk] for pk in asked.tolist()]
        assert out.groups_of(np.array([1000], dtype=np.int64)) is None
        # The ids they were made from are left as they were.
        assert ids.groups is not None
        assert ids.groups.tolist() == [groups[pk] for pk in sorted(groups)]
