"""Triage at team scale: search, open by default, filter validation, versions and conflicts,
bulk triage (small selections), owners and due dates, for the API and the pages."""

from __future__ import annotations

import html
import re
from datetime import date, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.findings.helpers import many_findings
from trustrank.accounts.models import Role
from trustrank.findings.models import Finding, FindingDue
from trustrank.findings.paging import SEARCH_SORT_MAX
from trustrank.findings.records import AuditEvent, TriagePolicy
from trustrank.findings.services.audit import Actor
from trustrank.findings.services.due_dates import finding_due_dates_apply
from trustrank.findings.services.reconcile import FindingSpec, findings_reconcile

pytestmark = pytest.mark.django_db


@pytest.fixture
def searchable(team, other_team):
    log4j = Finding.objects.create(
        team=team, kind="vulnerability", source="osv", fingerprint="log4j",
        vuln_id="GHSA-jfh8-c2jp-5v3q", cve_id="CVE-2021-44228",
        aliases=["CVE-2021-44228", "GHSA-jfh8-c2jp-5v3q"],
        package_name="org.apache.logging.log4j:log4j-core",
        component_name="log4j-core",
        component_purl="pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1",
    )
    minimist = Finding.objects.create(
        team=team, kind="vulnerability", source="osv", fingerprint="minimist",
        vuln_id="GHSA-vh95-rmgr-6w4m", cve_id="CVE-2020-7598", aliases=["CVE-2020-7598"],
        package_name="minimist", component_name="minimist",
        component_purl="pkg:npm/minimist@1.2.0",
    )
    Finding.objects.create(
        team=other_team, kind="vulnerability", source="osv", fingerprint="secret",
        vuln_id="CVE-2021-44832", cve_id="CVE-2021-44832", aliases=["CVE-2021-44832"],
        package_name="minimist", component_name="minimist",
        component_purl="pkg:npm/minimist@1.2.0",
    )
    return {"log4j": log4j, "minimist": minimist}


def _ids(client, query: str) -> set[int]:
    r = client.get(f"/api/v1/findings?{query}")
    assert r.status_code == 200, r.content
    return {f["id"] for f in r.json()["results"]}


# --- search ---


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=CVE-2021", {"log4j"}),
        ("q=cve-2021-442", {"log4j"}),
        ("q=44228", {"log4j"}),
        ("q=GHSA-jfh8", {"log4j"}),
        ("q=jfh8-c2jp", {"log4j"}),
        ("q=pkg:npm/minimist", {"minimist"}),
        ("q=pkg:npm/", {"minimist"}),
        ("q=minim", {"minimist"}),
        ("q=inimis", {"minimist"}),
        ("q=log4j", {"log4j"}),
        ("q=logging.log4j", {"log4j"}),
        ("q=mi", {"minimist"}),
        ("q=nothing-like-this", set()),
    ],
)
def test_search_matches_prefixes_and_substrings_of_ids_packages_and_purls(
    api, team, searchable, query, expected
):
    client = api(team, "read")
    assert _ids(client, query) == {searchable[name].pk for name in expected}


def test_search_never_shows_another_teams_findings(api, other_team, searchable):
    client = api(other_team, "read")
    found = client.get("/api/v1/findings?q=minimist").json()["results"]
    assert [f["vuln_id"] for f in found] == ["CVE-2021-44832"]


def _has_trigram_index() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_indexes WHERE indexname = 'findings_search_trgm'")
        return cur.fetchone() is not None


def _trgm_available() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        return cur.fetchone() is not None


def test_the_trigram_index_exists_wherever_pg_trgm_does(team):
    assert _has_trigram_index() == _trgm_available()


def test_search_uses_the_trigram_index(team):
    """With enough rows for the planner to care, a substring search reads the trigram GIN
    index instead of the table (docs/triage.md has the run at a million rows). The embedded
    PostgreSQL has no pg_trgm: there the search scans, and this test has nothing to check."""
    if not _trgm_available():
        pytest.skip("this PostgreSQL has no pg_trgm (the embedded server)")
    many_findings(team, 20_000, prefix="s")
    with connection.cursor() as cur:
        cur.execute("ANALYZE findings_finding")
    from trustrank.accounts.principal import principal_for_key  # noqa: F401
    from trustrank.findings.filters import FindingFilterSet

    qs = FindingFilterSet({"q": "s1234-aaaa"}, queryset=Finding.objects.filter(team=team)).qs
    plan = qs.order_by().explain()
    assert "findings_search_trgm" in plan, plan
    assert qs.count() == 1


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=PKG:NPM/Minimist", {"minimist"}),
        ("q=pkg:maven/org.apache.logging.log4j/log4j-core@2.14", {"log4j"}),
        ("q=pkg:maven/org.apache", {"log4j"}),
        ("q=pkg:npm/m%25", set()),  # LIKE's wildcards are literal characters
        ("q=pkg:npm/_inimist", set()),
        ("q=pkg:maven/log4j-core", set()),  # a purl search is a prefix of the purl
    ],
)
def test_purl_search_is_a_prefix_of_the_purl_in_any_case(api, team, searchable, query, expected):
    client = api(team, "read")
    assert _ids(client, query) == {searchable[name].pk for name in expected}


