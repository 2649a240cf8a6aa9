"""Replay runs (page, API, task): the team and cluster a run belongs to, the row, and the
worker's claim, execution and finish. The computing lives in `replay`."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.cluster.models import Cluster, ReplayRun
from trustrank.cluster.services.replay import (
    DEFAULT_TRACE_LABEL,
    ProgressFn,
    ReplayError,
    ReplayParams,
    default_trace,
    replay_cluster_compute,
    replay_compute,
    replay_params_validate,
    trace_load,
)
from trustrank.cluster.services.replay_cluster import cluster_trace_load
from trustrank.jobs.admission import job_admit
from trustrank.jobs.errors import JobRejected
from trustrank.jobs.runner import job_run
from trustrank.jobs.send import job_enqueue_on_commit
from trustrank.risk.scheduling.snapshot import SnapshotError

logger = logging.getLogger(__name__)

# Which scope starts a run: a replay costs minutes of worker time, so it is an admin's call.
CREATE_SCOPE = Scope.ADMIN


def team_for_replay(*, principal: Principal, team_hint: str = "") -> Team:
    """The team a new run belongs to: the hinted one, or the only one the principal may
    start runs for."""
    allowed = principal.teams_with(CREATE_SCOPE)
    if not allowed:
        raise PermissionDenied("Starting a replay needs the 'admin' scope in a team.")
    teams = Team.objects.filter(pk__in=allowed)
    if team_hint:
        team = teams.filter(name=team_hint).first()
        if team is None:
            raise ReplayError(f"you cannot start replays for team {team_hint!r}")
        return team
    if len(allowed) > 1:
        raise ReplayError("you are in several teams; say which one")
    return teams.get()


def cluster_for_replay(*, principal: Principal, name: str, team_hint: str = "") -> Cluster:
    """The cluster a run replays: one of a team the principal may start runs for. Without a
    team hint, the name must be unambiguous among those teams. Never says whether another
    team has a cluster of that name."""
    allowed = principal.teams_with(CREATE_SCOPE)
    if not allowed:
        raise PermissionDenied("Starting a replay needs the 'admin' scope in a team.")
    clusters = Cluster.objects.filter(team_id__in=allowed, name=name).select_related("team")
    if team_hint:
        clusters = clusters.filter(team__name=team_hint)
    found = list(clusters[:2])
    where = f"team {team_hint!r}" if team_hint else "your teams"
    if not found and Cluster.objects.filter(team_id__in=principal.team_ids, name=name).exists():
        # Visible to the principal, but only in teams where it may not start runs.
        raise PermissionDenied(
            f"Replaying cluster {name!r} needs the 'admin' scope in its team."
        )
    if not found:
        raise ReplayError(
            f"cluster: no cluster named {name!r} in {where}; its objects arrive at "
            f"POST /api/v1/clusters/<cluster>/objects",
            field="cluster",
        )
    if len(found) > 1:
        raise ReplayError(
            f"cluster: several of your teams have a cluster {name!r}; say which team",
            field="team",
        )
    return found[0]


def cluster_input_check(*, cluster: Cluster) -> dict[str, int]:
    """Convert the stored cluster now, so a cluster with nothing to replay is refused when
    the run is asked for; the counts found."""
    try:
        return cluster_trace_load(cluster=cluster).describe()
    except SnapshotError as exc:
        raise ReplayError(f"cluster {cluster.name!r}: {exc}", field="cluster") from exc


CLUSTER_LABEL_TAIL = "'s stored pods and nodes"


def cluster_label(cluster: Cluster) -> str:
    return f"cluster {cluster.name}{CLUSTER_LABEL_TAIL}"


def replay_run_create(
    *,
    principal: Principal,
    params: ReplayParams,
    team_hint: str = "",
    pods_csv: bytes | None = None,
    nodes_csv: bytes | None = None,
    trace_label: str = "",
    cluster_name: str = "",
) -> ReplayRun:
    """Validate the input now (so a bad file or an empty cluster is refused, not failed
    later), store the row, and enqueue the task once the row is committed."""
    cluster = None
    if cluster_name:
        if pods_csv is not None or nodes_csv is not None:
            raise ReplayError(
                "cluster: replay a stored cluster or uploaded CSVs, not both", field="cluster"
            )
        if params.hints:
            raise ReplayError(
                "hints: a cluster's semantic priorities are its recommendations; leave hints out",
                field="hints",
            )
        cluster = cluster_for_replay(principal=principal, name=cluster_name, team_hint=team_hint)
        team = cluster.team
        cluster_input_check(cluster=cluster)
        label = cluster_label(cluster)
    else:
        team = team_for_replay(principal=principal, team_hint=team_hint)
        if (pods_csv is None) != (nodes_csv is None):
            raise ReplayError("upload both a pods CSV and a nodes CSV, or neither")
        if pods_csv is not None and nodes_csv is not None:
            trace_load(pods_csv=pods_csv, nodes_csv=nodes_csv)
            label = trace_label or "uploaded CSVs"
        else:
            label = DEFAULT_TRACE_LABEL
    # A team's burst of replays waits in its own bounded queue (429 past the limit).
    job_admit(kind="replay_run", team_id=team.pk)
    with transaction.atomic():
        run = ReplayRun(
            team=team,
            mode=params.mode,
            parameters=params.to_json(),
            trace_label=label[:255],
            cluster=cluster,
            pods_csv=pods_csv,
            nodes_csv=nodes_csv,
            enqueued_at=timezone.now(),
        )
        run.requested_by_set(principal)
        run.save(force_insert=True)
        job_enqueue_on_commit(run)
    return run


def replay_run_handle(*, job: ReplayRun, progress: Any) -> dict[str, Any]:
    """The job runner's handler for the kind "replay_run": replay and return the result.
    Nothing is stored before the end, so a new attempt after a dead worker starts clean."""

    def report(phase: str, done: int, total: int) -> None:
        progress(phase=phase, done=done, total=total)

    try:
        params = replay_params_validate(**job.parameters)
        if job.cluster_id is not None:
            result = _cluster_replay(run=job, params=params, progress=report)
        elif job.pods_csv is None and job.trace_label.endswith(CLUSTER_LABEL_TAIL):
            raise ReplayError("the cluster this run replays has been deleted")
        else:
            if job.pods_csv is not None and job.nodes_csv is not None:
                pods_csv, nodes_csv = bytes(job.pods_csv), bytes(job.nodes_csv)
            else:
                pods_csv, nodes_csv = default_trace()
            workload, spec = trace_load(pods_csv=pods_csv, nodes_csv=nodes_csv)
            source = {"source": "csv" if job.pods_csv is not None else "openb"}
            result = replay_compute(
                params=params, workload=workload, spec=spec, progress=report, source=source
            )
    except (ReplayError, TypeError) as exc:
        raise JobRejected(str(exc)) from exc
    return {"result": result}


def replay_run_execute(*, run_id: int) -> str:
    """Run one replay run now, in this process (the command, tests)."""
    return job_run(kind_name="replay_run", job_id=str(run_id))


def _cluster_replay(
    *, run: ReplayRun, params: ReplayParams, progress: ProgressFn | None
) -> dict[str, Any]:
    cluster = run.cluster
    if cluster is None:
        raise ReplayError("the cluster this run replays has been deleted")
    return replay_cluster_compute(cluster=cluster, params=params, progress=progress)
