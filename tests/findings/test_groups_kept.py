"""A groups page that took long is kept in PostgreSQL (`findings.group_kept`): once the
findings moved on, it is shown as it was, with when, while one job of the kind
"finding_groups" groups it again; the next view shows the job's page."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.findings.test_groups import _aggregates, _by_package, estate  # noqa: F401
from trustrank.findings.models import Finding
from trustrank.findings.records import FindingGroupsJob
from trustrank.jobs.models import JobStatus
from trustrank.jobs.runner import job_run

URL = "/api/v1/findings/groups?by=fix"


@pytest.fixture(autouse=True)
def _empty_cache(settings):
    cache.clear()
    # Regrouped as soon as asked, unless a test says otherwise.
    settings.TRUSTRANK_FINDINGS_GROUPS_REGROUP_EVERY_SECONDS = 0
    yield
    cache.clear()


def _resolve(pk: int) -> None:
    f = Finding.objects.get(pk=pk)
    f.state = "resolved"
    f.save()


def _get(client, url: str = URL) -> tuple[dict, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return response.json(), _aggregates(queries.captured_queries)


@pytest.mark.django_db
def test_a_slow_page_is_shown_as_it_was_while_one_job_groups_it_again(
        api, team, estate, settings):  # noqa: F811
    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = 1e-9  # every page is slow
    client = api(team, "read")
    first, ran = _get(client)
    assert ran == 1 and first["refreshing"] is False and first["as_of"] is None
    kept = FindingGroupsJob.objects.get()
    assert kept.status == JobStatus.DONE and kept.worker == "web" and kept.team_id == team.pk

    # The findings move on: the kept page is shown at once, marked, and one job is queued.
    _resolve(estate["m1"])
    stale, ran = _get(client)
    assert ran == 0 and stale["refreshing"] is True
    assert stale["as_of"] == kept.finished_at.isoformat()
    assert stale["results"] == first["results"]
    again, ran = _get(client)
    assert ran == 0 and again["refreshing"] is True
    job = FindingGroupsJob.objects.get(status=JobStatus.QUEUED)
    assert job.key == kept.key and job.job_class == "batch" and job.team_ids == [team.pk]

    assert job_run(kind_name="finding_groups", job_id=str(job.pk)) == JobStatus.DONE
    job.refresh_from_db()
    assert job.status == JobStatus.DONE and job.seconds is not None and job.page
    # The older page is gone; the next view reads the job's, with the change.
    assert list(FindingGroupsJob.objects.values_list("pk", flat=True)) == [job.pk]
    fresh, ran = _get(client)
    assert ran == 0 and fresh["refreshing"] is False and fresh["as_of"] is None
    minimist = _by_package(fresh["results"])["minimist"]
    assert estate["m1"] not in minimist["finding_ids"]
    assert estate["m1"] in _by_package(first["results"])["minimist"]["finding_ids"]
    # Grouped within the team: another team's minimist is not counted.
    assert "secret-project" not in str(fresh)


@pytest.mark.django_db
def test_a_page_kept_long_ago_goes_when_the_team_keeps_another(api, team, estate,  # noqa: F811
                                                               settings):
    from datetime import timedelta

    from trustrank.findings.group_kept import KEPT_DAYS

    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = 1e-9
    client = api(team, "read")
    _get(client, URL + "&kev=true")
    old = FindingGroupsJob.objects.get()
    FindingGroupsJob.objects.filter(pk=old.pk).update(
        finished_at=old.finished_at - timedelta(days=KEPT_DAYS, seconds=1))
    _get(client)
    assert not FindingGroupsJob.objects.filter(pk=old.pk).exists()
    assert FindingGroupsJob.objects.count() == 1


@pytest.mark.django_db
def test_a_failed_regrouping_is_not_asked_again_at_once(api, team, estate,  # noqa: F811
                                                       settings, monkeypatch):
    from datetime import timedelta

    from trustrank.findings import group_kept
    from trustrank.ranking.services import group_jobs

    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = 1e-9
    client = api(team, "read")
    first, _ = _get(client)
    _resolve(estate["m1"])
    _get(client)
    job = FindingGroupsJob.objects.get(status=JobStatus.QUEUED)

    def broken(**_):
        raise RuntimeError("grouping broke")

    monkeypatch.setattr(group_jobs.groups, "page_computed", broken)
    assert job_run(kind_name="finding_groups", job_id=str(job.pk)) == JobStatus.FAILED
    # The kept page is still answered; no job is queued while the failure is recent.
    for _ in range(3):
        stale, ran = _get(client)
        assert ran == 0 and stale["refreshing"] is True and stale["results"] == first["results"]
    assert not FindingGroupsJob.objects.filter(status=JobStatus.QUEUED).exists()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "grouping broke" in job.error
    # Once the pause is over, the next view asks again.
    FindingGroupsJob.objects.filter(pk=job.pk).update(
        finished_at=job.finished_at - group_kept.FAILED_PAUSE - timedelta(seconds=1))
    _get(client)
    assert FindingGroupsJob.objects.filter(status=JobStatus.QUEUED).count() == 1


@pytest.mark.django_db
def test_a_kept_page_that_no_longer_reads_is_computed_again(api, team, estate,  # noqa: F811
                                                           settings):
    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = 1e-9
    client = api(team, "read")
    _get(client)
    FindingGroupsJob.objects.update(page=b"not a page")
    _resolve(estate["m1"])
    body, ran = _get(client)
    assert ran == 1 and body["refreshing"] is False


@pytest.mark.django_db
def test_each_filter_and_slice_is_its_own_kept_page(api, team, estate, settings):  # noqa: F811
    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = 1e-9
    client = api(team, "read")
    _get(client)
    kev, _ = _get(client, URL + "&kev=true")
    assert FindingGroupsJob.objects.values("key").distinct().count() == 2
    _resolve(estate["m2"])  # the KEV finding
    stale, _ = _get(client, URL + "&kev=true")
    assert stale["refreshing"] is True and stale["results"] == kev["results"]
    job = FindingGroupsJob.objects.get(status=JobStatus.QUEUED)
    assert job.filter["kev"] == ["true"]
    assert job_run(kind_name="finding_groups", job_id=str(job.pk)) == JobStatus.DONE
    fresh, _ = _get(client, URL + "&kev=true")
    assert fresh["refreshing"] is False and fresh["count"] == 0


@pytest.mark.django_db
@pytest.mark.parametrize("above", [5.0, 0.0])
def test_a_fast_page_or_the_setting_at_zero_keeps_no_row(api, team, estate, settings,  # noqa: F811
                                                        above):
    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = above
    client = api(team, "read")
    _get(client)
    _resolve(estate["m1"])
    body, ran = _get(client)
    assert ran == 1 and body["refreshing"] is False
    assert not FindingGroupsJob.objects.exists()


@pytest.mark.django_db
def test_the_page_says_when_it_was_grouped_while_it_is_grouped_again(
        client, make_user, team, estate, settings):  # noqa: F811
    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = 1e-9
    client.force_login(make_user("viewer", team=team, role="viewer"))
    html = client.get("/findings/groups/?by=vulnerability").content.decode()
    assert 'data-testid="groups-refreshing"' not in html
    _resolve(estate["m1"])
    html = client.get("/findings/groups/?by=vulnerability").content.decode()
    assert 'data-testid="groups-refreshing"' in html and "being grouped again" in html
    assert "GHSA-xvch-5gv4-984h" in html


@pytest.mark.django_db(transaction=True)
def test_a_worker_groups_the_page_again_end_to_end(api, team, other_team, celery_worker,
                                                   settings):
    """Through the broker and a worker process: the view after the findings moved answers
    with the kept page and queues the job; the worker groups it; a later view shows it."""
    from tests.findings.test_groups import project, vf

    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = 1e-9
    shop = project(team, "shop")
    kept = vf(team, shop, eco="npm", pkg="minimist", version="1.2.5", fixed=["1.2.6"])
    vf(team, shop, eco="npm", pkg="left-pad", version="1.0.0", fixed=["1.0.1"])
    client = api(team, "read")
    first, _ = _get(client)
    assert {g["package"] for g in first["results"]} == {"minimist", "left-pad"}
    _resolve(kept.pk)
    stale, _ = _get(client)
    assert stale["refreshing"] is True
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if FindingGroupsJob.objects.filter(status=JobStatus.DONE, worker__gt="",
                                           ).exclude(worker="web").exists():
            break
        time.sleep(0.2)
    job = FindingGroupsJob.objects.exclude(worker="web").get()
    assert job.status == JobStatus.DONE, (job.status, job.error)
    fresh, _ = _get(client)
    assert fresh["refreshing"] is False
    assert {g["package"] for g in fresh["results"]} == {"left-pad"}


@pytest.mark.django_db
def test_a_kept_page_is_not_grouped_again_within_the_interval(api, team, estate,  # noqa: F811
                                                              settings):
    """Under writes every few seconds a viewed page is regrouped once an interval: the job
    asked for waits until the interval after the last grouping is over."""
    from datetime import timedelta

    settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = 1e-9
    settings.TRUSTRANK_FINDINGS_GROUPS_REGROUP_EVERY_SECONDS = 60
    client = api(team, "read")
    _get(client)
    kept = FindingGroupsJob.objects.get()
    _resolve(estate["m1"])
    stale, _ = _get(client)
    assert stale["refreshing"] is True
    job = FindingGroupsJob.objects.get(status=JobStatus.QUEUED)
    assert job.not_before == kept.finished_at + timedelta(seconds=60)
    # Its message comes back later; a worker that gets it early does not run it.
    assert job_run(kind_name="finding_groups", job_id=str(job.pk)) == "waiting"
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and job.attempts == 0
    # Once the interval is over it runs.
    FindingGroupsJob.objects.filter(pk=job.pk).update(not_before=job.created_at)
    assert job_run(kind_name="finding_groups", job_id=str(job.pk)) == JobStatus.DONE


def _slow_statements(monkeypatch, seconds: float) -> None:
    """Every groups statement takes at least `seconds` (a sleep in PostgreSQL, before it)."""
    from trustrank.findings import groups

    tune = groups._tune

    def slow(cursor, statement_seconds=0.0):
        tune(cursor, statement_seconds)
        cursor.execute("SELECT pg_sleep(%s)", [seconds])

    monkeypatch.setattr(groups, "_tune", slow)


@pytest.mark.django_db
def test_a_page_too_long_for_a_request_is_grouped_by_a_job_from_the_first_view(
        api, team, estate, settings, monkeypatch):  # noqa: F811
    settings.TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS = 0.2
    client = api(team, "read")
    _slow_statements(monkeypatch, 2)
    # Not run to the end: the budget cancelled it (run to the end, it would answer 200).
    response = client.get(URL)
    assert response.status_code == 202 and response["Retry-After"] == "5"
    body = response.json()
    assert body["refreshing"] is True and body["as_of"] is None
    assert body["count"] == 0 and body["results"] == [] and body["next"] is None
    job = FindingGroupsJob.objects.get()
    assert job.status == JobStatus.QUEUED and job.filter == {"by": ["fix"]}
    # Later views while the job waits: answered at once from its row, no second job.
    cache.clear()
    with CaptureQueriesContext(connection) as queries:
        again = client.get(URL)
    assert again.status_code == 202
    assert not [q for q in queries.captured_queries if "pg_sleep" in q["sql"]]
    assert FindingGroupsJob.objects.count() == 1
    # The job has no request's budget.
    assert job_run(kind_name="finding_groups", job_id=str(job.pk)) == JobStatus.DONE
    cache.clear()
    with CaptureQueriesContext(connection) as queries:
        done = client.get(URL)
    assert done.status_code == 200 and _aggregates(queries.captured_queries) == 0
    body = done.json()
    assert body["refreshing"] is False and body["as_of"] is None
    assert {g["package"] for g in body["results"]} >= {"minimist"}


@pytest.mark.django_db
def test_a_page_within_the_budget_or_with_no_budget_is_answered_in_the_request(
        api, team, estate, settings, monkeypatch):  # noqa: F811
    _slow_statements(monkeypatch, 0.3)
    client = api(team, "read")
    settings.TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS = 5
    assert client.get(URL).status_code == 200
    cache.clear()
    settings.TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS = 0
    assert client.get(URL + "&kev=true").status_code == 200
    assert not FindingGroupsJob.objects.exists()


@pytest.mark.django_db
def test_the_page_says_it_is_being_grouped_and_asks_again_by_itself(
        client, make_user, team, estate, settings, monkeypatch):  # noqa: F811
    settings.TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS = 0.2
    client.force_login(make_user("viewer", team=team, role="viewer"))
    _slow_statements(monkeypatch, 2)
    response = client.get("/findings/groups/?by=vulnerability")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="groups-pending"' in html and "being grouped" in html
    assert 'hx-trigger="every 5s"' in html and "/findings/groups/?by=vulnerability" in html
    assert "GHSA-xvch-5gv4-984h" not in html
    job = FindingGroupsJob.objects.get()
    assert job_run(kind_name="finding_groups", job_id=str(job.pk)) == JobStatus.DONE
    cache.clear()
    # The poll (an htmx request) gets the table, with no poll left in it.
    html = client.get("/findings/groups/?by=vulnerability",
                      headers={"HX-Request": "true"}).content.decode()
    assert "GHSA-xvch-5gv4-984h" in html and 'data-testid="groups-pending"' not in html


@pytest.mark.django_db
def test_without_a_budget_the_sessions_statement_timeout_stands():
    """A job's groups statements keep the job's timeout (`jobs.runner.job_session`); only a
    web request's budget sets one."""
    from django.db import transaction

    from trustrank.findings import groups

    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = '7s'")
        groups._tune(cur)
        cur.execute("SHOW statement_timeout")
        assert cur.fetchone()[0] == "7s"
        groups._tune(cur, 0.25)
        cur.execute("SHOW statement_timeout")
        assert cur.fetchone()[0] == "250ms"
