"""The findings list's totals (trustrank/findings/totals.py): a missing total is counted by
one request while the others wait for it; a large list answers an estimate and still pages
to its last finding; a small list keeps its exact count."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.cache import cache
from django.db import connection

from tests.findings.helpers import many_findings
from trustrank.accounts.models import Team
from trustrank.findings import totals
from trustrank.findings.models import Finding
from trustrank.findings.totals import Total, about, cached_count, list_total
from trustrank.lib.single_flight import cache_get_or_compute_once


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    cache.clear()


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_for_a_missing_total_count_it_once(team: Team) -> None:
    """Four requests (threads, each with its own database connection) miss the same total at
    once: one COUNT runs, and all four answer its value."""
    many_findings(team, 7)
    qs = Finding.objects.filter(team=team)
    counts: list[str] = []
    answers: list[int] = []
    start = threading.Barrier(4)

    def slow_counts(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if sql.startswith("SELECT COUNT(*)"):
            counts.append(sql)
            time.sleep(0.3)  # long enough for the others to find it missing
        return execute(sql, params, many, context)

    def request() -> None:
        try:
            with connection.execute_wrapper(slow_counts):
                start.wait()
                answers.append(cached_count(qs, team_ids=[team.pk]))
        finally:
            connection.close()

    threads = [threading.Thread(target=request) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [7, 7, 7, 7]
    assert len(counts) == 1


def test_a_request_that_finds_a_total_being_computed_answers_the_estimate(
    team: Team, settings, monkeypatch
) -> None:
    """Another worker holds the claim and has not answered within the wait: the planner's
    estimate, not exact, and not kept (the next request counts)."""
    settings.TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS = 0.05
    monkeypatch.setattr(totals, "planner_rows", lambda qs: 4321)
    many_findings(team, 3)
    qs = Finding.objects.filter(team=team)
    key = totals._key(qs, team_ids=[team.pk],
                      what=("total", settings.TRUSTRANK_FINDINGS_EXACT_COUNT_MAX))
    assert cache.add(f"{key}:claim", 1)
    assert list_total(qs, team_ids=[team.pk]) == Total(4320, exact=False)
    cache.delete(f"{key}:claim")
    assert list_total(qs, team_ids=[team.pk]) == Total(3, exact=True)


def test_a_capped_count_waits_for_the_other_worker_and_counts_itself_after(
    team: Team, settings
) -> None:
    settings.TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS = 0.05
    many_findings(team, 3)
    qs = Finding.objects.filter(team=team)
    key = totals._key(qs, team_ids=[team.pk], what=2)
    cache.add(f"{key}:claim", 1)
    assert cached_count(qs, team_ids=[team.pk], cap=2) == 3  # exact all the same


def test_a_waiting_caller_gets_the_value_the_claim_holder_computes() -> None:
    computed: list[int] = []
    started = threading.Event()

    def slow() -> int:
        started.set()
        time.sleep(0.2)
        computed.append(1)
        return 42

    holder = threading.Thread(
        target=lambda: cache_get_or_compute_once("k", slow, timeout=60, wait=2)
    )
    holder.start()
    started.wait(2)
    got = cache_get_or_compute_once(
        "k", lambda: computed.append(2) or 0, timeout=60, wait=2, fallback=lambda: -1
    )
    holder.join()
    assert got == 42 and computed == [1]


@pytest.mark.django_db
def test_a_small_list_keeps_its_exact_count_without_asking_the_planner(
    team: Team, api, django_assert_max_num_queries
) -> None:
    from django.test.utils import CaptureQueriesContext

    many_findings(team, 4)
    client = api(team, "read")
    with CaptureQueriesContext(connection) as queries:
        body = client.get("/api/v1/findings").json()
    assert body["count"] == 4 and body["count_exact"] is True
    assert not [q for q in queries.captured_queries if q["sql"].startswith("EXPLAIN")]


@pytest.mark.django_db
@pytest.mark.parametrize("planned", [2, 1_000_000])
def test_a_large_list_answers_an_estimate_and_pages_to_its_last_finding(
    team: Team, api, settings, monkeypatch, planned: int
) -> None:
    """Beyond TRUSTRANK_FINDINGS_EXACT_COUNT_MAX the total is the planner's (never below what
    was counted), and `next` follows the rows, whether the estimate is too low or too high."""
    settings.TRUSTRANK_FINDINGS_EXACT_COUNT_MAX = 5
    monkeypatch.setattr(totals, "planner_rows", lambda qs: planned)
    many_findings(team, 12)
    client = api(team, "read")
    expected = list(
        Finding.objects.filter(team=team).order_by("-baseline_priority", "-id")
        .values_list("pk", flat=True)
    )
    seen: list[int] = []
    url = "/api/v1/findings?ordering=baseline&page_size=5"
    pages = 0
    while url and pages < 10:  # a next that never ends fails below, not by hanging
        body = client.get(url).json()
        assert body["count_exact"] is False
        assert body["count"] == max(6, about(planned))
        seen += [f["id"] for f in body["results"]]
        url = body["next"]
        pages += 1
    assert seen == expected and pages == 3
    # A page past the rows is not found, whatever the estimate.
    assert client.get("/api/v1/findings?ordering=baseline&page_size=5&page=4").status_code == 404


@pytest.mark.django_db
def test_a_kept_page_of_an_estimated_list_keeps_its_estimate_and_next(
    team: Team, api, settings, monkeypatch
) -> None:
    settings.TRUSTRANK_FINDINGS_EXACT_COUNT_MAX = 5
    settings.TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS = 60
    monkeypatch.setattr(totals, "planner_rows", lambda qs: 3)
    many_findings(team, 12)
    client = api(team, "read")
    first = client.get("/api/v1/findings?page_size=5&page=2").json()
    kept = client.get("/api/v1/findings?page_size=5&page=2").json()
    assert kept == first
    assert first["count_exact"] is False and first["next"] is not None


@pytest.mark.django_db
def test_the_page_says_about_for_an_estimated_total(
    team: Team, make_user, client, settings, monkeypatch
) -> None:
    settings.TRUSTRANK_FINDINGS_EXACT_COUNT_MAX = 5
    monkeypatch.setattr(totals, "planner_rows", lambda qs: 123_456)
    many_findings(team, 8)
    client.force_login(make_user("erin", team=team))
    assert "About 123000 findings" in client.get("/findings/").content.decode()
    settings.TRUSTRANK_FINDINGS_EXACT_COUNT_MAX = 100
    cache.clear()
    assert "8 findings" in client.get("/findings/").content.decode()


@pytest.mark.django_db
def test_the_planner_estimate_is_plausible_for_an_analyzed_team(team: Team) -> None:
    many_findings(team, 40)
    with connection.cursor() as cur:
        cur.execute("ANALYZE findings_finding")
    assert 20 <= totals.planner_rows(Finding.objects.filter(team=team)) <= 80


def test_estimates_keep_three_digits() -> None:
    assert [about(n) for n in (999, 1234, 1_003_456, 987_654)] == [999, 1230, 1_000_000, 988_000]
