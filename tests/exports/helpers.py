"""Data for export tests: the ranking scenario (Log4j on an internet-facing gateway, etcd on
localhost), ranked by a real run, and bulk findings for volume tests."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.utils import timezone

from tests.ranking.scenario import build
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.ranking.services.runs import ranking_run_execute


def rerank(team: Any) -> RankingRun:
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert ranking_run_execute(run_id=run.pk) == "done", RankingRun.objects.get(pk=run.pk).error
    return RankingRun.objects.get(pk=run.pk)


def ranked_scenario(team: Any) -> dict[str, Any]:
    built = build(team)
    run = rerank(team)
    findings = Finding.objects.filter(team=team)
    return {
        **built,
        "run": run,
        "log4j": findings.get(component_name__contains="log4j"),
        "etcd": findings.get(component_name__contains="etcd"),
    }


def bulk_findings(team: Any, n: int, *, prefix: str = "bulk") -> None:
    now = timezone.now()
    Finding.objects.bulk_create(
        [
            Finding(
                team=team,
                kind="vulnerability",
                source="osv",
                fingerprint=f"{prefix}-{i}",
                title=f"{prefix} finding {i} with a title long enough to look real",
                severity="high",
                severity_score=7.5,
                cvss_score=7.5,
                vuln_id=f"GHSA-{prefix}-{i % 500}",
                cve_id=f"CVE-2026-{i % 500}",
                aliases=[f"CVE-2026-{i % 500}"],
                component_purl=f"pkg:pypi/pkg{i % 1000}@1.{i % 7}",
                component_name=f"pkg{i % 1000}",
                component_version=f"1.{i % 7}",
                first_seen=now,
                last_seen=now,
            )
            for i in range(n)
        ],
        batch_size=5000,
    )


def body_of(response: Any) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return bytes(response.content)


def csv_rows(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode())))