@pytest.mark.parametrize("head", [1000, 60])
def test_search_pages_its_sorted_matches_in_the_list_order(
    api, client, make_user, team, monkeypatch, head
):
    """A search finds its matches first, sorts them (behind OFFSET 0) and keeps the total and
    the first SEARCH_HEAD of them: every page, inside the kept head and past it, must be the
    list's own order, and a write must show on the next request."""
    from django.test.utils import CaptureQueriesContext

    from trustrank.findings import paging

    monkeypatch.setattr(paging, "SEARCH_HEAD", head)
    ids = many_findings(team, 130, prefix="p", component_purl="pkg:npm/left-pad@1.3.0")
    many_findings(team, 40, prefix="o", component_purl="pkg:npm/right-pad@1.0.0")
    # Priorities that tie in places, so the id breaks ties as in the list's order.
    for n, pk in enumerate(ids):
        Finding.objects.filter(pk=pk).update(severity_score=(n * 7) % 10)

    def expected() -> list[int]:
        return list(
            Finding.objects.filter(team=team, component_purl__istartswith="pkg:npm/left-pad")
            .order_by("-baseline_priority", "-id")
            .values_list("pk", flat=True)
        )

    reader = api(team, "read")

    def api_pages(q: str) -> list[int]:
        seen: list[int] = []
        for page in (1, 2, 3):
            r = reader.get(f"/api/v1/findings?q={q}&page={page}")
            assert r.status_code == 200, r.content
            assert r.json()["count"] == 130
            seen += [f["id"] for f in r.json()["results"]]
        return seen

    with CaptureQueriesContext(connection) as queries:
        assert api_pages("pkg:npm/left-pad") == expected()
    # Found first (at most SEARCH_SORT_MAX + 1 of them), then sorted.
    assert any(f"LIMIT {SEARCH_SORT_MAX + 1}) AS matches" in q["sql"]
               for q in queries.captured_queries)
    assert api_pages("left-pad") == expected()  # through the trigram index or a scan

    # A write changes the team's generation: the kept matches are not served again.
    Finding.objects.filter(pk=ids[0]).update(severity_score=10.0, updated_at=timezone.now())
    assert api_pages("pkg:npm/left-pad")[0] == ids[0] == expected()[0]

    # The page: keyset pages in the same order.
    client.force_login(make_user("pad-reader", team=team, role=Role.VIEWER))
    order = expected()
    seen: list[int] = []
    url = "/findings/?q=pkg:npm/left-pad"
    for _ in range(3):
        r = client.get(url)
        assert r.status_code == 200
        body = r.content.decode()
        on_page = [pk for pk in order if f'href="/findings/{pk}/"' in body]
        assert sorted(on_page, key=lambda pk: body.find(f'href="/findings/{pk}/"')) == on_page
        seen += on_page
        nxt = re.search(r'href="\?([^"]*after=[^"]*)"', body)
        if nxt is None:
            break
        url = "/findings/?" + html.unescape(nxt.group(1))
    assert seen == order


def test_purl_search_reads_the_purl_prefix_index(team):
    many_findings(team, 5_000, prefix="i")
    with connection.cursor() as cur:
        cur.execute("ANALYZE findings_finding")
    from trustrank.findings.filters import FindingFilterSet

    qs = FindingFilterSet(
        {"q": "pkg:npm/pkg-i-12"}, queryset=Finding.objects.filter(team=team)
    ).qs
    plan = qs.order_by().explain()
    assert "findings_purl_prefix" in plan, plan
    assert qs.count() == 111  # pkg-i-12, pkg-i-120…129, pkg-i-1200…1299


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("cve-2024-012", ["012"]),
        ("ghsa-jfh8-c2jp", ["jfh8", "c2jp"]),
        ("org.apache.logging.log4j:log4j-core", ["logging", "log4j", "core"]),
        ("cve-2021", []),
        ("minimist", ["minimist"]),
    ],
)
def test_the_index_is_asked_for_the_distinctive_words(value, words):
    from trustrank.findings.search import distinctive_words

    assert distinctive_words(value) == words


