"""Baseline priorities reach API JSON with at most two decimals (9.8 · 6 is 58.800000000000004
in floating point; the page shows 58.8, so must the API and anything built on it)."""

from __future__ import annotations

import re

import pytest

from tests.ranking.scenario import build
from trustrank.findings.models import Finding
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.ranking.services.runs import ranking_run_execute

pytestmark = pytest.mark.django_db

NUMBER = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


def _values(text: str, field: str) -> list[str]:
    return re.findall(rf'"{field}":{NUMBER}', text)


def _at_most_two_decimals(values: list[str]) -> bool:
    return all(re.fullmatch(r"-?\d+(\.\d{1,2})?", value) for value in values)


@pytest.fixture
def ranked(team):
    build(team)
    # Without an EPSS score etcd's baseline is CVSS 9.8 · 6, 58.800000000000004 unrounded.
    Finding.objects.filter(team=team, cve_id="CVE-2020-15115").update(epss=None)
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert ranking_run_execute(run_id=run.pk) == "done"
    return Finding.objects.get(team=team, cve_id="CVE-2020-15115")


def test_findings_list_and_detail_carry_two_decimal_baselines(api, team, ranked):
    client = api(team, "read")
    listed = client.get("/api/v1/findings").content.decode()
    values = _values(listed, "baseline_priority")
    assert len(values) == 2 and _at_most_two_decimals(values), values
    assert _at_most_two_decimals(_values(listed, "baseline"))
    detail = client.get(f"/api/v1/findings/{ranked.pk}").content.decode()
    assert '"baseline_priority":58.8' in detail
    assert _values(detail, "baseline_priority") == ["58.8"]


def test_priorities_carry_two_decimal_baselines(api, team, ranked):
    text = api(team, "read").get("/api/v1/priorities").content.decode()
    values = _values(text, "baseline")
    assert len(values) == 2 and _at_most_two_decimals(values), values
    assert "58.8" in values
