"""Replay runs (page, API, task): the team and cluster a run belongs to, the row, and the
worker's claim, execution and finish. The computing lives in `replay`."""

from __future__ import annotations

import enum
import logging
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.cluster.models import Cluster, ReplayRun, ReplayStatus
from trustrank.cluster.services.replay import (
    DEFAULT_TRACE_LABEL,
    PROGRESS_INTERVAL_S,
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
    user = principal.user if principal.user is not None and principal.api_key is None else None
    with transaction.atomic():
        run = ReplayRun.objects.create(
            team=team,
            mode=params.mode,
            parameters=params.to_json(),
            trace_label=label[:255],
            cluster=cluster,
            pods_csv=pods_csv,
            nodes_csv=nodes_csv,
            created_by=user,
            submitter_label=principal.label[:160],
        )
        run_id = run.pk
        transaction.on_commit(lambda: _enqueue(run_id))
    return run


def _enqueue(run_id: int) -> None:
    from trustrank.cluster.tasks import replay_run

    replay_run.delay(run_id)


def _lease() -> datetime:
    return timezone.now() + timedelta(seconds=settings.TRUSTRANK_JOB_LEASE_SECONDS)


def replay_run_claim(*, run_id: int) -> bool:
    """Take a queued run, or a running one whose worker stopped renewing its lease. The
    conditional UPDATE is the lock: two deliveries of one message cannot both win."""
    now = timezone.now()
    claimed = ReplayRun.objects.filter(
        Q(status=ReplayStatus.QUEUED) | Q(status=ReplayStatus.RUNNING, lease_until__lt=now),
        pk=run_id,
    ).update(
        status=ReplayStatus.RUNNING,
        started_at=now,
        lease_until=_lease(),
        phase="loading trace",
        progress_done=0,
        error="",
    )
    return bool(claimed)


class Outcome(enum.StrEnum):
    DONE = "done"
    FAILED = "failed"
    FINISHED_BEFORE = "finished before"  # nothing to do
    BUSY = "busy"  # another worker holds a live lease


def replay_run_execute(*, run_id: int) -> Outcome:
    if not replay_run_claim(run_id=run_id):
        status = ReplayRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
        if status in (ReplayStatus.DONE, ReplayStatus.FAILED, None):
            logger.info("replay run %s: already finished (or gone)", run_id)
            return Outcome.FINISHED_BEFORE
        return Outcome.BUSY
    run = ReplayRun.objects.get(pk=run_id)
    last_write = 0.0

    def progress(phase: str, done: int, total: int) -> None:
        nonlocal last_write
        now = time.monotonic()
        if now - last_write < PROGRESS_INTERVAL_S and done < total:
            return
        last_write = now
        ReplayRun.objects.filter(pk=run_id, status=ReplayStatus.RUNNING).update(
            phase=phase[:60], progress_done=done, progress_total=total, lease_until=_lease()
        )

    try:
        params = replay_params_validate(**run.parameters)
        if run.cluster_id is not None:
            result = _cluster_replay(run=run, params=params, progress=progress)
        elif run.pods_csv is None and run.trace_label.endswith(CLUSTER_LABEL_TAIL):
            raise ReplayError("the cluster this run replays has been deleted")
        else:
            if run.pods_csv is not None and run.nodes_csv is not None:
                pods_csv, nodes_csv = bytes(run.pods_csv), bytes(run.nodes_csv)
            else:
                pods_csv, nodes_csv = default_trace()
            workload, spec = trace_load(pods_csv=pods_csv, nodes_csv=nodes_csv)
            source = {"source": "csv" if run.pods_csv is not None else "openb"}
            result = replay_compute(
                params=params, workload=workload, spec=spec, progress=progress, source=source
            )
    except (ReplayError, TypeError) as exc:
        _finish(run_id, status=ReplayStatus.FAILED, error=str(exc))
        return Outcome.FAILED
    except Exception as exc:
        # Not transient: the same input would fail the same way, so mark it and stop.
        logger.exception("replay run %s failed", run_id)
        _finish(run_id, status=ReplayStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        return Outcome.FAILED
    _finish(run_id, status=ReplayStatus.DONE, result=result)
    return Outcome.DONE


def _cluster_replay(
    *, run: ReplayRun, params: ReplayParams, progress: ProgressFn | None
) -> dict[str, Any]:
    cluster = run.cluster
    if cluster is None:
        raise ReplayError("the cluster this run replays has been deleted")
    return replay_cluster_compute(cluster=cluster, params=params, progress=progress)


def _finish(
    run_id: int, *, status: str, result: dict[str, Any] | None = None, error: str = ""
) -> None:
    fields: dict[str, Any] = {
        "status": status,
        "finished_at": timezone.now(),
        "error": error,
        "phase": "done" if status == ReplayStatus.DONE else "failed",
        "lease_until": None,
    }
    if result is not None:
        fields["result"] = result
    ReplayRun.objects.filter(pk=run_id, status=ReplayStatus.RUNNING).update(**fields)
