"""Gather one team's evidence from PostgreSQL into the engine's plain inputs (RankInputs).

Everything the engine reads comes through here, as frozen records keyed by names (no model
instances cross into trustrank.risk). Volumes: findings are read with values_list in
chunks (a million open findings is the design point); graph evidence (services, edges,
library use) is aggregated over the ranking window in SQL.

One module per input family: `graph` (services, call edges, peers, origins, identities),
`libraries` (library evidence per service), `deployments` (deployments and the components
of the deployed SBOMs) and `findings` (open findings with their advisory and EPSS facts).
This module puts them together (`ranking_inputs_gather`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from trustrank.findings.services.due_dates import PolicyDays, triage_policy_for
from trustrank.ranking.inputs.deployments import (
    DEPLOYMENT_SOURCE_WORDS,
    DeploymentsRead,
    SbomComponents,
    components_read,
    deployments_read,
)
from trustrank.ranking.inputs.findings import CHUNK, findings_read
from trustrank.ranking.inputs.graph import RECENT_MINUTES, GraphRead, Rates, graph_read
from trustrank.ranking.inputs.ids import FindingIds
from trustrank.ranking.inputs.libraries import (
    LibrariesRead,
    libraries_read,
    sbom_packages_by_service,
)
from trustrank.ranking.inputs.settled import SettledDecisions
from trustrank.risk import inputs as ri
from trustrank.runtime.revisions import team_revision

__all__ = [
    "CHUNK",
    "DEPLOYMENT_SOURCE_WORDS",
    "RECENT_MINUTES",
    "Gathered",
    "GraphRead",
    "changed_between",
    "rank_settings",
    "ranking_inputs_gather",
    "sbom_packages_by_service",
]


@dataclass(frozen=True)
class Gathered:
    inputs: ri.RankInputs
    # finding id (text) -> database id (`ids.FindingIds`), and the settings the inputs
    # were made for.
    finding_ids: Mapping[str, int]
    window_minutes: float
    # A full gather's open findings whose due date is settled for a decision (finding
    # database id -> that decision) under `policy`, the team's policy when it read them:
    # a ranking run recomputes due dates only where the new decision differs.
    settled: SettledDecisions | None = None
    policy: PolicyDays | None = None
    # With `settled`: the open findings that have a due-date row not settled for any
    # decision (few). A finding in neither has no row: its due date can be inserted.
    unsettled_rows: frozenset[int] | None = None
    # An incremental gather's findings that are new, read again or closed since the
    # previous gather (every other record is the previous one, the same object).
    touched: frozenset[str] | None = None
    # The current records of those still open (read again or new).
    delta: tuple[ri.Finding, ...] | None = None
    graph: GraphRead | None = None
    # The components of each deployed SBOM (`deployments.SbomComponents`): the next gather
    # reads only the SBOMs not in here, and `changed_between` compares versions by them.
    sboms: SbomComponents | None = None
    # The library evidence as read (`libraries.LibrariesRead`): a next gather that reads the
    # same keeps these records, and `changed_between` then compares none of them.
    libraries: LibrariesRead | None = None
    # The deployments as read (`deployments.DeploymentsRead`): a next gather that reads the
    # same rows keeps these records, and `changed_between` then compares none of them.
    deployed: DeploymentsRead | None = None


def rank_settings() -> ri.RankSettings:
    """The engine's settings from Django settings (weights are documented in
    docs/ranking.md and versioned with every run)."""
    w = settings.TRUSTRANK_RANKING_WEIGHTS
    base = ri.ScoreWeights()
    weights = ri.ScoreWeights(**{k: float(w.get(k, getattr(base, k))) for k in base.__slots__})
    return ri.RankSettings(
        version=settings.TRUSTRANK_RANKING_WEIGHTS_VERSION,
        epss_poc_threshold=settings.TRUSTRANK_RANKING_EPSS_POC_THRESHOLD,
        weights=weights,
        library_map=tuple(
            (table, name, key) for table, name, key in settings.TRUSTRANK_LIBRARY_MAP
        ),
        window_minutes=float(settings.TRUSTRANK_RANKING_WINDOW_MINUTES),
    )


def _window() -> tuple[datetime, float]:
    minutes = settings.TRUSTRANK_RANKING_WINDOW_MINUTES
    return timezone.now() - timedelta(minutes=minutes), float(minutes)


def ranking_inputs_gather(
    *, team_id: int, previous: Gathered | None = None, changed_since: datetime | None = None,
) -> Gathered:
    """The team's inputs. With `previous` and `changed_since`, findings are the previous
    ones updated by what was written since; the services, the declared ones and the
    deployments are read anew only when the team's revision of them moved
    (`runtime.revisions`), the rest of the graph evidence always, and when its rows equal
    the previous gather's, the previous graph records are reused (`GraphRead`)."""
    since, minutes = _window()
    rates = Rates.for_window(since, minutes)
    rs = rank_settings()
    revision = team_revision(team_id=team_id)
    graph = graph_read(team_id, since, minutes, rates,
                   previous.graph if previous is not None else None, revision)
    deployed = deployments_read(team_id, previous.deployed if previous is not None else None,
                                revision)
    deployments = deployed.records
    versions, components, sboms = components_read(
        deployed.version_ids, previous.sboms if previous is not None else None,
        previous.inputs.project_versions if previous is not None
        and previous.deployed is not None
        and previous.deployed.version_ids == deployed.version_ids else None)
    libraries = libraries_read(team_id, since, minutes, graph.names, rs, rates,
                           sbom_packages_by_service(deployments, components),
                           previous.libraries if previous is not None else None)
    if previous is not None and changed_since is not None:
        delta, delta_ids, closed = findings_read(
            team_id, changed_since=changed_since,
        )
        # The previous records less those read again or closed, then the ones read: one
        # set lookup per finding rather than a dictionary of a million.
        touched = {f.id for f in delta} | closed
        findings: Sequence[ri.Finding]
        ids: Mapping[str, int]
        if touched:
            findings = [f for f in previous.inputs.findings if f.id not in touched]
            findings.extend(delta)
            ids = FindingIds.of(previous.finding_ids).updated(
                closed=closed, read=delta_ids.pks, read_groups=delta_ids.groups)
        else:
            # No finding written since: the previous records and ids as they are (neither
            # is changed after a gather), not a copy of a million of each.
            findings, ids = previous.inputs.findings, previous.finding_ids
        settled: SettledDecisions | None = None
        policy: PolicyDays | None = None
        unsettled_rows: set[int] | None = None
    else:
        touched = None
        delta = None
        policy = triage_policy_for(team_id=team_id)
        settled, unsettled_rows = SettledDecisions(), set()
        findings, ids, _closed = findings_read(team_id, settled=settled, policy=policy,
                                           unsettled_rows=unsettled_rows)
    inputs = ri.RankInputs(
        services=graph.services, edges=graph.edges, peers=graph.peers,
        origins=graph.origins, deployments=deployments,
        project_versions=versions, components=tuple(components),
        libraries=libraries.records, findings=tuple(findings),
    )
    return Gathered(inputs=inputs, finding_ids=ids, window_minutes=minutes, settled=settled,
                    policy=policy,
                    unsettled_rows=None if unsettled_rows is None
                    else frozenset(unsettled_rows),
                    touched=None if touched is None else frozenset(touched),
                    delta=None if delta is None else tuple(delta), graph=graph, sboms=sboms,
                    libraries=libraries, deployed=deployed)


