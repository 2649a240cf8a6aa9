"""The gate names each failing finding with its rank counted from the queue key, not the
stored `rank` (the rank as of the run that last wrote the row), and lists them in that
order."""

from __future__ import annotations

import pytest

from tests.gate.helpers import LOG4J, SPRING, advisories, deploy, rerank
from tests.ranking.stale import stale_stored_ranks
from tests.vulns.helpers import bom, load_sbom
from trustrank.gate.models import GatePolicy
from trustrank.ranking.models import RankedFinding

pytestmark = pytest.mark.django_db


def test_failing_findings_show_and_follow_the_ranks_counted_from_the_key(api, team):
    advisories(team)
    load_sbom(team, bom([LOG4J, SPRING]), project="shop", version="1.4")
    deploy(team, service="shop", project="shop", version="1.4")
    load_sbom(team, bom([LOG4J]), project="other", version="1")  # another place in the queue
    rerank(team)
    queue = list(RankedFinding.objects.filter(team=team).order_by("qkey", "finding_id")
                 .values_list("finding_id", flat=True))
    truth = {fid: place for place, fid in enumerate(queue, start=1)}
    stale_stored_ranks(team.pk)
    GatePolicy.objects.create(team=team, fail_on="out-of-cycle")
    body = api(team, "read").get("/api/v1/gate", {"project": "shop", "version": "1.4"}).json()
    failing = [(f["finding"], f["rank"]) for f in body["failing"]]
    assert len(failing) == 2
    assert failing == sorted(((fid, truth[fid]) for fid, _ in failing), key=lambda p: p[1])
    assert f"(rank {failing[0][1]}, " in body["reasons"][0]
