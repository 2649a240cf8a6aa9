"""The findings search at scale: N vulnerability findings of one team (default 1,000,000),
made in PostgreSQL with generate_series, then the list's search (FindingFilterSet `q`) for a
few substrings and prefixes of ids, packages and purls, with EXPLAIN ANALYZE: each plan must
read the trigram GIN index (findings_search_trgm), not the whole table.

    DATABASE_URL=postgres://…/bench_search python bench/findings_search.py [--findings 1000000]

Needs a migrated database it may fill (the bench team is replaced). Last line:
{"findings": …, "searches": {q: {"ms": …, "rows": …, "index": true}}}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trustrank.settings")
os.environ.setdefault("TRUSTRANK_TESTING", "1")

# Package names cycle through a few thousand; ids are unique per finding.
_FILL_SQL = """
INSERT INTO findings_finding (
    team_id, kind, category, source, fingerprint, title, severity, severity_score, state,
    justification, response, detail, evidence, first_seen, last_seen, auto_resolved,
    created_at, updated_at, version, environment, spiffe_id,
    component_key, component_purl, component_name, component_version, ecosystem,
    package_name, vuln_id, aliases, cve_id, match_status, match_reason, fixed_versions,
    in_kev, vex_evidence
)
SELECT %(team)s, 'vulnerability', '', 'osv', 'bench-' || g, 'bench finding ' || g, 'high',
       (g %% 100) / 10.0, CASE WHEN g %% 5 = 0 THEN 'resolved' ELSE 'in_triage' END,
       '', '[]', '', '{}', now(), now(), false, now(), now(), 1, '', '',
       'npm:pkg-' || (g %% 5000), 'pkg:npm/pkg-' || (g %% 5000) || '@1.' || (g %% 97) || '.0',
       'pkg-' || (g %% 5000), '1.' || (g %% 97) || '.0', 'npm', 'pkg-' || (g %% 5000),
       'GHSA-' || lpad(to_hex(g), 4, '0') || '-' || lpad(to_hex(g * 7 %% 65536), 4, '0')
           || '-bnch',
       ARRAY['CVE-' || (2000 + g %% 25) || '-' || (100000 + g)],
       'CVE-' || (2000 + g %% 25) || '-' || (100000 + g), 'affected', '', '[]',
       g %% 50 = 0, '{}'
FROM generate_series(1, %(n)s) AS g
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--findings", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true", help="reuse the rows of an earlier run")
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection

    from trustrank.accounts.models import Team
    from trustrank.findings.filters import FindingFilterSet
    from trustrank.findings.models import Finding

    team, _ = Team.objects.get_or_create(name="bench-search")
    if not args.keep or not Finding.objects.filter(team=team).exists():
        t0 = time.perf_counter()
        with connection.cursor() as cur:
            cur.execute("DELETE FROM findings_finding WHERE team_id = %s", [team.pk])
            cur.execute(_FILL_SQL, {"team": team.pk, "n": args.findings})
            cur.execute("ANALYZE findings_finding")
        print(f"filled {args.findings} findings in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    searches = {}
    for q in ("CVE-2021-1000", "cve-2013-54321", "GHSA-1e2f", "pkg:npm/pkg-123@",
              "pkg-4999", "kg-42"):
        qs = FindingFilterSet({"q": q}, queryset=Finding.objects.filter(team=team)).qs
        page = qs.order_by("-baseline_priority", "-id")[:51]
        plan = page.explain(analyze=True)
        t0 = time.perf_counter()
        rows = len(list(page))
        ms = (time.perf_counter() - t0) * 1000
        count_plan = qs.order_by().explain()
        searches[q] = {
            "ms": round(ms, 1),
            "rows": rows,
            "index": "findings_search_trgm" in plan or "findings_search_trgm" in count_plan,
        }
        print(f"--- q={q} ({ms:.1f} ms, {rows} rows)\n{plan}\n", file=sys.stderr)
    print(json.dumps({"findings": args.findings, "searches": searches}))


if __name__ == "__main__":
    main()
