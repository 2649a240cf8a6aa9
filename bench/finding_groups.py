"""Findings grouped by fix / by vulnerability, and project risk, at a million findings.

Fills a database it may fill (DATABASE_URL; a fresh, migrated one — the bench team is
replaced) with generated findings in SQL (INSERT … SELECT generate_series): one team, 200
projects, 2,000 packages across npm, PyPI and Maven, 20,000 advisories, four in five open and
ranked, one in thirteen without a fixed version. Then times, best of three, the first page of
GET /api/v1/findings/groups (by=fix, a filtered one, page 5, by=vulnerability) through the
selectors, a project's risk summary and series, and the projects list's risk of 50 projects.

    DATABASE_URL=postgres://…/bench_groups python bench/finding_groups.py [--findings 1000000]

Last line: {"fix_ms": …, "fix_filtered_ms": …, "fix_page5_ms": …, "vulnerability_ms": …,
            "risk_summary_ms": …, "open_over_time_ms": …, "risk_50_projects_ms": …}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trustrank.settings")
os.environ.setdefault("TRUSTRANK_TESTING", "1")

FINDINGS_SQL = """
INSERT INTO findings_finding (
  kind, category, source, fingerprint, title, severity, severity_score, state, justification,
  response, detail, evidence, first_seen, last_seen, resolved_at, auto_resolved, created_at,
  updated_at, environment, spiffe_id, component_key, component_purl, component_name,
  component_version, ecosystem, package_name, vuln_id, aliases, cve_id, match_status,
  match_reason, fixed_versions, in_kev, vex_evidence, team_id, project_id, version)
SELECT 'vulnerability', '', 'osv', 'fp-' || g, '',
  (ARRAY['critical','high','medium','low'])[1 + g %% 4], 5.0,
  CASE WHEN g %% 5 = 0 THEN 'resolved' ELSE 'in_triage' END, '', '[]', '', '{}',
  now() - ((g %% 120) || ' days')::interval, now(),
  CASE WHEN g %% 5 = 0 THEN now() - ((g %% 30) || ' days')::interval END, false, now(), now(),
  '', '', '', '', 'pkg-' || (g %% 2000),
  (g %% 3) || '.' || (g %% 7) || '.' || (g %% 11),
  (ARRAY['npm','PyPI','Maven'])[1 + (g %% 2000) %% 3], 'pkg-' || (g %% 2000),
  'GHSA-' || (g %% 20000), ARRAY['GHSA-' || (g %% 20000), 'CVE-2024-' || (g %% 20000)],
  'CVE-2024-' || (g %% 20000), 'affected', '',
  CASE WHEN g %% 13 = 0 THEN '[]'::jsonb
       ELSE jsonb_build_array((g %% 3) || '.' || (g %% 7) || '.' || (g %% 11 + 1),
                              ((g %% 3) + 1) || '.0.0') END,
  g %% 97 = 0, '{}', %(team)s, %(first_project)s + (g * 7919) %% 200, 1
FROM generate_series(1, %(n)s) g;
INSERT INTO findings_findingdue (finding_id, team_id, decision, since, due_date, manual)
SELECT id, team_id, '', NULL, (now() - ((id %% 60 - 30) || ' days')::interval)::date, true
FROM findings_finding WHERE team_id = %(team)s
"""

RANKS_SQL = """
INSERT INTO ranking_rankcontext (digest, data, created_at)
VALUES (repeat('b', 64), '{}', now()) ON CONFLICT DO NOTHING;
INSERT INTO ranking_rankedfinding
  (finding_id, team_id, rank, env_rank, environment, score, decision, context_id)
SELECT id, team_id, row_number() OVER (ORDER BY id), 0, '', 1.0,
  (ARRAY['defer','scheduled','out-of-cycle','immediate'])[1 + id %% 4], repeat('b', 64)
FROM findings_finding WHERE team_id = %(team)s AND state = 'in_triage';
"""


def build(*, findings: int) -> int:
    from django.db import connection, transaction

    from trustrank.accounts.models import Team
    from trustrank.inventory.models import Project

    Team.objects.filter(name="bench-groups").delete()
    team = Team.objects.create(name="bench-groups")
    Project.objects.bulk_create(
        [Project(team=team, name=f"proj-{i:03d}") for i in range(200)]
    )
    first = Project.objects.filter(team=team).order_by("pk").first()
    assert first is not None
    with transaction.atomic(), connection.cursor() as cur:
        params = {"team": team.pk, "first_project": first.pk, "n": findings}
        for statement in (FINDINGS_SQL + ";" + RANKS_SQL).split(";"):
            if statement.strip():
                cur.execute(statement, params)
    with connection.cursor() as cur:
        cur.execute("ANALYZE findings_finding")
        cur.execute("ANALYZE ranking_rankedfinding")
    return team.pk


def best_ms(fn: Callable[[], Any], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return round(best * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--findings", type=int, default=1_000_000)
    args = parser.parse_args()
    import django

    django.setup()
    from django.http import QueryDict

    from trustrank.findings.filters import FindingFilterSet
    from trustrank.findings.groups import finding_groups
    from trustrank.findings.models import Finding
    from trustrank.inventory.models import Project
    from trustrank.inventory.selectors import (
        project_open_over_time,
        project_risk_for_projects,
        project_risk_summary,
    )
    from trustrank.ranking.ranks import rank_sql

    start = time.perf_counter()
    team_id = build(findings=args.findings)
    print(f"built {args.findings} findings in {time.perf_counter() - start:.0f} s", flush=True)
    base = Finding.objects.filter(team_id=team_id).select_related("ranked")

    def groups(query: str, by: str, page: int = 1) -> Callable[[], Any]:
        filterset = FindingFilterSet(QueryDict(query), queryset=base)
        assert filterset.is_valid(), filterset.errors
        return lambda: finding_groups(qs=filterset.qs, by=by, limit=50, offset=(page - 1) * 50,
                                      rank_sql=rank_sql)

    project = Project.objects.filter(team_id=team_id).order_by("name").first()
    assert project is not None
    page = list(Project.objects.filter(team_id=team_id).order_by("name")[:50])
    result = {
        "fix_ms": best_ms(groups("", "fix")),
        "fix_filtered_ms": best_ms(groups("severity=critical&kev=true", "fix")),
        "fix_page5_ms": best_ms(groups("", "fix", page=5)),
        "vulnerability_ms": best_ms(groups("open=true", "vulnerability")),
        "risk_summary_ms": best_ms(lambda: project_risk_summary(project)),
        "open_over_time_ms": best_ms(lambda: project_open_over_time(project, days=90)),
        "risk_50_projects_ms": best_ms(lambda: project_risk_for_projects(projects=page)),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
