"""Request values the findings API and pages cannot use are refused, naming them: unknown
filter keys (never read as 'no filter'), Unicode digits, numbers past the column, `%`,
NUL bytes, pages past the last, weak If-Match tags."""

from __future__ import annotations

import pytest

from tests.findings.helpers import many_findings
from trustrank.accounts.models import Scope
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent

pytestmark = pytest.mark.django_db

BULK = "/api/v1/findings/bulk-triage"


def test_bulk_triage_with_a_misspelt_filter_key_is_refused_and_changes_nothing(api, team):
    ids = many_findings(team, 3, prefix="s")
    r = api(team, "read", "triage").post(BULK, {
        "filter": {"severty": ["low"]}, "state": "resolved", "reason": "low ones"},
        format="json")
    assert r.status_code == 400, r.content
    assert r.json()["param"] == "filter.severty" and "filter.severty" in r.json()["errors"]
    assert not Finding.objects.filter(pk__in=ids).exclude(state="in_triage").exists()


def test_bulk_triage_team_filter_means_a_team_of_the_caller(api, team, other_team):
    mine = many_findings(team, 3, prefix="m")
    theirs = many_findings(other_team, 2, prefix="t")
    client = api(team, "read", "triage")
    # Another team's id: refused, never read as "every finding of mine".
    r = client.post(BULK, {"filter": {"team": [str(other_team.pk)]}, "state": "resolved",
                           "reason": "close"}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["param"] == "filter.team"
    assert not Finding.objects.filter(pk__in=mine + theirs, state="resolved").exists()
    # The caller's own team: its findings, as the list filters them.
    r = client.post(BULK, {"filter": {"team": [str(team.pk)]}, "state": "resolved",
                           "reason": "close"}, format="json")
    assert r.status_code == 200 and r.json()["changed"] == 3, r.content
    assert not Finding.objects.filter(pk__in=theirs, state="resolved").exists()


def test_bulk_filter_values_must_be_values(api, team):
    many_findings(team, 2, prefix="v")
    r = api(team, "read", "triage").post(BULK, {
        "filter": {"q": {"$ne": 1}}, "state": "resolved", "reason": "x"}, format="json")
    assert r.status_code == 400 and r.json()["param"] == "filter.q"


@pytest.mark.parametrize("path", ["/api/v1/findings", "/api/v1/findings/groups",
                                  "/api/v1/audit-events"])
def test_lists_refuse_an_unknown_query_parameter_naming_it(api, team, path):
    many_findings(team, 2, prefix="u")
    r = api(team, "read").get(path, {"severty": "low"})
    assert r.status_code == 400, r.content
    assert r.json()["param"] == "severty"


def test_lists_keep_their_paging_and_format_parameters(api, team):
    many_findings(team, 3, prefix="p")
    client = api(team, "read")
    for path in ("/api/v1/findings", "/api/v1/findings/groups", "/api/v1/audit-events"):
        r = client.get(path, {"page": 1, "page_size": 2, "format": "json"})
        assert r.status_code == 200, (path, r.content)


def test_findings_list_team_filter_is_one_of_the_callers_teams(api, team, other_team):
    many_findings(team, 2, prefix="a")
    client = api(team, "read")
    assert client.get("/api/v1/findings", {"team": team.pk}).json()["count"] == 2
    r = client.get("/api/v1/findings", {"team": other_team.pk})
    assert r.status_code == 400 and r.json()["param"] == "team"


@pytest.mark.parametrize(
    ("path", "params", "param"),
    [
        ("/api/v1/findings", {"assignee": "²"}, "assignee"),
        ("/api/v1/findings", {"assignee": "99999999999999999999999"}, "assignee"),
        # A project may be named ("²" is a name), but not at any length.
        ("/api/v1/findings", {"project": "x" * 600}, "project"),
        ("/api/v1/findings/groups", {"assignee": "²"}, "assignee"),
        ("/api/v1/audit-events", {"actor": "user:²"}, "actor"),
        ("/api/v1/audit-events", {"finding": "²"}, "finding"),
    ],
)
def test_unicode_digits_and_numbers_past_bigint_are_a_400(api, team, path, params, param):
    many_findings(team, 1, prefix="d")
    r = api(team, "read").get(path, params)
    assert r.status_code == 400, r.content
    assert r.json()["param"] == param


def test_bulk_filter_with_unicode_digits_is_a_400(api, team):
    many_findings(team, 1, prefix="b")
    r = api(team, "read", "triage").post(BULK, {
        "filter": {"assignee": "²"}, "state": "resolved", "reason": "x"}, format="json")
    assert r.status_code == 400 and r.json()["param"] == "filter.assignee"


@pytest.mark.parametrize("name", ["action", "since", "until", "actor"])
def test_percent_in_audit_filters_is_answered_not_a_500(api, team, name):
    r = api(team, "read").get("/api/v1/audit-events", {name: "50%"})
    assert r.status_code in (200, 400), r.content
    if r.status_code == 400:
        assert r.json()["param"] == name


def test_a_page_past_bigint_of_the_groups_is_a_4xx(api, team):
    many_findings(team, 2, prefix="g")
    client = api(team, "read")
    r = client.get("/api/v1/findings/groups", {"page": "9223372036854775807"})
    assert r.status_code == 400, r.content
    assert r.json()["param"] == "page"
    # The findings list, paginated by DRF, answers a page past the last with a 404.
    r = client.get("/api/v1/findings", {"page": "9223372036854775807"})
    assert r.status_code == 404, r.content


def test_nul_in_a_triage_body_is_a_400_naming_the_field(api, team):
    (pk,) = many_findings(team, 1, prefix="n")
    r = api(team, "read", "triage").post(
        f"/api/v1/findings/{pk}/triage", data='{"assignee": "a\\u0000", "reason": "x"}',
        content_type="application/json",
    )
    assert r.status_code == 400, r.content
    assert r.json()["param"] == "assignee"
    # An escaped backslash before u0000 is text, not a NUL.
    r = api(team, "read", "triage").post(
        f"/api/v1/findings/{pk}/triage",
        data='{"detail": "see \\\\u0000", "state": "exploitable", "reason": "x"}',
        content_type="application/json",
    )
    assert r.status_code == 200, r.content
    assert Finding.objects.get(pk=pk).detail == "see \\u0000"


@pytest.mark.parametrize(
    ("if_match", "status"),
    [('"²"', 400), ('"99999999999999999999999"', 400), ('W/"1"', 412), ("3", 400),
     ('"1"', 200), ("*", 200)],
)
def test_if_match_is_strong_and_strict(api, team, if_match, status):
    (pk,) = many_findings(team, 1, prefix="i")
    r = api(team, "read", "triage").post(
        f"/api/v1/findings/{pk}/triage", {"state": "exploitable", "reason": "x"},
        format="json", HTTP_IF_MATCH=if_match,
    )
    assert r.status_code == status, r.content
    changed = Finding.objects.get(pk=pk).version == 2
    assert changed == (status == 200)


def test_assignee_given_as_unicode_digits_is_refused(api, team):
    (pk,) = many_findings(team, 1, prefix="w")
    r = api(team, "read", "triage").post(
        f"/api/v1/findings/{pk}/triage", {"assignee": "²", "reason": "x"}, format="json"
    )
    assert r.status_code == 400 and "assignee" in r.json()["errors"]


@pytest.fixture
def signed_in(client, make_user, team):
    make_user("ana", team=team)
    client.login(username="ana", password="pw-ana")
    return client


def test_page_forms_with_unicode_digits_are_answered(signed_in, team):
    (pk,) = many_findings(team, 1, prefix="f")
    r = signed_in.post(f"/findings/{pk}/triage",
                       {"state": "exploitable", "reason": "x", "version": "²"})
    assert r.status_code in (302, 400, 409)
    r = signed_in.post("/findings/bulk-triage",
                       {"ids": [f"{pk}:²", "²"], "state": "resolved", "reason": "x"})
    assert r.status_code == 302
    # "²" is no id: the ticked row still is, without a version to hold it to.
    assert Finding.objects.get(pk=pk).state == "resolved"
    r = signed_in.post("/findings/triage-policy/", {"team": "²", "immediate_days": "²"})
    assert r.status_code == 404
    r = signed_in.get("/audit/", {"after": "²"})
    assert r.status_code == 200
    r = signed_in.get("/findings/", {"after": "1.0:²"})
    assert r.status_code == 200


def test_nothing_of_a_refused_bulk_change_is_recorded(api, team):
    many_findings(team, 2, prefix="r")
    before = AuditEvent.objects.count()
    api(team, *Scope.values).post(BULK, {"filter": {"team": ["1"], "sevrity": "x"},
                                         "state": "resolved", "reason": "x"}, format="json")
    assert AuditEvent.objects.count() == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/priorities?environment=prod&severty=low",
        "/api/v1/environments/prod/services?window=1h&nmae=x",
        "/api/v1/environments/prod/edges?window=1h&calle=x",
    ],
)
def test_unknown_parameters_of_the_queue_and_service_lists_are_named(api, team, path):
    from django.utils import timezone

    from trustrank.runtime.models import Environment

    now = timezone.now()
    Environment.objects.create(team=team, name="prod", first_seen=now, last_seen=now)
    client = api(team, "read")
    # The same list without the misspelt parameter answers.
    assert client.get(path.rsplit("&", 1)[0]).status_code == 200
    response = client.get(path)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["param"] in ("severty", "nmae", "calle")
