"""The findings list's fast paths write exactly what the slow ones wrote: the API's rows
(`finding_rows_for_ids`) are FindingSerializer's, value for value and byte for byte, and a kept
API page answers what the page answered when it was made. Findings of every kind, with every
field set and every field left empty, ranked and unranked, due, overdue, assigned, linked to
Jira, with unicode in their text."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from trustrank.accounts.models import Team
from trustrank.findings.apis import FastJSONRenderer, fast_json
from trustrank.findings.choices import FindingKind, FindingSource
from trustrank.findings.models import Finding, FindingDue
from trustrank.findings.selectors import finding_list
from trustrank.findings.serializers import FindingSerializer, finding_rows_for_ids

pytestmark = pytest.mark.django_db


def varied_findings(team: Team, user) -> list[Finding]:
    """Findings whose fields take every shape a list row shows."""
    from trustrank.identity.models import Certificate, Identity
    from trustrank.inventory.models import Component, Project, ProjectVersion, Sbom
    from trustrank.jira.models import JiraIssueLink
    from trustrank.ranking.models import RankContext, RankedFinding
    from trustrank.runtime.models import Environment, Service
    from trustrank.vulns.models import Advisory

    now = timezone.now()
    today = timezone.localdate()
    project = Project.objects.create(team=team, name="bоутique-ßhop ✓")
    version = ProjectVersion.objects.create(project=project, version="1.0.0-β")
    sbom = Sbom.objects.create(project_version=version, digest="d" * 64, format="json",
                               spec_version="1.5")
    component = Component.objects.create(sbom=sbom, name="lodash", version="4.17.15",
                                         purl="pkg:npm/lodash@4.17.15")
    advisory = Advisory.objects.create(id="GHSA-p6mc-m468-83gw", modified=now,
                                       aliases=["CVE-2020-8203"], summary="Prototype pollution")
    environment = Environment.objects.create(team=team, name="prod", first_seen=now,
                                             last_seen=now)
    service = Service.objects.create(environment=environment, name="checkout", first_seen=now,
                                     last_seen=now)
    identity = Identity.objects.create(team=team, environment="prod",
                                       spiffe_id="spiffe://prod.example/web",
                                       trust_domain="prod.example")
    certificate = Certificate.objects.create(
        team=team, environment="prod", fingerprint_sha256="e" * 64, der=b"\x30", role="leaf",
        serial="01", not_before=now - timedelta(days=30), not_after=now - timedelta(days=1),
        key_type="rsa", signature_algorithm="sha256WithRSAEncryption", chain_status="ok",
        verified_at=now, last_seen_at=now,
    )
    full = Finding.objects.create(
        team=team, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
        fingerprint="full",
        title="Prototype <pollution> & \"lodash's\" — «zip» ✓ " + "long " * 20 + "\nsecond line",
        environment="prod", service=service, vuln_id="CVE-2020-8203", advisory=advisory,
        aliases=["CVE-2020-8203", "GHSA-p6mc-m468-83gw", "ünïcode-1"], cve_id="CVE-2020-8203",
        component=component, component_key="pkg:npm/lodash@4.17.15",
        component_purl="pkg:npm/lodash@4.17.15", component_name="lodash",
        component_version="4.17.15", ecosystem="npm", package_name="lodash",
        project=project, project_version=version, severity="high", severity_score=7.4,
        cvss_score=7.4, cvss_vector="CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:H/A:H",
        severity_source="advisory", in_kev=True, kev_date_added=today - timedelta(days=3),
        epss=0.12345, epss_percentile=0.987, state="exploitable", justification="",
        response=["update", "will_not_fix"], detail="détail <b>not html</b>",
        match_status="unknown", match_reason='version "1.x" <not> comparable & «odd»',
        fixed_versions=["4.17.19", "5.0.0"], evidence={"note": "ok", "n": [1, 2.5, None]},
        resolved_at=None, assignee=user, version=4,
    )
    Finding.objects.create(
        team=team, kind=FindingKind.VULNERABILITY, source=FindingSource.SBOM,
        fingerprint="bare", vuln_id="", title="", severity="unknown", aliases=[],
        component_key="pkg:pypi/x@1", state="resolved", resolved_at=now, auto_resolved=True,
    )
    expired = Finding.objects.create(
        team=team, kind=FindingKind.IDENTITY, source=FindingSource.CERTIFICATE,
        fingerprint="expired", category="expired", title="Certificate expired",
        environment="prod", certificate=certificate, identity=identity,
        spiffe_id="spiffe://prod.example/" + "w" * 80, severity="critical",
        evidence={"not_after": "2020-01-01"}, state="in_triage",
    )
    broken = Finding.objects.create(
        team=team, kind=FindingKind.RELIABILITY, source=FindingSource.TRACES,
        fingerprint="broken", category="broken_context", title="", environment="staging",
        service=service, severity="medium", state="not_affected",
        justification="code_not_reachable",
    )
    Finding.objects.create(
        team=team, kind=FindingKind.VULNERABILITY, source=FindingSource.OSV,
        fingerprint="plain", vuln_id="GHSA-aaaa-bbbb-cccc", aliases=["GHSA-aaaa-bbbb-cccc"],
        title="Cafe\u0301 au lait", severity="medium", cvss_score=5.0, epss=0.00001, epss_percentile=None,
        match_status="affected", component_name="<b>x</b>", project=project,
    )
    odd = Finding.objects.create(
        team=team, kind=FindingKind.IDENTITY, source=FindingSource.POLICY,
        fingerprint="odd", category="some_new_category", title="",
        severity="low", cvss_score=3.0, epss=0.0, epss_percentile=0.0,
    )
    context = RankContext.objects.create(digest="c" * 64, data={
        "environment": "prod", "service": "checkout", "deployed": True, "exposure": "internet",
        "reachability": "reachable", "exploitation": "active", "automatable": False,
        "human_impact": "high", "trust": 0.25,
        "explanation": [{"factor": "exposure", "effect": "+10", "detail": "ingress ✓"}],
        "path": ["ingress", "checkout"],
    })
    empty = RankContext.objects.create(digest="0" * 64, data={})
    RankedFinding.objects.create(finding=full, team=team, rank=1, env_rank=1, score=91.5,
                                 decision="immediate", context=context, environment="prod")
    RankedFinding.objects.create(finding=expired, team=team, rank=2, env_rank=1, score=40.0,
                                 decision="scheduled", context=empty)
    FindingDue.objects.create(finding=full, team=team, due_date=today - timedelta(days=1),
                              manual=True)
    FindingDue.objects.create(finding=expired, team=team, due_date=today + timedelta(days=5),
                              decision="scheduled", since=today)
    FindingDue.objects.create(finding=broken, team=team, due_date=today - timedelta(days=9))
    FindingDue.objects.create(finding=odd, team=team, due_date=None)
    for key, created in (("OPS-2", now), ("OPS-1", now - timedelta(hours=1))):
        JiraIssueLink.objects.create(finding=full, team=team, base_url=f"https://j{key}.example",
                                     project_key="OPS", key=key, url=f"https://j/{key}",
                                     created_at=created)
    return list(Finding.objects.filter(team=team))


@pytest.fixture
def listed(team: Team, make_user):
    varied_findings(team, make_user("ann ✓", team=team))
    from trustrank.accounts.principal import principal_for_key
    from trustrank.accounts.services import api_key_issue

    principal = principal_for_key(api_key_issue(team=team, name="t", scopes=["read"]).api_key)
    return finding_list(principal=principal)


@pytest.fixture
def rows(listed):
    return list(listed.prefetch_related("jira_links"))


def test_the_list_rows_are_the_serializers_rows(listed, rows) -> None:
    assert len(rows) == 6
    slow = [dict(item) for item in FindingSerializer(rows, many=True).data]
    # In the order asked, whatever the queryset's; an id the queryset does not match is left
    # out.
    ids = [f.pk for f in reversed(rows)]
    fast = list(reversed(finding_rows_for_ids(listed, [*ids, max(ids) + 1000])))
    for old, new in zip(slow, fast, strict=True):
        assert list(new) == list(old)  # the same keys in the same order
        assert new == old
    # Byte for byte as the API writes them, and as DRF's own encoder reads them.
    assert fast_json(fast) == fast_json(slow)
    assert JSONRenderer().render(fast) == JSONRenderer().render(slow)
    # Every shape is there: nulls and values side by side.
    for field in ("advisory", "component", "project", "project_version", "jira", "rank",
                  "due_date", "assignee_name", "resolved_at", "cvss_score", "service"):
        assert {new[field] is None for new in fast} == {True, False}, field
    assert {new["overdue"] for new in fast} == {True, False}


def test_an_api_page_kept_or_not_is_the_serializers_page(rows, api, team, settings) -> None:
    settings.TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS = 60
    cache.clear()
    client = api(team, "read")
    expected = [dict(item) for item in FindingSerializer(rows, many=True).data]
    for query in ("open=", "open=&ordering=rank", "open=&page_size=2&page=2"):
        made = client.get(f"/api/v1/findings?{query}")
        kept = client.get(f"/api/v1/findings?{query}")
        assert kept.content == made.content
        body = orjson.loads(made.content)
        by_id = {row["id"]: row for row in orjson.loads(fast_json(expected))}
        assert body["results"] == [by_id[row["id"]] for row in body["results"]]
        assert list(body) == ["count", "next", "previous", "results", "count_exact"]
        # Indented, and through DRF's test response, the kept rows read as the list they are.
        indented = client.get(f"/api/v1/findings?{query}", HTTP_ACCEPT="application/json; indent=2")
        assert orjson.loads(indented.content) == body and b"\n  " in indented.content
        assert list(kept.data["results"]) == body["results"]
    assert len(body["results"]) == 2


def test_kept_rows_render_as_the_rows_they_keep(listed, rows) -> None:
    from trustrank.findings.apis import EncodedRows

    data = finding_rows_for_ids(listed, [f.pk for f in rows])
    wrapped = {"count": 6, "results": EncodedRows(fast_json(data))}
    assert FastJSONRenderer().render(wrapped) == FastJSONRenderer().render(
        {"count": 6, "results": data}
    )
    indented = FastJSONRenderer().render(wrapped, "application/json; indent=2", {})
    assert orjson.loads(indented) == orjson.loads(fast_json({"count": 6, "results": data}))


@pytest.mark.parametrize("can_triage", [True, False])
def test_the_table_rows_are_the_templates_rows(rows, can_triage) -> None:
    """The rows as the template loop wrote them (tests/findings/findings_rows_reference.html),
    character for character: escaping, numbers, truncation, dates, links, the rank's why."""
    from pathlib import Path

    from django.template import engines

    from trustrank.findings.table import finding_rows_html
    from trustrank.ranking.templatetags.rank_tags import rank_why

    reference = engines["django"].from_string(
        (Path(__file__).parent / "findings_rows_reference.html").read_text()
    )
    expected = reference.render({"findings": rows, "can_triage": can_triage})
    written = finding_rows_html(rows, can_triage=can_triage, rank_why=rank_why)
    assert written == expected
    # What the rows hold: escaped text, a truncated title, a why, an overdue date.
    for needle in ("&lt;pollution&gt; &amp; &quot;lodash&#x27;s&quot;", "…", 'data-testid="rank-why"',
                   'class="badge bad overdue"', "&lt;b&gt;x&lt;/b&gt;", "not ranked yet",
                   "Caf\u00e9 au lait"):
        assert needle in written, needle
    assert ('name="ids"' in written) is can_triage
    assert finding_rows_html([], can_triage=can_triage, rank_why=rank_why) == ""


def test_the_page_shows_the_rows(rows, team, make_user, client) -> None:
    client.force_login(make_user("bo", team=team))
    page = client.get("/findings/?open=").content.decode()
    assert page.count('<tr data-finding="') == 6
    assert "No findings match." not in page
    assert "No findings match." in client.get("/findings/?q=nothing-like-it").content.decode()
