"""The priorities page (home), the finding page's "Why this rank" card, for the owning
team only."""

from __future__ import annotations

import re

import pytest

from tests.ranking.scenario import build
from tests.ranking.test_ranking_runs import rerank
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankingRun

pytestmark = pytest.mark.django_db


def login(client, make_user, team, role="viewer"):
    user = make_user(f"u-{role}-{team.pk}", team=team, role=role)
    client.force_login(user)
    return user


@pytest.fixture
def ranked(team):
    data = build(team)
    rerank(team)
    return data


def _rows(html: str) -> list[str]:
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)


def test_home_page_shows_log4shell_first_with_its_reasons(client, make_user, team, ranked,
                                                          django_assert_max_num_queries):
    login(client, make_user, team)
    with django_assert_max_num_queries(17):  # rows fetched by relation (selectors.priority_list)
        response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    rows = _rows(html)
    assert len(rows) == 2
    assert "CVE-2021-44228" in rows[0] and "CVE-2020-15115" in rows[1]
    assert "decision-immediate" in rows[0] and "exposure-open" in rows[0]
    assert "reach-observed" in rows[0] and "KEV" in rows[0] and "<meter" in rows[0]
    assert "exposure-small" in rows[1] and "badge bad\">KEV" not in rows[1]
    # The static baseline beside the contextual score.
    assert "/ 98.6" in rows[0]
    assert "Priorities" in html and 'href="/projects/"' in html
    assert "Latest ranking run" in html and "2 findings ranked" in html