def test_searching_by_distinctive_words_finds_exactly_the_substring_matches(team, searchable):
    """The index is asked for fewer trigrams and strpos checks the whole value: the matches
    must be those of a plain substring test, whatever the value."""
    many_findings(team, 300, prefix="w")
    from trustrank.findings.filters import FindingFilterSet

    values = [
        "CVE-2024-1012", "cve-2024-10", "GHSA-w0012", "ghsa-w001", "w0299-aaaa-bbbb",
        "aaaa-bbbb", "2024-1029", "pkg-w-12", "log4j-core", "logging.log4j:log4j",
        "2021-44228", "cve-2021-44228 ", "apache.logging", "npm/pkg-w-29",
        "bbbb-w0012",  # both words are in a finding, never in this order: no match
    ]
    for value in values:
        found = set(
            FindingFilterSet({"q": value, "open": "all"}, queryset=Finding.objects.filter(team=team))
            .qs.values_list("pk", flat=True)
        )
        expected = set(
            Finding.objects.filter(team=team, search_text__contains=value.strip().lower())
            .values_list("pk", flat=True)
        )
        assert found == expected, value
        assert bool(expected) == (value != "bbbb-w0012"), value


# --- open by default, every state on request ---


def test_list_shows_open_findings_by_default_and_every_state_on_request(
    api, client, make_user, team, searchable
):
    minimist = searchable["minimist"]
    Finding.objects.filter(pk=minimist.pk).update(state="resolved")
    api_client = api(team, "read")
    log4j = searchable["log4j"].pk
    assert _ids(api_client, "") == {log4j}
    assert _ids(api_client, "open=all") == {log4j, minimist.pk}
    assert _ids(api_client, "open=") == {log4j, minimist.pk}  # as on the project page
    assert _ids(api_client, "open=false") == {minimist.pk}
    assert _ids(api_client, "state=resolved") == {minimist.pk}
    assert _ids(api_client, "open=true") == {log4j}

    client.force_login(make_user("viewer", team=team, role=Role.VIEWER))
    html = client.get("/findings/").content.decode()
    assert "CVE-2021-44228" in html and "CVE-2020-7598" not in html
    assert '<option value="all"' in html  # the visible control for every state
    html = client.get("/findings/?open=all").content.decode()
    assert "GHSA-vh95-rmgr-6w4m" in html


def test_priorities_api_and_page_show_open_by_default_with_a_control_for_all(
    api, client, make_user, team
):
    from tests.ranking.scenario import build
    from tests.ranking.test_ranking_runs import rerank

    build(team)
    rerank(team)
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    Finding.objects.filter(pk=log4j.pk).update(state="not_affected",
                                               justification="code_not_reachable")
    client_api = api(team, "read")
    default = {f["finding"] for f in client_api.get("/api/v1/priorities").json()["results"]}
    assert log4j.pk not in default and default
    every = {f["finding"] for f in client_api.get("/api/v1/priorities?open=all").json()["results"]}
    assert log4j.pk in every
    r = client_api.get("/api/v1/priorities?open=maybe")
    assert r.status_code == 400 and "open" in r.json()["errors"]

    client.force_login(make_user("pviewer", team=team, role=Role.VIEWER))
    html = client.get("/").content.decode()
    assert "CVE-2021-44228" not in html and '<option value="all"' in html
    assert "CVE-2021-44228" in client.get("/?open=all").content.decode()


# --- invalid filters ---


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("kev=maybe", "kev"),
        ("open=sometimes", "open"),
        ("state=fixed", "state"),
        ("assignee=bob", "assignee"),
        ("overdue=perhaps", "overdue"),
        ("due_before=next-week", "due_before"),
        ("epss_min=2", "epss_min"),
        ("project=" + "x" * 600, "project"),  # a name is taken, but not a novel
        ("decision=urgent", "decision"),
    ],
)
def test_invalid_filter_value_is_a_400_naming_the_field(api, team, query, field):
    r = api(team, "read").get(f"/api/v1/findings?{query}")
    assert r.status_code == 400, r.content
    assert field in r.json()["errors"]


def test_invalid_filter_on_the_page_is_a_form_error(client, make_user, team, searchable):
    client.force_login(make_user("pv", team=team, role=Role.VIEWER))
    html = client.get("/findings/?kev=maybe").content.decode()
    assert 'data-field="kev"' in html and "Invalid filter" in html
    assert "CVE-2021-44228" not in html  # no rows until the filter is fixed


# --- versions and the two-analyst race ---


def test_detail_carries_an_etag_and_the_version(api, team, searchable):
    f = searchable["log4j"]
    r = api(team, "read").get(f"/api/v1/findings/{f.pk}")
    assert r["ETag"] == '"1"' and r.json()["version"] == 1


