"""Whether a team's services, deployments and project versions changed since a ranking run
read them, without reading them again.

Every row carries a revision (`ranked_revision`, migration runtime.0010), drawn from one
sequence when the row is inserted and again, by a trigger, whenever a column changes that
a ranking run reads in the statements this spares it (the services, the declared ones, the
deployments from telemetry; not a deployment's version or impact, read every run).

A team's `TeamRevision` is, per table, the number of its rows, the sum of their revisions
and the sum of a hash of each. A change of a row raises its revision, so raises the sum; a
row inserted or deleted alone changes the count; rows inserted and deleted together change
the sums unless their revisions sum equal twice over, plain and hashed (the hashed sums
agree by chance one time in 2^64). Environments are few and read whole: a renamed one
changes the names every service is read under. Project versions are never renamed, nor
their projects: their ids are counted and summed alike, so a version added or deleted
(which the deployments from telemetry match by name) is seen.

Read committed: a change committed after this statement is seen by the next one, so a run
that reads its rows after this revision reads at least what the revision stands for."""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db import connection

_REVISION_SQL = """
WITH envs AS (SELECT id, name FROM runtime_environment WHERE team_id = %(team)s)
SELECT (SELECT array_agg(id::text || ':' || name ORDER BY id) FROM envs),
       s.n, s.total, s.hashed, d.n, d.total, d.hashed, v.n, v.total, v.hashed
  FROM (SELECT count(*) AS n, sum(ranked_revision) AS total,
               sum(hashint8extended(ranked_revision, 0)) AS hashed
          FROM runtime_service WHERE environment_id IN (SELECT id FROM envs)) s,
       (SELECT count(*) AS n, sum(ranked_revision) AS total,
               sum(hashint8extended(ranked_revision, 0)) AS hashed
          FROM runtime_deployment WHERE environment_id IN (SELECT id FROM envs)) d,
       (SELECT count(*) AS n, sum(v.id) AS total, sum(hashint8extended(v.id, 0)) AS hashed
          FROM inventory_projectversion v JOIN inventory_project p ON p.id = v.project_id
         WHERE p.team_id = %(team)s) v
"""

class TeamRevision(NamedTuple):
    """Per table, (rows, sum of revisions, sum of their hashes); project versions by id."""

    environments: tuple[str, ...]
    services: tuple[Any, ...]
    deployments: tuple[Any, ...]
    versions: tuple[Any, ...]

    @property
    def graph(self) -> tuple[Any, ...]:
        """What the services statement reads (services, their environments and the ingress
        marks of deployments); not the project versions."""
        return self.environments, self.services, self.deployments


def team_revision(*, team_id: int) -> TeamRevision:
    """The team's services, deployments and project versions as of now: equal to an earlier
    value only if none of their rows was inserted or deleted since, nor changed in a
    column the revision watches."""
    with connection.cursor() as cur:
        cur.execute(_REVISION_SQL, {"team": team_id})
        envs, *sums = cur.fetchone() or (None,) * 10
    return TeamRevision(tuple(envs or ()), tuple(sums[0:3]), tuple(sums[3:6]),
                        tuple(sums[6:9]))