def _components_by_version(g: Gathered) -> dict[str, Any]:
    """Version key -> its components: the SBOM's very tuple (as the next gather keeps it),
    or, for a gather made without them, the set of its records."""
    if g.sboms is not None:
        return {str(pv): held for (_sbom, pv), held in g.sboms.items()}
    out: dict[str, set[ri.Component]] = {}
    for c in g.inputs.components:
        out.setdefault(c.project_version, set()).add(c)
    return out


def _components_changed(old: Gathered, new: Gathered) -> set[str]:
    """The versions whose components differ as sets between two gathers. When both kept
    their SBOMs' components, only the SBOMs whose held tuple is not the previous one are
    compared (20,000 versions keyed and looked up again each run were 0.02 s)."""
    if old.sboms is not None and new.sboms is not None:
        a, b = old.sboms, new.sboms
        keys = {k for k, held in b.items() if a.get(k) is not held} | (a.keys() - b.keys())
        if not keys:
            return set()
        pvs = {pv for _sbom, pv in keys}
        x = {pv: held for (_sbom, pv), held in a.items() if pv in pvs}
        y = {pv: held for (_sbom, pv), held in b.items() if pv in pvs}
        return {str(pv) for pv in pvs if set(x.get(pv, ())) != set(y.get(pv, ()))}
    ca, cb = _components_by_version(old), _components_by_version(new)
    return {k for k in ca.keys() | cb.keys()
            if ca.get(k, ()) is not cb.get(k, ()) and set(ca.get(k, ())) != set(cb.get(k, ()))}