def test_two_analysts_racing_the_second_gets_412_or_409_with_the_current_state(
    api, team, searchable
):
    f = searchable["log4j"]
    alice, bob = api(team, "read", "triage"), api(team, "read", "triage")
    etag_a = alice.get(f"/api/v1/findings/{f.pk}")["ETag"]
    read_b = bob.get(f"/api/v1/findings/{f.pk}")
    etag_b, version_b = read_b["ETag"], read_b.json()["version"]

    r = alice.post(f"/api/v1/findings/{f.pk}/triage",
                   {"state": "exploitable", "reason": "reachable from the internet"},
                   format="json", HTTP_IF_MATCH=etag_a)
    assert r.status_code == 200 and r.json()["version"] == 2 and r["ETag"] == '"2"'

    r = bob.post(f"/api/v1/findings/{f.pk}/triage",
                 {"state": "false_positive", "reason": "not ours"},
                 format="json", HTTP_IF_MATCH=etag_b)
    assert r.status_code == 412
    body = r.json()
    assert body["current"]["state"] == "exploitable" and body["version"] == 2
    assert body["changes"][0]["fields"][0] == {
        "field": "state", "before": "in_triage", "after": "exploitable"
    }
    r = bob.post(f"/api/v1/findings/{f.pk}/triage",
                 {"state": "false_positive", "reason": "not ours", "version": version_b},
                 format="json")
    assert r.status_code == 409 and r.json()["current"]["state"] == "exploitable"
    f.refresh_from_db()
    assert f.state == "exploitable" and f.version == 2

    # Re-applied on the current version, it goes through.
    r = bob.post(f"/api/v1/findings/{f.pk}/triage",
                 {"state": "false_positive", "reason": "not ours", "version": 2},
                 format="json")
    assert r.status_code == 200 and r.json()["version"] == 3
    # Without a version the change applies, as before versions existed.
    r = alice.post(f"/api/v1/findings/{f.pk}/triage",
                   {"state": "exploitable", "reason": "it is"}, format="json")
    assert r.status_code == 200 and r.json()["version"] == 4


def test_concurrent_triage_in_threads_loses_no_update(team, transactional_db):
    """Two analysts submit at the same moment against version 1: exactly one wins."""
    import threading

    from django.db import connections

    from trustrank.accounts.principal import Principal
    from trustrank.findings.services.triage import TriageConflict, finding_triage

    f = many_findings(team, 1, prefix="race")[0]
    principal = Principal(scopes_by_team={team.pk: frozenset({"read", "triage"})})
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def analyst(state: str) -> None:
        try:
            barrier.wait()
            finding = Finding.objects.get(pk=f)
            finding_triage(finding=finding, principal=principal, state=state,
                           reason="race", expected_version=1)
            outcomes.append("ok")
        except TriageConflict:
            outcomes.append("conflict")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=analyst, args=(s,))
               for s in ("exploitable", "false_positive")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict", "ok"]
    assert Finding.objects.get(pk=f).version == 2


def test_auto_resolve_and_reopen_add_a_version(team):
    spec = FindingSpec(fingerprint="rel", title="lost context", severity="medium",
                       category="broken_context", source="traces")
    kw = {"team_id": team.pk, "kind": "reliability", "actor": Actor.system("test")}
    findings_reconcile(specs=[spec], existing=[], **kw)
    f = Finding.objects.get(team=team, fingerprint="rel")
    assert f.version == 1
    findings_reconcile(specs=[], existing=[f], **kw)
    f.refresh_from_db()
    assert f.state == "resolved" and f.version == 2
    findings_reconcile(specs=[spec], existing=[f], **kw)
    f.refresh_from_db()
    assert f.state == "in_triage" and f.version == 3


def test_reconcile_does_not_undo_a_triage_made_after_it_read_the_findings(team):
    from trustrank.accounts.principal import Principal
    from trustrank.findings.services.triage import finding_triage

    spec = FindingSpec(fingerprint="rel2", title="lost context", severity="medium",
                       category="broken_context", source="traces")
    kw = {"team_id": team.pk, "kind": "reliability", "actor": Actor.system("test")}
    findings_reconcile(specs=[spec], existing=[], **kw)
    stale = Finding.objects.get(team=team, fingerprint="rel2")
    principal = Principal(scopes_by_team={team.pk: frozenset({"triage"})})
    finding_triage(finding=stale, principal=principal, state="not_affected",
                   justification="code_not_present", reason="checked")
    findings_reconcile(specs=[spec], existing=[stale], **kw)  # `stale` still says in_triage
    fresh = Finding.objects.get(pk=stale.pk)
    assert fresh.state == "not_affected" and fresh.version == 2


# --- owners and due dates ---


