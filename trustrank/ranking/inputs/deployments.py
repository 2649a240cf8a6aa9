"""Deployments (what version of which project runs as which service) and the code provenance
of the deployed versions' current SBOMs."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from itertools import compress, count
from operator import ne
from typing import Any, cast

from django.db import connection
from django.db.models.expressions import RawSQL

from trustrank.inventory.models import Component
from trustrank.ranking.inputs.findings import CHUNK
from trustrank.ranking.inputs.ids import int_array
from trustrank.risk import inputs as ri
from trustrank.risk.libraries import component_key_from_purl
from trustrank.runtime.deployment import deployments_from_telemetry
from trustrank.runtime.models import DeploymentSource
from trustrank.runtime.revisions import TeamRevision

# How each deployment source reads in explanations (runtime.models.DeploymentSource).
DEPLOYMENT_SOURCE_WORDS: dict[str, str] = {
    DeploymentSource.SBOM: "sbom upload",
    DeploymentSource.API: "API",
    DeploymentSource.TELEMETRY: "telemetry",
    DeploymentSource.MANUAL: "page",
}


# Raw SQL: the ORM's rows of 20,000 deployments through its converters were 0.2 s of every
# run. In id order, so that two reads of the same rows compare equal: the model's order
# (by name, under the database's collation) was a sort of 110 ms, against 53 ms for
# the whole statement in id order.
_DEPLOYMENTS_SQL = """
SELECT e.name, d.service_name, d.project_version_id, d.human_impact, d.source, p.name,
       v.version
  FROM runtime_deployment d
  JOIN runtime_environment e ON e.id = d.environment_id
  JOIN inventory_projectversion v ON v.id = d.project_version_id
  JOIN inventory_project p ON p.id = v.project_id
 WHERE e.team_id = %s
 ORDER BY d.id
"""


@dataclass(frozen=True)
class DeploymentsRead:
    """The deployments part of a gather: the rows read, their records and the versions
    they name. A next gather that reads equal rows keeps these very records, so
    `changed_between` knows without comparing them that no deployment changed."""

    rows: list[tuple[Any, ...]]
    records: tuple[ri.Deployment, ...]
    version_ids: frozenset[int]
    # The team's revision read just before them (`runtime.revisions`).
    revision: TeamRevision | None = None
    # When these rows are `base` (the previous read's very list) but at the places `differ`
    # (as many rows, in the same order): what `changed_between` compares, not every row.
    base: list[tuple[Any, ...]] | None = None
    differ: tuple[int, ...] = ()


def deployments_read(
    team_id: int, previous: DeploymentsRead | None = None,
    revision: TeamRevision | None = None,
) -> DeploymentsRead:
    # While the team's services, deployments and project versions keep their revision, the
    # deployments from telemetry would record none (24 ms of PostgreSQL per run at 100,000
    # services). The deployments are read every run: a change of impact does not move the
    # revision (runtime.0010).
    if previous is None or revision is None or previous.revision != revision:
        deployments_from_telemetry(team_id=team_id)
    with connection.cursor() as cur:
        cur.execute(_DEPLOYMENTS_SQL, [team_id])
        rows = cur.fetchall()
    if previous is None:
        return DeploymentsRead(rows, tuple(map(_record, rows)),
                               frozenset(row[2] for row in rows), revision)
    return read_again(previous, rows, revision)


def read_again(previous: DeploymentsRead, rows: list[tuple[Any, ...]],
               revision: TeamRevision | None = None) -> DeploymentsRead:
    """The deployments `rows` read after `previous`: a row read again keeps its record, so
    one deployment's change makes one record, not 20,000."""
    if previous.rows == rows:
        return DeploymentsRead(previous.rows, previous.records, previous.version_ids, revision)
    if len(previous.rows) == len(rows):
        # As many rows in id order: most often the same deployments with one changed. The
        # rows at the same place are compared, and only those that differ make records and
        # are compared by `changed_between` (hashing 20,000 rows three times over was
        # 0.03 s of each run).
        differ = tuple(compress(count(), map(ne, previous.rows, rows)))
        made = list(previous.records)
        for k in differ:
            made[k] = _record(rows[k])
        versions = (previous.version_ids
                    if all(rows[k][2] == previous.rows[k][2] for k in differ)
                    else frozenset(row[2] for row in rows))
        return DeploymentsRead(rows, tuple(made), versions, revision, previous.rows, differ)
    before = dict(zip(previous.rows, previous.records, strict=True))
    records = tuple(before.get(row) or _record(row) for row in rows)
    return DeploymentsRead(rows, records, frozenset(row[2] for row in rows), revision)


