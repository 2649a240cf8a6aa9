"""The findings list, the API, the priorities and the groups explain ranks and name findings
the same way: the contextual rank is the default order (the unranked after the ranked), each
row shows its rank, decision and the rank's one-sentence why, and a finding from an advisory
without a summary is titled by the first line of its details, or else by its id."""

from __future__ import annotations

import re

import pytest

from tests.ranking.scenario import CVSS_10, build
from tests.ranking.test_ranking_runs import rerank
from tests.vulns.helpers import bom, import_osv, load_sbom, osv
from trustrank.findings.choices import title_line
from trustrank.findings.models import Finding

pytestmark = pytest.mark.django_db

LXML = ("lxml", "4.6.0", "pkg:pypi/lxml@4.6.0")
TYPED_AST = ("typed-ast", "1.3.0", "pkg:pypi/typed-ast@1.3.0")
EVIL = ("evil", "1.0.0", "pkg:npm/evil@1.0.0")


def _untitled(id: str, name: str, details: str) -> dict:
    doc = osv(id, "PyPI", name, [{"introduced": "0"}])
    doc["summary"] = ""
    doc["details"] = details
    return doc


@pytest.fixture
def world(team):
    """The source document's case, ranked, with two advisories without a summary (one with
    details, one without) and, after the run, an unranked finding of a high baseline."""
    data = build(team)
    import_osv(team, [
        _untitled("PYSEC-2099-1", "lxml",
                  "  \nlxml's   HTML cleaner lets crafted script through.\nSecond line."),
        _untitled("PYSEC-2099-2", "typed-ast", ""),
    ])
    load_sbom(team, bom([LXML, TYPED_AST]), project="docs", version="1.0")
    rerank(team)
    import_osv(team, [osv("GHSA-evil-evil-evil", "npm", "evil", [{"introduced": "0"}],
                          severity=CVSS_10)])
    load_sbom(team, bom([EVIL]), project="late", version="1.0")
    return data


def _signed_in(client, make_user, team):
    client.force_login(make_user("reader", team=team, role="viewer"))
    return client