def test_assign_and_due_date_on_one_finding_and_the_list_fields(
    api, make_user, team, other_team, searchable
):
    bob = make_user("bob", team=team, role=Role.TRIAGER)
    outsider = make_user("eve", team=other_team)
    f = searchable["log4j"]
    client = api(team, "read", "triage")
    r = client.post(f"/api/v1/findings/{f.pk}/triage",
                    {"assignee": "bob", "due_date": "2020-01-01", "reason": "bob owns log4j"},
                    format="json")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["assignee"] == bob.pk and body["due_date"] == "2020-01-01"
    assert body["overdue"] is True and body["version"] == 2 and body["state"] == "in_triage"
    f.refresh_from_db()
    assert f.due_date_manual is True

    r = client.post(f"/api/v1/findings/{f.pk}/triage",
                    {"assignee": outsider.pk, "reason": "x"}, format="json")
    assert r.status_code == 400 and "assignee" in r.json()["errors"]

    item = next(i for i in client.get("/api/v1/findings").json()["results"] if i["id"] == f.pk)
    assert {k: item[k] for k in ("assignee", "due_date", "overdue", "version")} == {
        "assignee": bob.pk, "due_date": "2020-01-01", "overdue": True, "version": 2
    }
    assert _ids(client, f"assignee={bob.pk}") == {f.pk}
    assert _ids(client, "assignee=none") == {searchable["minimist"].pk}
    assert _ids(client, "overdue=true") == {f.pk}
    assert _ids(client, "overdue=false") == {searchable["minimist"].pk}
    assert _ids(client, "due_before=2020-01-02") == {f.pk}
    assert _ids(client, "due_before=2020-01-01") == set()


def test_assignee_me_on_the_page_and_overdue_marked_red(client, make_user, team, searchable):
    alice = make_user("alice", team=team, role=Role.TRIAGER)
    f = searchable["log4j"]
    Finding.objects.filter(pk=f.pk).update(assignee=alice)
    FindingDue.objects.create(finding=f, team=team, manual=True,
                              due_date=timezone.localdate() - timedelta(days=2))
    client.force_login(alice)
    html = client.get("/findings/?assignee=me").content.decode()
    assert "CVE-2021-44228" in html and "GHSA-vh95-rmgr-6w4m" not in html
    assert "badge bad overdue" in html and "1 overdue" in html
    assert ">alice<" in html


def test_due_dates_follow_the_ranking_decision_and_the_team_policy(api, team, make_user):
    from tests.ranking.scenario import build
    from tests.ranking.test_ranking_runs import rerank

    build(team)
    rerank(team)
    today = timezone.localdate()
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    etcd = Finding.objects.get(team=team, cve_id="CVE-2020-15115")
    assert (log4j.ranked.decision, etcd.ranked.decision) == ("immediate", "scheduled")
    assert log4j.due_date == today + timedelta(days=1)
    assert etcd.due_date == today + timedelta(days=30)
    # The service's own write: the finding itself (its version, what an analyst's change
    # is checked against, and its updated_at) is not touched.
    assert log4j.due_decision_since == today and log4j.version == 1
    written = log4j.updated_at

    # A second run with the same decisions writes nothing.
    rerank(team)
    log4j.refresh_from_db()
    assert log4j.version == 1 and log4j.updated_at == written
    assert finding_due_dates_apply(team_id=team.pk) == 0

    # A date set by hand survives runs and policy changes.
    FindingDue.objects.filter(finding=etcd).update(due_date=today, manual=True)
    admin = api(team, "read", "admin")
    assert admin.get("/api/v1/triage-policy").json() == {
        "team": team.pk, "immediate_days": 1, "out_of_cycle_days": 7, "scheduled_days": 30,
        "defer_days": None,
    }
    r = admin.put("/api/v1/triage-policy",
                  {"immediate_days": 3, "out_of_cycle_days": 10, "scheduled_days": 60,
                   "defer_days": 90}, format="json")
    assert r.status_code == 200 and r.json()["immediate_days"] == 3
    log4j.refresh_from_db()
    etcd.refresh_from_db()
    assert log4j.due_date == today + timedelta(days=3) and log4j.version == 1
    assert etcd.due_date == today
    rerank(team)
    etcd.refresh_from_db()
    assert etcd.due_date == today

    triager = api(team, "read", "triage")
    assert triager.put("/api/v1/triage-policy", {"immediate_days": 0},
                       format="json").status_code == 403
    r = admin.put("/api/v1/triage-policy", {"immediate_days": -1}, format="json")
    assert r.status_code == 400 and "immediate_days" in r.json()["errors"]