def changed_between(old: Gathered, new: Gathered) -> tuple[set[str], set[tuple[str, str]]]:
    """Project versions whose components, deployments or record changed, and services whose
    library evidence or deployment changed, between two gathers. Found from the records
    that differ (a set difference each way: 0.05 s at 20,000 deployments, where grouping
    every record by version and service was 0.3-0.45 s of each run); a version whose SBOM
    is the one the previous gather read holds the very same components, and is not
    compared record by record.

    A service is named when a deployment of it came or went with another environment,
    version or impact than the deployments that stayed; were two deployments of one name
    in one environment (two namespaces) to agree on all of these, a change of one also
    names the service, which only rescores findings whose scores stand."""
    versions: set[str] = set()
    services: set[tuple[str, str]] = set()
    if old.inputs.deployments is not new.inputs.deployments:
        # (environment, service, version, impact) of the deployments that went and came:
        # from the rows read when both gathers kept them (tuples, hashed in C; the records'
        # dataclass hash was 0.03 s of 40,000), else from the records.
        keys: list[set[tuple[str, str, str, str]]]
        if old.deployed is not None and new.deployed is not None:
            a: set[tuple[Any, ...]]
            b: set[tuple[Any, ...]]
            if new.deployed.base is old.deployed.rows:
                # Read again in place: only the rows at the places that differ (a row that
                # also stands at another place, two deployments alike, is then named too:
                # more rescored, none missed).
                a = {old.deployed.rows[k] for k in new.deployed.differ}
                b = {new.deployed.rows[k] for k in new.deployed.differ}
            else:
                a, b = set(old.deployed.rows), set(new.deployed.rows)
            keys = [{(r[0], r[1], str(r[2]), r[3]) for r in rows} for rows in (a - b, b - a)]
        else:
            x, y = set(old.inputs.deployments), set(new.inputs.deployments)
            keys = [{(d.environment, d.service, d.project_version, d.human_impact)
                     for d in records} for records in (x - y, y - x)]
        gone, came = keys
        versions.update(k[2] for k in gone | came)
        services.update((k[0], k[1]) for k in gone ^ came)
    if old.inputs.project_versions is not new.inputs.project_versions:
        versions.update(p.key for p in set(old.inputs.project_versions).symmetric_difference(
            new.inputs.project_versions))
    versions |= _components_changed(old, new)
    if old.inputs.libraries is not new.inputs.libraries:
        libs_a = {(x.environment, x.service): x for x in old.inputs.libraries}
        libs_b = {(x.environment, x.service): x for x in new.inputs.libraries}
        services |= {k for k in libs_a.keys() | libs_b.keys() if libs_a.get(k) != libs_b.get(k)}
    return versions, services