def _rows(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-finding="(\d+)"', html)]


def test_the_findings_list_is_in_rank_order_by_default_with_rank_and_decision(
    team, world, client, make_user, django_assert_max_num_queries
):
    client = _signed_in(client, make_user, team)
    ranked = list(
        Finding.objects.filter(team=team, ranked__isnull=False)
        .order_by("ranked__rank").values_list("pk", "ranked__rank")
    )
    late = Finding.objects.get(team=team, vuln_id="GHSA-evil-evil-evil")
    assert late.rank is None and len(ranked) == 4
    # Higher than every ranked finding but Log4Shell by the static baseline...
    assert late.baseline_priority > Finding.objects.get(cve_id="CVE-2020-15115").baseline_priority

    # One more than when ranks were a column: the page's ranks, counted for its rows at once.
    with django_assert_max_num_queries(14):
        page = client.get("/findings/")
    html = page.content.decode()
    # ...yet after every ranked finding: the ranked in rank order, then the unranked.
    assert _rows(html) == [pk for pk, _ in ranked] + [late.pk]
    assert '<th class="num" title="in the team\'s queue, from the latest ranking run">Rank</th>' \
        in html
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    row = html[html.index(f'<tr data-finding="{log4j.pk}"'):]
    row = row[: row.index("</tr>")]
    assert '<td class="num rank">1</td>' in row
    assert '<span class="badge decision-immediate">immediate</span>' in row
    # The same sentence the finding's "Why this rank" card opens with.
    assert 'data-testid="rank-why"' in row and "Immediate: exploited in the wild" in row
    late_row = html[html.index(f'<tr data-finding="{late.pk}"'):]
    assert 'title="not ranked yet"' in late_row[: late_row.index("</tr>")]
    assert "by the latest ranking run&#x27;s rank" in html
    # The order control offers the others, and the contextual rank comes first.
    assert re.search(r'<select name="ordering"[^>]*>\s*<option value="rank"', html)


def test_the_api_lists_in_the_same_order_and_the_baseline_order_stays_available(
    team, world, api
):
    reader = api(team, "read")
    page_ids = [
        pk for pk, _ in Finding.objects.filter(team=team, ranked__isnull=False)
        .order_by("ranked__rank").values_list("pk", "ranked__rank")
    ] + [Finding.objects.get(team=team, vuln_id="GHSA-evil-evil-evil").pk]
    by_default = reader.get("/api/v1/findings").json()
    assert [r["id"] for r in by_default["results"]] == page_ids
    assert by_default["count"] == 5
    assert [r["id"] for r in reader.get("/api/v1/findings?ordering=rank").json()["results"]] \
        == page_ids
    baseline = [r["id"] for r in reader.get("/api/v1/findings?ordering=baseline").json()["results"]]
    assert baseline == list(
        Finding.objects.filter(team=team).order_by("-baseline_priority", "-id")
        .values_list("pk", flat=True)
    )
    assert baseline != page_ids
    assert reader.get("/api/v1/findings?ordering=nonsense").status_code == 400


def test_a_search_keeps_the_rank_order_on_the_page_and_in_the_api(
    team, world, client, make_user, api
):
    client = _signed_in(client, make_user, team)
    expected = [
        pk for pk, _ in Finding.objects.filter(team=team, ranked__isnull=False)
        .order_by("ranked__rank").values_list("pk", "ranked__rank")
    ] + [Finding.objects.get(team=team, vuln_id="GHSA-evil-evil-evil").pk]
    # Every purl starts so: the matches are found first, joined to their ranks, then sorted.
    html = client.get("/findings/", {"q": "pkg:"}).content.decode()
    assert _rows(html) == expected
    api_ids = [r["id"] for r in api(team, "read").get(
        "/api/v1/findings", {"q": "pkg:"}).json()["results"]]
    assert api_ids == expected
    pypi = [pk for pk in expected if Finding.objects.get(pk=pk).ecosystem == "PyPI"]
    assert _rows(client.get("/findings/", {"q": "pkg:pypi/"}).content.decode()) == pypi


def test_an_advisory_without_a_summary_titles_its_finding_by_its_details_first_line(
    team, world, client, make_user
):
    client = _signed_in(client, make_user, team)
    lxml = Finding.objects.get(team=team, vuln_id="PYSEC-2099-1")
    bare = Finding.objects.get(team=team, vuln_id="PYSEC-2099-2")
    first_line = "lxml's HTML cleaner lets crafted script through."
    assert lxml.title == first_line and lxml.display_title == first_line
    assert bare.title == "" and bare.display_title == "PYSEC-2099-2"
    escaped = "lxml&#x27;s HTML cleaner lets crafted script through."
    pages = {
        "list": client.get("/findings/").content.decode(),
        "finding": client.get(f"/findings/{lxml.pk}/").content.decode(),
        "priorities": client.get("/").content.decode(),
        "groups": client.get("/findings/groups/", {"by": "vulnerability"}).content.decode(),
    }
    for name, html in pages.items():
        assert escaped in html, name
    for name in ("list", "priorities", "groups"):
        assert "Second line" not in pages[name], name
        assert '<span class="title">PYSEC-2099-2</span>' in pages[name], name
    bare_page = client.get(f"/findings/{bare.pk}/").content.decode()
    assert '<p class="finding-title" data-testid="finding-title">PYSEC-2099-2</p>' in bare_page


def test_a_title_is_the_first_non_blank_line_cut_to_length():
    assert title_line("\n\n  a   b \nc") == "a b"
    assert title_line("") == ""
    long = title_line("x" * 500)
    assert len(long) == 160 and long.endswith("…")


def test_an_advisory_dated_year_one_shows_a_dash_not_0001_01_01(team, world, client, make_user):
    """Go's vulnerability database writes `published: 0001-01-01T00:00:00Z` when it does not
    know the date; the page says it does not know either."""
    from datetime import UTC, datetime

    from trustrank.vulns.models import Advisory

    client = _signed_in(client, make_user, team)
    Advisory.objects.filter(id="PYSEC-2099-2").update(published=datetime(1, 1, 1, tzinfo=UTC))
    bare = Finding.objects.get(team=team, vuln_id="PYSEC-2099-2")
    html = client.get(f"/findings/{bare.pk}/").content.decode()
    assert "0001-01-01" not in html and "<dd>– / 2024-01-01</dd>" in html