def test_policy_page_for_admins_only(client, make_user, team, other_team):
    admin = make_user("boss", team=team, role=Role.ADMIN)
    client.force_login(admin)
    assert "Due dates by ranking decision" in client.get("/findings/triage-policy/").content.decode()
    r = client.post("/findings/triage-policy/", {"team": team.pk, "immediate_days": "2",
                                                  "out_of_cycle_days": "5",
                                                  "scheduled_days": "20", "defer_days": ""})
    assert r.status_code == 302
    p = TriagePolicy.objects.get(team=team)
    assert (p.immediate_days, p.out_of_cycle_days, p.scheduled_days, p.defer_days) == (
        2, 5, 20, None)
    r = client.post("/findings/triage-policy/", {"team": other_team.pk, "immediate_days": "9"})
    assert r.status_code == 404
    viewer = make_user("look", team=team, role=Role.VIEWER)
    client.force_login(viewer)
    r = client.post("/findings/triage-policy/", {"team": team.pk, "immediate_days": "9"})
    assert r.status_code == 403
    assert TriagePolicy.objects.get(team=team).immediate_days == 2


# --- bulk triage within the request ---


def test_bulk_triage_by_ids_is_one_event_per_finding_and_a_summary(api, team, make_user):
    bob = make_user("bob2", team=team, role=Role.TRIAGER)
    ids = many_findings(team, 30, prefix="b")
    client = api(team, "read", "triage")
    r = client.post("/api/v1/findings/bulk-triage", {
        "ids": ids, "state": "not_affected", "justification": "code_not_reachable",
        "assignee": "bob2", "due_date": "2030-01-31", "reason": "vendored copy, not called",
    }, format="json")
    assert r.status_code == 200, r.content
    assert r.json()["changed"] == 30 and r.json()["conflicts"] == 0
    rows = Finding.objects.filter(pk__in=ids)
    assert {(f.state, f.justification, f.assignee_id, str(f.due_date), f.version)
            for f in rows} == {("not_affected", "code_not_reachable", bob.pk, "2030-01-31", 2)}
    events = AuditEvent.objects.filter(finding_id__in=ids, action="bulk_triaged")
    assert events.count() == 30
    summary = AuditEvent.objects.get(action="bulk_triage", team=team)
    assert summary.after["counts"]["changed"] == 30 and summary.reason.startswith("vendored")
    assert {e.subject_id for e in events} == {summary.subject_id}


def test_bulk_triage_refuses_other_teams_findings_and_changes_nothing(
    api, team, other_team
):
    mine = many_findings(team, 3, prefix="m")
    theirs = many_findings(other_team, 2, prefix="t")
    r = api(team, "read", "triage").post("/api/v1/findings/bulk-triage", {
        "ids": mine + theirs, "state": "false_positive", "reason": "x"}, format="json")
    assert r.status_code == 400
    assert r.json()["ids"] == theirs
    assert all(str(i) in r.json()["detail"] for i in theirs)
    assert not Finding.objects.filter(pk__in=mine + theirs).exclude(state="in_triage").exists()
    assert not AuditEvent.objects.filter(action__startswith="bulk").exists()


def test_bulk_triage_by_filter_and_validation(api, team, other_team, make_user):
    many_findings(team, 5, prefix="x", package_name="lodash")
    others = many_findings(team, 4, prefix="y")
    theirs = many_findings(other_team, 3, prefix="z", package_name="lodash")
    outsider = make_user("mallory", team=other_team)
    client = api(team, "read", "triage")
    r = client.post("/api/v1/findings/bulk-triage", {
        "filter": {"q": "lodash"}, "state": "exploitable", "reason": "lodash everywhere"},
        format="json")
    assert r.status_code == 200 and r.json()["changed"] == 5
    assert Finding.objects.filter(team=team, state="exploitable").count() == 5
    # Scalars, lists and booleans alike, as JSON gives them.
    r = client.post("/api/v1/findings/bulk-triage", {
        "filter": {"q": "lodash", "kind": "vulnerability", "state": ["exploitable"],
                   "kev": False}, "detail": "pinned", "reason": "note it"}, format="json")
    assert r.status_code == 200 and r.json()["changed"] == 5, r.content
    assert Finding.objects.filter(team=team, detail="pinned").count() == 5
    assert not Finding.objects.filter(pk__in=others + theirs, state="exploitable").exists()

    bad = [
        ({"filter": {"kev": "maybe"}, "state": "exploitable", "reason": "x"}, "filter.kev"),
        ({"ids": others, "state": "nope", "reason": "x"}, "state"),
        ({"ids": others, "state": "exploitable"}, "reason"),
        ({"ids": others, "state": "not_affected", "reason": "x"}, "justification"),
        ({"ids": others, "assignee": outsider.pk, "reason": "x"}, "assignee"),
        ({"ids": others, "due_date": "soon", "reason": "x"}, "due_date"),
        ({"ids": ["a"], "state": "exploitable", "reason": "x"}, "ids"),
        ({"state": "exploitable", "reason": "x"}, "ids"),
    ]
    for body, field in bad:
        r = client.post("/api/v1/findings/bulk-triage", body, format="json")
        assert r.status_code == 400, (body, r.content)
        assert field in r.json()["errors"], (field, r.json())
    assert not Finding.objects.filter(pk__in=others).exclude(version=1).exists()
    reader = api(team, "read")
    assert reader.post("/api/v1/findings/bulk-triage", {
        "ids": others, "state": "exploitable", "reason": "x"}, format="json").status_code == 403


