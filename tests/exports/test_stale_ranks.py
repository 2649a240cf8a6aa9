"""An export shows each finding's rank counted from the queue key, not the stored `rank` and
`env_rank` (the ranks as of the run that last wrote the row): the whole queue's and, when
filtered, still the rank in the whole queue."""

from __future__ import annotations

import orjson
import pytest

from tests.exports.helpers import body_of, bulk_findings, csv_rows, ranked_scenario, rerank
from tests.ranking.stale import stale_stored_ranks
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankedFinding

pytestmark = pytest.mark.django_db


@pytest.fixture
def truth(team):
    """Finding id -> (rank, env rank) as the run left them, counted here from the keys; the
    stored ranks made stale after."""
    ranked_scenario(team)
    bulk_findings(team, 7)
    Finding.objects.filter(fingerprint__in=["bulk-2", "bulk-5"]).update(
        severity_score=9.9, cvss_score=9.9
    )
    rerank(team)
    rows = list(RankedFinding.objects.filter(team=team).order_by("qkey", "finding_id"))
    assert len({r.environment for r in rows}) > 1, "the scenario should span environments"
    seen: dict[str, int] = {}
    ranks = {}
    for place, r in enumerate(rows, start=1):
        seen[r.environment] = seen.get(r.environment, 0) + 1
        ranks[r.finding_id] = (place, seen[r.environment])
    # The store still writes dense ranks: the key's count agrees with what it wrote.
    assert ranks == {r.finding_id: (r.rank, r.env_rank) for r in rows}
    stale_stored_ranks(team.pk)
    return ranks


def _queue(truth: dict[int, tuple[int, int]]) -> list[int]:
    return sorted(truth, key=lambda fid: truth[fid][0])


def _csv_ranks(rows: list[dict[str, str]]) -> dict[int, tuple[int, int]]:
    return {int(r["finding_id"]): (int(r["rank"]), int(r["env_rank"])) for r in rows
            if r["rank"]}


def test_a_csv_export_counts_ranks_from_the_key(api, team, truth):
    bulk_findings(team, 2, prefix="late")  # not ranked: after the ranked ones, no rank
    rows = csv_rows(body_of(api(team, "read").get("/api/v1/exports", {"format": "csv"})))
    assert [int(r["finding_id"]) for r in rows[: len(truth)]] == _queue(truth)
    assert _csv_ranks(rows) == truth
    assert [r["rank"] for r in rows[len(truth):]] == ["", ""]


def test_a_json_export_counts_ranks_from_the_key(api, team, truth):
    doc = orjson.loads(body_of(api(team, "read").get("/api/v1/exports", {"format": "json"})))
    found = {f["finding_id"]: (f["rank"], f["env_rank"]) for f in doc["findings"]}
    assert [f["finding_id"] for f in doc["findings"]] == _queue(truth)
    assert found == truth


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_filtered_export_shows_the_rank_in_the_whole_queue(api, team, truth, fmt):
    kept = set(Finding.objects.filter(severity="high", fingerprint__startswith="bulk")
               .values_list("pk", flat=True))
    response = api(team, "read").get("/api/v1/exports", {"format": fmt, "severity": "high"})
    if fmt == "csv":
        rows = csv_rows(body_of(response))
        found = _csv_ranks(rows)
        order = [int(r["finding_id"]) for r in rows]
    else:
        findings = orjson.loads(body_of(response))["findings"]
        found = {f["finding_id"]: (f["rank"], f["env_rank"]) for f in findings}
        order = [f["finding_id"] for f in findings]
    assert set(found) == kept and len(kept) < len(truth)
    assert found == {fid: truth[fid] for fid in kept}
    assert order == [fid for fid in _queue(truth) if fid in kept]


def test_counting_an_export_does_not_number_the_queue(team, truth):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from trustrank.exports.services.params import ExportRequest
    from trustrank.exports.services.rows import export_count, export_selection

    selection = export_selection(ExportRequest(format="csv", team_id=team.pk))
    with CaptureQueriesContext(connection) as queries:
        assert export_count(selection) == len(truth)
        assert export_count(selection, cap=3) == 4
    assert not any("row_number" in q["sql"] for q in queries.captured_queries)
    # The selection itself still reads the ranks after a count.
    assert {v["id"]: (v["rank_"], v["env_rank_"]) for v in selection.queryset} == truth
