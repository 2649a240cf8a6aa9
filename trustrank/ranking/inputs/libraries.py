"""Library evidence per service: the instrumentation scopes and packages its spans name over
the window, matched to the components of its deployed SBOMs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from trustrank.ranking.inputs.graph import Rates
from trustrank.risk import inputs as ri
from trustrank.risk.libraries import Evidence, library_map, observed_components
from trustrank.runtime.models import NodeKind

_LIBRARY_RATES_SQL = """
SELECT service_id, kind, name, sum(spans), sum(spans) FILTER (WHERE bucket_start >= %s),
       max(spans)
  FROM (SELECT b.service_id, b.kind, b.name, b.bucket_start, sum(b.spans) AS spans
          FROM runtime_librarybucket b
          JOIN runtime_service s ON s.id = b.service_id
          JOIN runtime_environment e ON e.id = s.environment_id
         WHERE e.team_id = %s AND b.bucket_start >= %s AND b.kind <> 'origin'
         -- Versions of one scope name are one piece of evidence: the busiest bucket is
         -- the busiest of their sum.
         GROUP BY b.service_id, b.kind, b.name, b.bucket_start) per_bucket
 GROUP BY service_id, kind, name
 ORDER BY service_id, kind, name
"""

# The services traced in the window (Service.objects.filter(environment__team_id=…,
# kind=…, last_seen__gte=…)).
_TRACED_SQL = """
SELECT s.id FROM runtime_service s
 WHERE s.environment_id IN (SELECT id FROM runtime_environment WHERE team_id = %s)
   AND s.kind = %s AND s.last_seen >= %s
"""


def sbom_packages_by_service(
    deployments: Sequence[ri.Deployment], components: Sequence[ri.Component],
) -> dict[tuple[str, str], dict[str, tuple[str, ...]]]:
    """Per (environment, service): package prefix -> component keys, from the components
    of the service's deployed SBOMs that list their packages."""
    by_version: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for c in components:
        for package in c.packages:
            by_version[c.project_version][package].append(c.key)
    out: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
    for d in deployments:
        packages = by_version.get(d.project_version)
        if packages:
            table = out.setdefault((d.environment, d.service), {})
            for package, keys in packages.items():
                table[package] = tuple(sorted(set(table.get(package, ())) | set(keys)))
    return out


@dataclass(frozen=True)
class LibrariesRead:
    """What a gather read of the library evidence (`key`) and the records made of it. A
    next gather that reads the same reuses these very records (at 100,000 services,
    making them again was 0.5 s of every run), and `changed_between` knows without
    comparing them that no service's evidence changed."""

    key: tuple[Any, ...]
    records: tuple[ri.ServiceLibraries, ...]


def libraries_read(
    team_id: int, since: datetime, minutes: float, names: dict[int, tuple[str, str]],
    rank_settings_: ri.RankSettings, rates: Rates,
    sbom_packages: dict[tuple[str, str], dict[str, tuple[str, ...]]] | None = None,
    previous: LibrariesRead | None = None,
) -> LibrariesRead:
    sbom_packages = sbom_packages or {}
    with connection.cursor() as cur:
        cur.execute(_LIBRARY_RATES_SQL, [rates.recent_since, team_id, since])
        rows = cur.fetchall()
        # Raw SQL: a hundred thousand ids through the ORM cost more than the query.
        cur.execute(_TRACED_SQL, [team_id, NodeKind.SERVICE, since])
        traced = {pk for (pk,) in cur.fetchall()}
    key = (rows, traced, names, sbom_packages, minutes, rates.enabled, rates.bucket_minutes,
           rank_settings_.library_map)
    if previous is not None and previous.key == key:
        return previous
    rules = library_map(rank_settings_.library_map)
    evidence: dict[int, list[Evidence]] = defaultdict(list)
    # Ordered by the SQL: rates are summed per component in this order, so the same
    # evidence always gives the same floats.
    for service_id, kind, name, spans, recent, peak in rows:
        evidence[service_id].append(
            (kind, name, int(spans) / minutes, rates.recent(recent), rates.peak(peak))
        )
    out = []
    for pk in sorted(traced | set(evidence)):
        if pk not in names:
            continue
        env, name = names[pk]
        out.append(
            ri.ServiceLibraries(
                environment=env,
                service=name,
                traced=pk in traced,
                observed=observed_components(evidence=evidence.get(pk, []), rules=rules,
                                             sbom=sbom_packages.get((env, name))),
            )
        )
    return LibrariesRead(key, tuple(out))