def test_bulk_triage_never_overwrites_a_change_made_since_selection(api, team):
    ids = many_findings(team, 4, prefix="v")
    client = api(team, "read", "triage")
    # Someone changes the second finding after our selection (at version 1).
    r = client.post(f"/api/v1/findings/{ids[1]}/triage",
                    {"state": "exploitable", "reason": "seen"}, format="json")
    assert r.status_code == 200
    r = client.post("/api/v1/findings/bulk-triage", {
        "ids": [{"id": i, "version": 1} for i in ids], "state": "false_positive",
        "reason": "noise"}, format="json")
    assert r.status_code == 200
    assert r.json()["changed"] == 3 and r.json()["conflict_ids"] == [ids[1]]
    assert Finding.objects.get(pk=ids[1]).state == "exploitable"


def test_bulk_triage_from_the_page_rows_and_all_matching(client, make_user, team):
    ids = many_findings(team, 6, prefix="p", package_name="left-pad")
    many_findings(team, 2, prefix="q")
    alice = make_user("alice3", team=team, role=Role.TRIAGER)
    client.force_login(alice)
    html = client.get("/findings/?q=left-pad").content.decode()
    assert 'name="ids"' in html and "Select all 6 matching this filter" in html
    r = client.post("/findings/bulk-triage", {
        "ids": [f"{ids[0]}:1", f"{ids[1]}:1"], "state": "exploitable",
        "assignee": str(alice.pk), "reason": "two of them", "filter_query": "q=left-pad"})
    assert r.status_code == 302 and r["Location"].endswith("?q=left-pad")
    assert Finding.objects.filter(state="exploitable").count() == 2
    r = client.post("/findings/bulk-triage", {
        "select_all": "1", "filter_query": "q=left-pad", "state": "resolved",
        "reason": "upgraded"}, follow=True)
    assert "4 changed" in r.content.decode() or "6 changed" in r.content.decode()
    assert Finding.objects.filter(pk__in=ids, state="resolved").count() == 6
    assert Finding.objects.filter(state="in_triage").count() == 2
    html = client.get("/findings/?open=all&q=left-pad").content.decode()
    assert ">alice3<" in html


# --- the finding page: version in the form, conflict and re-apply ---


def test_finding_page_conflict_shows_the_other_change_and_reapplies(
    client, make_user, team, searchable
):
    f = searchable["log4j"]
    make_user("carol", team=team, role=Role.TRIAGER)
    dave = make_user("dave", team=team, role=Role.TRIAGER)
    client.force_login(dave)
    html = client.get(f"/findings/{f.pk}/").content.decode()
    assert 'name="version" value="1"' in html
    # Carol saves first (through the API as her key would, or the page: same service).
    from trustrank.accounts.principal import principal_for_user
    from trustrank.findings.services.triage import finding_triage

    carol_user = __import__("django.contrib.auth", fromlist=["get_user_model"]).get_user_model(
    ).objects.get(username="carol")
    finding_triage(finding=f, principal=principal_for_user(carol_user), state="exploitable",
                   reason="carol saw it exploited")
    r = client.post(f"/findings/{f.pk}/triage", {
        "version": "1", "state": "false_positive", "reason": "dave thinks not", "detail": "",
        "justification": "", "assignee": "", "due_date": ""})
    assert r.status_code == 409
    html = r.content.decode()
    assert "Someone else changed this finding" in html and "carol" in html
    assert "exploitable" in html and "carol saw it exploited" in html
    assert 'id="reapply"' in html and 'name="version" value="2"' in html
    f.refresh_from_db()
    assert f.state == "exploitable"
    r = client.post(f"/findings/{f.pk}/triage", {
        "version": "2", "state": "false_positive", "reason": "dave thinks not", "detail": "",
        "justification": "", "assignee": "", "due_date": ""})
    assert r.status_code == 302
    f.refresh_from_db()
    assert f.state == "false_positive" and f.version == 3


