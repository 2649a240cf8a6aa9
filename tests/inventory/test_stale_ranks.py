"""The Dependency-Track findings API shows each finding's rank counted from the queue key,
not the stored `rank` (the rank as of the run that last wrote the row), in that order."""

from __future__ import annotations

import re

import pytest

from tests.exports.helpers import rerank
from tests.inventory.test_dt_results import COMPONENTS, shop  # noqa: F401 (fixture)
from tests.ranking.stale import stale_stored_ranks
from tests.vulns.helpers import bom, load_sbom
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankedFinding

pytestmark = pytest.mark.django_db


def test_dependency_track_findings_show_ranks_counted_from_the_key(api, team, shop):  # noqa: F811
    load_sbom(team, bom(COMPONENTS[:2]), project="other", version="1")  # more of the queue
    rerank(team)
    queue = list(RankedFinding.objects.filter(team=team).order_by("qkey", "finding_id")
                 .values_list("finding_id", flat=True))
    truth = {fid: place for place, fid in enumerate(queue, start=1)}
    stale_stored_ranks(team.pk)
    found = api(team, "read").get(f"/api/v1/finding/project/{shop.uuid}").json()
    assert len(found) == 3
    ranks = [f["rank"] for f in found]
    assert ranks == sorted(ranks)  # in the queue's order
    for f in found:
        pk = Finding.objects.get(project_version=shop, vuln_id=f["vulnerability"]["vulnId"]).pk
        assert f["rank"] == truth[pk]


def test_the_project_page_shows_ranks_counted_from_the_key(
    client, make_user, team, shop, django_assert_max_num_queries  # noqa: F811
):
    load_sbom(team, bom(COMPONENTS[:2]), project="other", version="1")
    rerank(team)
    truth = dict(RankedFinding.objects.filter(team=team).values_list("finding_id", "rank"))
    stale_stored_ranks(team.pk)
    client.force_login(make_user("alice", team=team))
    with django_assert_max_num_queries(40):
        html = client.get(f"/projects/{shop.project_id}/").content.decode()
    table = html[html.index("<th class=\"num\">Rank</th>"):]
    shown = [int(r) for r in re.findall(r'<td class="num">(\d+)</td>', table)]
    mine = sorted(truth[pk] for pk in Finding.objects.filter(project_version=shop)
                  .values_list("pk", flat=True))
    assert shown == mine  # the counted ranks, best first
