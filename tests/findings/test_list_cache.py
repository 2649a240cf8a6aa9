"""The findings list's pages kept under the findings generation (trustrank/findings/
list_cache.py): asked again they are the same page, and every write they show makes a new
one at once."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from trustrank.accounts.models import Team
from trustrank.findings.apis import FastJSONRenderer
from trustrank.findings.choices import FindingKind, FindingSource
from trustrank.findings.generation import findings_generation
from trustrank.findings.list_cache import list_cache_key
from trustrank.findings.models import Finding
from trustrank.findings.paging import ORDER_HEAD
from trustrank.findings.records import TriagePolicy

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _empty_cache(settings) -> None:
    settings.TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS = 60  # off by default; these tests turn it on
    cache.clear()


def test_kept_pages_are_off_by_default() -> None:
    from trustrank import settings as defaults

    assert defaults.TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS == 0
    assert list_cache_key(what="api", team_ids=[1], query="") is not None  # fixture turned on


def _findings(team: Team, n: int) -> list[Finding]:
    return [
        Finding.objects.create(
            team=team, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
            fingerprint=f"lc{i:04d}", title=f"finding {i}", vuln_id=f"CVE-2024-{i:04d}",
            severity_score=float(i % 10),
        )
        for i in range(n)
    ]


def test_an_api_page_asked_again_is_served_kept_and_a_triage_shows_at_once(
    team: Team, api, django_assert_max_num_queries
) -> None:
    findings = _findings(team, 6)
    client = api(team, "read", "triage")
    first = client.get("/api/v1/findings?page_size=3&page=2").json()
    # Kept: the key, the generation, no rows, no count.
    with django_assert_max_num_queries(3):
        again = client.get("/api/v1/findings?page_size=3&page=2").json()
    assert again == first
    assert first["count"] == 6 and first["previous"] and first["next"] is None
    target = first["results"][0]["id"]
    answer = client.post(f"/api/v1/findings/{target}/triage",
                         {"state": "exploitable", "reason": "seen"}, format="json")
    assert answer.status_code == 200, answer.content
    after = client.get("/api/v1/findings?page_size=3&page=2").json()
    assert {f["id"]: f["state"] for f in after["results"]}[target] == "exploitable"
    assert len(findings) == 6


def test_a_kept_page_still_refuses_a_bad_parameter(team: Team, api) -> None:
    _findings(team, 2)
    client = api(team, "read")
    assert client.get("/api/v1/findings?severity=high").status_code == 200
    assert client.get("/api/v1/findings?severity=bogus").status_code == 400
    assert client.get("/api/v1/findings?severty=high").status_code == 400


def test_assignee_me_is_not_shared_between_callers(team: Team, make_user, client) -> None:
    alice, bob = make_user("alice", team=team), make_user("bob", team=team)
    mine, theirs = _findings(team, 2)
    Finding.objects.filter(pk=mine.pk).update(assignee=alice)
    Finding.objects.filter(pk=theirs.pk).update(assignee=bob)
    client.force_login(alice)
    assert [f.pk for f in client.get("/findings/?assignee=me").context["findings"]] == [mine.pk]
    client.force_login(bob)
    page = client.get("/findings/?assignee=me")
    assert f'data-finding="{theirs.pk}"' in page.content.decode()
    assert f'data-finding="{mine.pk}"' not in page.content.decode()


def test_the_page_table_is_kept_and_follows_a_write(team: Team, make_user, client) -> None:
    finding = _findings(team, 1)[0]
    client.force_login(make_user("carol", team=team))
    assert "In triage" in client.get("/findings/").content.decode()
    kept = client.get("/findings/")
    assert kept.context.get("findings") is None  # the table came from the cache
    assert f'data-finding="{finding.pk}"' in kept.content.decode()
    Finding.objects.filter(pk=finding.pk).update(title="renamed in place")
    finding.refresh_from_db()
    finding.state = "exploitable"
    finding.save()
    assert "Exploitable" in client.get("/findings/").content.decode()


def test_an_htmx_request_gets_the_table_alone(team: Team, make_user, client) -> None:
    _findings(team, 1)
    client.force_login(make_user("dave", team=team))
    full = client.get("/findings/").content.decode()
    fragment = client.get("/findings/", HTTP_HX_REQUEST="true").content.decode()
    assert "<h1>Findings</h1>" in full and "<h1>Findings</h1>" not in fragment
    assert '<table class="findings">' in fragment


def test_a_jira_link_or_a_policy_change_makes_a_new_generation(team: Team) -> None:
    from trustrank.jira.models import JiraIssueLink

    finding = _findings(team, 1)[0]
    before = findings_generation(team_ids=[team.pk])
    JiraIssueLink.objects.create(finding=finding, team=team, base_url="https://j.example",
                                 project_key="OPS", key="OPS-1", url="https://j/OPS-1")
    linked = findings_generation(team_ids=[team.pk])
    assert linked != before
    TriagePolicy.objects.create(team=team, immediate_days=2)
    assert findings_generation(team_ids=[team.pk]) != linked


def test_the_kept_pages_can_be_turned_off(team: Team) -> None:
    with override_settings(TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS=0):
        assert list_cache_key(what="api", team_ids=[team.pk], query="") is None
    assert list_cache_key(what="api", team_ids=[team.pk], query="") is not None


def test_deep_pages_come_from_the_kept_order_and_follow_a_write(team: Team, api) -> None:
    assert ORDER_HEAD >= 10
    findings = _findings(team, 9)
    client = api(team, "read")
    order = [f["id"] for f in client.get("/api/v1/findings?page_size=9").json()["results"]]
    pages = [client.get(f"/api/v1/findings?page_size=3&page={n}").json() for n in (1, 2, 3)]
    assert [f["id"] for p in pages for f in p["results"]] == order
    # Closing the page-2 finding that came first drops it from the open list's later pages.
    gone = pages[1]["results"][0]["id"]
    Finding.objects.filter(pk=gone).update(state="resolved", updated_at=timezone.now())
    rest = [f["id"] for n in (2, 3)
            for f in client.get(f"/api/v1/findings?page_size=3&page={n}").json()["results"]]
    assert rest == [pk for pk in order[3:] if pk != gone]
    assert len(findings) == 9


def test_the_fast_renderer_writes_what_drf_writes(team: Team, api) -> None:
    _findings(team, 3)
    data = api(team, "read").get("/api/v1/findings").data
    assert json.loads(FastJSONRenderer().render(data)) == json.loads(JSONRenderer().render(data))
    indented = FastJSONRenderer().render(
        data, "application/json; indent=2", {"indent": None}
    )
    assert b"\n  " in indented


def test_a_broad_search_pages_in_the_list_order_with_a_capped_count(
    team: Team, api, monkeypatch
) -> None:
    from trustrank.findings import apis, paging

    monkeypatch.setattr(paging, "SEARCH_SORT_MAX", 3)
    monkeypatch.setattr(apis, "SEARCH_SORT_MAX", 3)
    _findings(team, 8)
    client = api(team, "read")
    everything = [f["id"] for f in client.get("/api/v1/findings").json()["results"]]
    broad = client.get("/api/v1/findings?q=cve-2024-00&page_size=2").json()
    assert broad["count"] == 3 and broad["count_exact"] is False
    assert [f["id"] for f in broad["results"]] == everything[:2]
    second = client.get("/api/v1/findings?q=cve-2024-00&page_size=2&page=2").json()
    assert [f["id"] for f in second["results"]] == everything[2:3]
    narrow = client.get("/api/v1/findings?q=cve-2024-0003").json()
    assert narrow["count"] == 1 and narrow["count_exact"] is True
    assert client.get("/api/v1/findings").json()["count_exact"] is True


def test_a_broad_search_on_the_page_says_more_than(team: Team, make_user, client,
                                                    monkeypatch) -> None:
    from trustrank.findings import paging, views

    monkeypatch.setattr(paging, "SEARCH_SORT_MAX", 3)
    monkeypatch.setattr(views, "SEARCH_SORT_MAX", 3)
    _findings(team, 8)
    client.force_login(make_user("erin", team=team))
    page = client.get("/findings/?q=cve-2024-00")
    assert "More than 3 findings" in page.content.decode()
    assert len(page.context["findings"]) == 8


def test_the_kept_filter_form_shows_the_query_and_follows_new_members(
    team: Team, make_user, client
) -> None:
    _findings(team, 2)
    client.force_login(make_user("erin", team=team))
    first = client.get("/findings/?severity=high").content.decode()
    assert '<option value="high" selected>' in first
    assert "newcomer" not in first
    # A new member changes no finding (the generation stays) but is a choice of the form.
    make_user("newcomer", team=team)
    again = client.get("/findings/?severity=high").content.decode()
    assert "newcomer" in again and '<option value="high" selected>' in again
    # An invalid filter is never kept: asked twice, its error shows twice.
    for _ in range(2):
        bad = client.get("/findings/?severity=huge").content.decode()
        assert "severity:" in bad and "Fix the filter above." in bad


def test_a_write_makes_a_new_table_key_but_keeps_the_filter_forms(team: Team) -> None:
    """The filter form shows no finding: re-rendering it after every write (a write every
    second or two on a busy team) would cost what keeping it saves."""
    findings = _findings(team, 1)
    table = list_cache_key(what="page", team_ids=[team.pk], query="")
    form = list_cache_key(what="filter-form", team_ids=[team.pk], query="", by_generation=False)
    Finding.objects.filter(pk=findings[0].pk).update(title="x", updated_at=timezone.now())
    assert list_cache_key(what="page", team_ids=[team.pk], query="") != table
    assert list_cache_key(
        what="filter-form", team_ids=[team.pk], query="", by_generation=False
    ) == form