def test_large_bulk_from_the_page_becomes_a_job_with_a_progress_page(
    client, make_user, team, settings
):
    from trustrank.findings.records import BulkTriageJob
    from trustrank.findings.services.bulk import bulk_triage_job_run

    settings.TRUSTRANK_BULK_TRIAGE_SYNC_MAX = 5
    ids = many_findings(team, 12, prefix="pj", package_name="big-pkg")
    client.force_login(make_user("pj", team=team, role=Role.TRIAGER))
    r = client.post("/findings/bulk-triage", {
        "select_all": "1", "filter_query": "q=big-pkg", "state": "exploitable",
        "reason": "all of them"})
    job = BulkTriageJob.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/findings/bulk-triage/{job.pk}/"
    html = client.get(r["Location"]).content.decode()
    assert 'data-status="queued"' in html and "0 / 12" in html and "every 1s" in html
    assert bulk_triage_job_run(job_id=job.pk) == "done"
    html = client.get(r["Location"], HTTP_HX_REQUEST="true").content.decode()
    assert 'data-status="done"' in html and "12 / 12" in html and "every 1s" not in html
    assert Finding.objects.filter(pk__in=ids, state="exploitable").count() == 12


def test_list_page_and_api_read_a_bounded_number_of_queries(
    api, client, make_user, team, django_assert_max_num_queries
):
    user = make_user("q", team=team, role=Role.TRIAGER)
    ids = many_findings(team, 60, prefix="nq")
    Finding.objects.filter(pk__in=ids).update(assignee=user)
    FindingDue.objects.bulk_create(
        FindingDue(finding_id=pk, team=team, due_date=date(2020, 1, 1), manual=True)
        for pk in ids
    )
    client.force_login(user)
    with django_assert_max_num_queries(16):
        assert client.get("/findings/").status_code == 200
    key_client = api(team, "read")
    with django_assert_max_num_queries(12):
        assert key_client.get("/api/v1/findings?page_size=60").status_code == 200


def test_finding_page_audit_trail_names_the_new_assignee(client, make_user, team, searchable):
    from trustrank.accounts.principal import principal_for_user
    from trustrank.findings.services.triage import finding_triage

    erin = make_user("erin", team=team, role=Role.TRIAGER)
    f = searchable["minimist"]
    finding_triage(finding=f, principal=principal_for_user(erin), assignee=erin.pk,
                   reason="mine now")
    client.force_login(erin)
    html = client.get(f"/findings/{f.pk}/").content.decode()
    assert "assignee → erin" in html and "triage_changed" in html


def test_pages_keep_other_teams_findings_and_jobs_out_of_reach(
    client, make_user, team, other_team, settings
):
    from trustrank.findings.records import BulkTriageJob

    mine = many_findings(team, 2, prefix="iso")
    theirs = many_findings(other_team, 2, prefix="iso", package_name="their-secret")
    job = BulkTriageJob.objects.create(
        team_ids=[other_team.pk], changes={"state": "exploitable"}, reason="theirs",
        team=other_team, requested_by_label="system: x",
    )
    client.force_login(make_user("iso", team=team, role=Role.TRIAGER))
    html = client.get("/findings/?open=all").content.decode()
    assert "their-secret" not in html and f'value="{mine[0]}:1"' in html
    r = client.post("/findings/bulk-triage", {
        "ids": [f"{theirs[0]}:1", f"{mine[0]}:1"], "state": "false_positive", "reason": "x"},
        follow=True)
    assert "no such finding in your teams" in r.content.decode()
    assert not Finding.objects.filter(pk__in=mine + theirs, state="false_positive").exists()
    r = client.post("/findings/bulk-triage", {
        "select_all": "1", "filter_query": "q=their-secret", "state": "resolved",
        "reason": "x"}, follow=True)
    assert not Finding.objects.filter(pk__in=theirs, state="resolved").exists()
    assert client.get(f"/findings/bulk-triage/{job.pk}/").status_code == 404
    assert client.get(f"/findings/{theirs[0]}/").status_code == 404
    r = client.post(f"/findings/{theirs[0]}/triage", {"state": "resolved", "reason": "x"})
    assert r.status_code == 404


def test_if_match_any_applies_and_a_malformed_one_is_a_400(api, team, searchable):
    f = searchable["log4j"]
    client = api(team, "read", "triage")
    r = client.post(f"/api/v1/findings/{f.pk}/triage", {"state": "exploitable", "reason": "x"},
                    format="json", HTTP_IF_MATCH="*")
    assert r.status_code == 200
    # If-Match compares strongly: a weak tag never matches, even of the current version.
    r = client.post(f"/api/v1/findings/{f.pk}/triage", {"state": "resolved", "reason": "x"},
                    format="json", HTTP_IF_MATCH='W/"2"')
    assert r.status_code == 412 and r.json()["version"] == 2
    r = client.post(f"/api/v1/findings/{f.pk}/triage", {"state": "resolved", "reason": "x"},
                    format="json", HTTP_IF_MATCH='"1", "2"')
    assert r.status_code == 200 and r.json()["version"] == 3
    r = client.post(f"/api/v1/findings/{f.pk}/triage", {"state": "resolved", "reason": "x"},
                    format="json", HTTP_IF_MATCH="yesterday")
    assert r.status_code == 400 and "If-Match" in r.json()["errors"]