def test_priorities_page_has_no_n_plus_one(client, make_user, team, ranked,
                                           django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.findings.test_api_and_pages import make
    from tests.ranking.scenario import LOG4J
    from tests.vulns.helpers import bom, load_sbom

    login(client, make_user, team)
    with CaptureQueriesContext(connection) as few:
        client.get("/")
    # More rows of every shape: vulnerabilities in other projects, findings of other kinds.
    for i in range(8):
        load_sbom(team, bom([LOG4J]), project=f"shop-{i}", version="1")
    for i in range(4):
        make(team, "reliability", "broken_context", f"hop-{i}")
        make(team, "identity", "expired", f"cert-{i}")
    rerank(team)
    with CaptureQueriesContext(connection) as many:
        html = client.get("/").content.decode()
    assert len(_rows(html)) == 2 + 8 + 8
    assert len(many.captured_queries) == len(few.captured_queries)
    # The page's rows join only their ranked row and fetch the rest by id, a query per
    # relation: a constant few more queries, each planned in a fraction of a millisecond,
    # instead of one seven-table join that took tens of milliseconds to plan.
    with django_assert_max_num_queries(17):
        assert client.get("/?environment=prod&decision=immediate").status_code == 200


def test_environment_queue_and_filters(client, make_user, team, ranked):
    login(client, make_user, team)
    assert len(_rows(client.get("/?environment=prod").content.decode())) == 2
    staging = client.get("/?environment=staging").content.decode()
    assert "CVE-2021" not in staging and "No open finding is ranked in staging" in staging
    only = client.get("/?decision=immediate").content.decode()
    assert "CVE-2021-44228" in only and "CVE-2020-15115" not in only
    small = client.get("/?exposure=small").content.decode()
    assert "CVE-2020-15115" in small and "CVE-2021-44228" not in small
    kev = client.get("/?kev=true&reachability=observed").content.decode()
    assert "CVE-2021-44228" in kev and "CVE-2020-15115" not in kev
    kind = client.get("/?kind=identity").content.decode()
    assert "CVE-20" not in kind


def test_invalid_filter_values_are_reported_not_a_500(client, make_user, team, ranked):
    login(client, make_user, team)
    response = client.get("/?decision=urgent&kev=maybe&after=x:y")
    assert response.status_code == 200
    html = response.content.decode()
    # A form error naming each field, and no rows until the filter is fixed.
    assert "Invalid filter" in html and 'data-field="decision"' in html
    assert 'data-field="kev"' in html and "CVE-2021-44228" not in html


def test_filter_change_answers_htmx_with_the_table_fragment(client, make_user, team, ranked):
    login(client, make_user, team)
    html = client.get("/?decision=immediate", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in html and "CVE-2021-44228" in html and "CVE-2020-15115" not in html


def test_pages_continue_after_the_last_row(client, make_user, team, ranked, monkeypatch):
    from trustrank.ranking import views

    monkeypatch.setattr(views, "PAGE_SIZE", 1)
    login(client, make_user, team)
    first = client.get("/?environment=prod")
    assert first.context["next_query"]
    second = client.get("/?" + first.context["next_query"]).content.decode()
    assert "CVE-2020-15115" in second and "CVE-2021-44228" not in second
    first_team = client.get("/")
    second_team = client.get("/?" + first_team.context["next_query"]).content.decode()
    assert "CVE-2020-15115" in second_team


def test_other_team_sees_nothing_of_it(client, make_user, team, other_team, ranked):
    login(client, make_user, other_team)
    html = client.get("/").content.decode()
    assert "CVE-2021-44228" not in html and "Nothing has been ranked yet" in html
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    assert client.get(f"/findings/{log4j.pk}/").status_code == 404


def test_empty_state_and_rank_now(client, make_user, team):
    build(team)
    login(client, make_user, team, role="triager")
    html = client.get("/").content.decode()
    assert "Nothing has been ranked yet" in html and "Rank now" in html
    response = client.post("/priorities/rank")
    assert response.status_code == 302 and response["Location"] == "/"
    run = RankingRun.objects.get(team=team)
    assert run.status == "queued" and run.trigger == "page"
    html = client.get("/").content.decode()
    # While the run waits the status box polls; once it is done the page reloads.
    assert "every 3s" in html and "Queued" in html
    assert client.get("/priorities/status?pending=1").status_code == 200
    from trustrank.ranking.services.runs import ranking_run_execute

    assert ranking_run_execute(run_id=run.pk) == "done"
    done = client.get("/priorities/status?pending=1", HTTP_HX_REQUEST="true")
    assert done.headers.get("HX-Refresh") == "true"
    assert "CVE-2021-44228" in client.get("/").content.decode()


def test_rank_now_from_htmx_answers_the_polling_status_box(client, make_user, team):
    build(team)
    login(client, make_user, team, role="triager")
    response = client.post("/priorities/rank", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert 'id="run-status"' in html and "every 3s" in html and "Ranking…" in html


def test_rank_now_is_refused_to_a_viewer(client, make_user, team, other_team):
    login(client, make_user, team)
    assert "Rank now" not in client.get("/").content.decode()
    assert client.post("/priorities/rank").status_code == 403
    assert client.post("/priorities/rank", {"team": other_team.pk}).status_code == 403
    assert not RankingRun.objects.exists()


def test_finding_page_explains_the_rank(client, make_user, team, ranked):
    login(client, make_user, team)
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    html = client.get(f"/findings/{log4j.pk}/").content.decode()
    assert "Why this rank" in html
    sentence = re.search(r'data-testid="rank-sentence">(.*?)</p>', html, flags=re.S).group(1)
    assert sentence.startswith("Immediate: exploited in the wild (CISA KEV since 2021-12-10)")
    assert "reachable from the internet via internet → payment-gateway" in sentence
    assert "log4j-core is exercised" in sentence
    assert "io.opentelemetry.log4j-context-data-2.17" in sentence
    # The factor table: every factor with its effect, source and confidence.
    table = html.split('class="factors"', 1)[1].split("</table>", 1)[0]
    for name in ("exploitation", "exposure", "reachability", "epss", "human_impact", "trust"):
        assert f"<td>{name}</td>" in table
    assert "CISA KEV entry CVE-2021-44228 added 2021-12-10" in table
    # The path, drawn server-side, and the history chart.
    path = html.split('data-testid="rank-path">', 1)[1].split("</svg>", 1)[0]
    assert "<svg" in path and ">internet<" in path and ">payment-gateway<" in path
    assert "root spans from internet" in path
    history = html.split('data-testid="rank-history">', 1)[1].split("</svg>", 1)[0]
    assert "<polyline" in history and "rank 1" in history
    assert "<script" not in html.split("<main>", 1)[1].split("</main>", 1)[0]


def test_finding_page_of_a_lower_finding_has_no_path(client, make_user, team, ranked):
    login(client, make_user, team)
    etcd = Finding.objects.get(team=team, cve_id="CVE-2020-15115")
    html = client.get(f"/findings/{etcd.pk}/").content.decode()
    assert "Scheduled:" in html or "Defer:" in html
    assert "nothing calls etcd over the network" in html
    assert "No path from the internet reaches etcd" in html


def test_unranked_findings_say_why(client, make_user, team):
    build(team)
    login(client, make_user, team)
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    html = client.get(f"/findings/{log4j.pk}/").content.decode()
    assert "Not ranked." in html and "No ranking run has finished" in html
    rerank(team)
    from trustrank.accounts.principal import Principal
    from trustrank.findings.services.triage import finding_triage

    log4j.refresh_from_db()
    finding_triage(finding=log4j, state="resolved", reason="upgraded",
                   principal=Principal(scopes_by_team={team.pk: frozenset({"triage"})}))
    rerank(team)
    html = client.get(f"/findings/{log4j.pk}/").content.decode()
    assert "Not ranked." in html and "only open findings" in html
    # Its history stays: ranked once, then left the queue.
    assert 'data-testid="rank-history"' in html


def test_finding_page_explains_other_kinds_too(client, make_user, team, ranked):
    from tests.findings.test_api_and_pages import make

    cert = make(team, "identity", "expired", "cert-a", severity="critical")
    rerank(team)
    login(client, make_user, team)
    html = client.get(f"/findings/{cert.pk}/").content.decode()
    sentence = re.search(r'data-testid="rank-sentence">(.*?)</p>', html, flags=re.S).group(1)
    assert "identity finding" in sentence and 'class="factors"' in html
    assert "CVE-" not in _rows(client.get("/?kind=identity").content.decode())[0]


def test_filters_never_make_the_queue_distinct(team):
    # SELECT DISTINCT makes PostgreSQL read and sort the whole queue before page one.
    from trustrank.accounts.principal import Principal
    from trustrank.ranking.filters import PriorityFilterSet
    from trustrank.ranking.selectors import priority_list

    principal = Principal(scopes_by_team={team.pk: frozenset({"read"})})
    data = {"decision": ["immediate"], "kind": ["vulnerability"], "exposure": ["open"],
            "reachability": ["observed"], "kev": "true"}
    qs = PriorityFilterSet(data, queryset=priority_list(principal=principal)).qs
    assert "DISTINCT" not in str(qs.query).upper()


def test_a_factor_without_a_value_shows_a_dash_not_none(client, make_user, team):
    from trustrank.vulns.models import EpssLatest

    build(team)
    # etcd's flaw without an EPSS score.
    EpssLatest.objects.filter(cve_id="CVE-2020-15115").delete()
    Finding.objects.filter(team=team, cve_id="CVE-2020-15115").update(epss=None,
                                                                     epss_percentile=None)
    rerank(team)
    login(client, make_user, team)
    pages = [client.get(f"/findings/{f.pk}/").content.decode()
             for f in Finding.objects.filter(team=team, kind="vulnerability")]
    tables = [html.split('class="factors"', 1)[1].split("</table>", 1)[0] for html in pages]
    assert any("<td>epss</td><td>–</td>" in t for t in tables)  # an advisory without EPSS
    assert not any("<td>None</td>" in t for t in tables)
