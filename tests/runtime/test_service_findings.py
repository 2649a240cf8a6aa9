"""A service's page lists its findings: the vulnerabilities of the project version it runs
(a vulnerability finding names no service; the deployment ties the two) and the findings
about it, in the latest ranking run's order, with rank, decision, id, title and component,
a page at a time."""

from __future__ import annotations

import re

import pytest

from tests.ranking.scenario import build
from tests.ranking.stale import stale_stored_ranks
from tests.ranking.test_ranking_runs import rerank
from tests.vulns.helpers import bom, import_osv, load_sbom, osv
from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankedFinding
from trustrank.runtime.deployment import DeploymentRequest, deployment_set
from trustrank.runtime.models import Service

pytestmark = pytest.mark.django_db


def _rows(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-finding="(\d+)"', html)]


def test_the_top_ranked_service_lists_its_vulnerability_findings_with_their_rank(
    team, client, make_user, django_assert_max_num_queries
):
    data = build(team)
    rerank(team)
    client.force_login(make_user("reader", team=team, role="viewer"))
    gateway, etcd = data["gateway"], data["etcd"]
    assert isinstance(gateway, Service) and isinstance(etcd, Service)
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    assert log4j.service_id is None and log4j.rank == 1  # tied to the service by deployment

    with django_assert_max_num_queries(30):
        html = client.get(f"/services/{gateway.pk}/").content.decode()
    section = html[html.index('data-testid="service-findings"'):]
    assert "No open findings" not in section
    assert _rows(section) == [log4j.pk]
    row = section[section.index(f'<tr data-finding="{log4j.pk}"'):]
    row = row[: row.index("</tr>")]
    assert '<td class="num rank">1</td>' in row
    assert '<span class="badge decision-immediate">immediate</span>' in row
    assert f'<a href="/findings/{log4j.pk}/">{log4j.vuln_id}</a>' in row
    assert "Remote code injection in Log4j" in row and "log4j-core" in row
    assert "Immediate: exploited in the wild" in row

    etcd_html = client.get(f"/services/{etcd.pk}/").content.decode()
    etcd_finding = Finding.objects.get(team=team, cve_id="CVE-2020-15115")
    assert _rows(etcd_html[etcd_html.index('data-testid="service-findings"'):]) == [
        etcd_finding.pk
    ]


def _catalog(team) -> Service:
    """A service running a version with 30 vulnerable packages, ranked."""
    data = build(team)
    names = [f"pkg{i}" for i in range(30)]
    import_osv(team, [osv(f"GHSA-cat0-0000-{i:04d}", "npm", n, [{"introduced": "0"}])
                      for i, n in enumerate(names)])
    load_sbom(team, bom([(n, "1.0.0", f"pkg:npm/{n}@1.0.0") for n in names]),
              project="catalog", version="2.0")
    gateway = data["gateway"]
    assert isinstance(gateway, Service)
    catalog = Service.objects.create(environment=gateway.environment, name="catalog",
                                     first_seen=gateway.first_seen, last_seen=gateway.last_seen)
    deployment_set(team=team, environment="prod", service="catalog",
                   request=DeploymentRequest(project="catalog", version="2.0"), source="api",
                   principal=Principal(scopes_by_team={team.pk: frozenset({"sbom:write"})}))
    rerank(team)
    return catalog


def test_a_service_with_many_findings_pages_them_in_rank_order(team, client, make_user):
    catalog = _catalog(team)
    expected = list(
        Finding.objects.filter(team=team, project_version__project__name="catalog")
        .order_by("ranked__rank").values_list("pk", flat=True)
    )
    assert len(expected) == 30
    client.force_login(make_user("reader", team=team, role="viewer"))
    first = client.get(f"/services/{catalog.pk}/").content.decode()
    second = client.get(f"/services/{catalog.pk}/", {"page": 2}).content.decode()
    assert "Page 1 of 2 · 30 total" in first and "page=2" in first
    assert _rows(first) + _rows(second) == expected
    assert len(_rows(first)) == 25
    # The version's whole list is one click away.
    pv = Finding.objects.get(pk=expected[0]).project_version_id
    assert f"/findings/?project_version={pv}" in first


def test_a_service_nobody_deployed_says_why_it_lists_no_vulnerabilities(
    team, client, make_user
):
    data = build(team)
    gateway = data["gateway"]
    assert isinstance(gateway, Service)
    lonely = Service.objects.create(environment=gateway.environment, name="lonely",
                                    first_seen=gateway.first_seen, last_seen=gateway.last_seen)
    client.force_login(make_user("reader", team=team, role="viewer"))
    html = client.get(f"/services/{lonely.pk}/").content.decode()
    assert "nobody has said which project version it runs" in html


def test_a_service_page_shows_ranks_counted_from_the_key_in_one_statement(
    team, client, make_user, django_assert_max_num_queries
):
    """Stored ranks are those of the run that last wrote each row: the page counts its
    rows' ranks from the queue key, in one statement for the page."""
    catalog = _catalog(team)
    truth = dict(RankedFinding.objects.filter(team=team).values_list("finding_id", "rank"))
    stale_stored_ranks(team.pk)
    client.force_login(make_user("reader", team=team, role="viewer"))
    with django_assert_max_num_queries(30):  # 25 rows: not one rank query each
        first = client.get(f"/services/{catalog.pk}/").content.decode()
    rows = _rows(first)
    assert len(rows) == 25 and [truth[pk] for pk in rows] == sorted(truth[pk] for pk in rows)
    for pk in rows:
        row = first[first.index(f'<tr data-finding="{pk}"'):]
        assert f'<td class="num rank">{truth[pk]}</td>' in row[: row.index("</tr>")]