def _record(row: tuple[Any, ...]) -> ri.Deployment:
    env, service, pv_id, impact, source, project, version = row
    return ri.Deployment(
        environment=env, service=service, project_version=str(pv_id),
        human_impact=cast(ri.HumanImpact, impact),
        source=DEPLOYMENT_SOURCE_WORDS.get(source, source),
        project_version_name=f"{project}@{version}" if version else project,
    )


# The components of one deployed SBOM as a version holds it: (SBOM id, version id) -> its
# components. An SBOM's components are written once, when it is loaded, so the next gather
# takes them from the previous one's by that key and reads only the SBOMs it has not seen.
SbomComponents = dict[tuple[int, int], tuple[ri.Component, ...]]


def components_read(
    version_ids: Collection[int], previous: SbomComponents | None = None,
    previous_versions: tuple[ri.ProjectVersion, ...] | None = None,
) -> tuple[tuple[ri.ProjectVersion, ...], tuple[ri.Component, ...], SbomComponents]:
    """Code provenance of the deployed versions' current SBOMs, and the components of each
    SBOM (`SbomComponents`); those of an SBOM in `previous` are its records, not read.
    `previous_versions`, the version records of a gather of these same versions, are
    kept as they are."""
    # One array parameter, not `pk__in`: a list of 20,000 ids as 20,000 parameters took
    # 0.22-0.27 s to send and plan, the array 0.04 s, and as a literal 0.006 s.
    with connection.cursor() as cur:
        cur.execute("SELECT id, current_sbom_id FROM inventory_projectversion "
                    "WHERE id = ANY(%s::bigint[]) AND current_sbom_id IS NOT NULL",
                    [int_array(sorted(version_ids))])
        sbom_to_pv = {sbom: pv for pv, sbom in cur.fetchall()}
    held = previous or {}
    by_sbom: SbomComponents = {}
    read: dict[int, dict[str, ri.Component]] = {}
    for sbom, pv in sbom_to_pv.items():
        kept = held.get((sbom, pv))
        if kept is not None:
            by_sbom[(sbom, pv)] = kept
        else:
            read[sbom] = {}
    if read:
        rows = Component.objects.filter(
            sbom_id__in=RawSQL("SELECT unnest(%s::bigint[])", [sorted(read)])
        ).values_list("sbom_id", "purl", "name", "hashes", "supplier", "packages")
        for sbom_id, purl, name, hashes, supplier, packages in rows.iterator(chunk_size=CHUNK):
            pv_key = str(sbom_to_pv[sbom_id])
            key = component_key_from_purl(purl) if purl else name
            read[sbom_id][key] = ri.Component(
                project_version=pv_key, key=key, hashes_present=bool(hashes),
                supplier_known=bool(supplier), packages=tuple(packages or ()),
            )
        for sbom, found in read.items():
            by_sbom[(sbom, sbom_to_pv[sbom])] = tuple(found.values())
    versions = previous_versions if previous_versions is not None else tuple(
        ri.ProjectVersion(key=str(pv)) for pv in sorted(version_ids))
    return versions, tuple(c for held_ in by_sbom.values() for c in held_), by_sbom
