"""Bulk triage: one change (state, justification, response, detail, assignee, due date) to
many findings, chosen by id or by a filter of the findings list.

A small selection is applied within the request; a large one becomes a BulkTriageJob that the
`findings_bulk_triage` task works through in batches. Each batch locks its rows (in id order),
skips a finding whose version moved past the one the caller gave, changes the rest with one
set-based UPDATE and writes one audit event per changed finding; the job ends with a summary
event per team.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.choices import ActorKind, TriageState
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.models import Finding
from trustrank.findings.records import BulkTriageJob
from trustrank.findings.services.audit import Actor, audit_events_record_bulk
from trustrank.findings.services.bulk_selection import bulk_selection, filter_querydict
from trustrank.findings.services.reconcile import state_of
from trustrank.findings.services.triage import (
    TriageError,
    TriageForbidden,
    _validate_parts,
    assignee_resolve,
    due_dates_save,
    triage_apply,
    triage_validate,
)
from trustrank.jobs.admission import job_admit
from trustrank.jobs.models import JobStatus
from trustrank.jobs.runner import job_run
from trustrank.jobs.send import job_enqueue_on_commit

BATCH_SIZE = 500
CHANGE_FIELDS = ("state", "justification", "response", "detail", "assignee", "due_date")


@dataclass
class BulkResult:
    """What a bulk triage did (or, for a job, has done so far)."""

    matched: int = 0
    changed: int = 0
    unchanged: int = 0
    conflicts: list[int] = field(default_factory=list)
    team_ids: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "changed": self.changed,
            "updated": self.changed,
            "unchanged": self.unchanged,
            "conflicts": len(self.conflicts),
            "conflict_ids": self.conflicts[:1000],
        }


def bulk_sync_max() -> int:
    return int(settings.TRUSTRANK_BULK_TRIAGE_SYNC_MAX)


def bulk_changes_validate(*, changes: dict[str, Any], reason: str) -> dict[str, Any]:
    """The change as JSON (only the keys given), checked like a single triage change."""
    given = {k: v for k, v in changes.items() if k in CHANGE_FIELDS}
    if not given:
        raise TriageError(
            "nothing to change: give state, justification, response, detail, assignee or "
            "due_date", field="state",
        )
    state = given.get("state")
    justification = given.get("justification")
    response = given.get("response")
    if state is not None:
        triage_validate(state=state, justification=justification or "",
                        response=response or (), reason=reason)
    else:
        _validate_parts(justification=justification or "", response=response or (),
                        reason=reason)
    if "response" in given:
        given["response"] = list(dict.fromkeys(response or []))
    if "due_date" in given and isinstance(given["due_date"], date):
        given["due_date"] = given["due_date"].isoformat()
    return given


def _apply_kwargs(changes: dict[str, Any], *, assignee: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    state = changes.get("state")
    if state is not None:
        kwargs["state"] = state
        # A new state is a new analysis: a justification only stays with not_affected.
        kwargs["justification"] = changes.get("justification") or (
            "" if state != TriageState.NOT_AFFECTED else None
        )
    elif "justification" in changes:
        kwargs["justification"] = changes["justification"] or ""
    if "response" in changes:
        kwargs["response"] = list(changes["response"] or [])
    if "detail" in changes:
        kwargs["detail"] = changes["detail"] or ""
    if "assignee" in changes:
        kwargs["assignee"] = assignee
    if "due_date" in changes:
        raw = changes["due_date"]
        kwargs["due_date"] = date.fromisoformat(raw) if raw else None
    return kwargs


_SNAPSHOT = ["state", "justification", "response", "detail", "assignee_id", "version",
             "resolved_at", "auto_resolved"]


def _differs(f: Finding, kwargs: dict[str, Any]) -> bool:
    for name, value in kwargs.items():
        if name == "assignee":
            if f.assignee_id != (value.pk if value is not None else None):
                return True
        elif name == "due_date":
            if f.due_date != value or not f.due_date_manual:
                return True
        elif value is not None and getattr(f, name) != value:
            return True
    return False


def bulk_triage_batch(
    *,
    ids: list[int],
    team_ids: Iterable[int],
    versions: dict[str, int],
    changes: dict[str, Any],
    assignee: Any,
    actor: Actor,
    reason: str,
    ref: str,
    result: BulkResult,
) -> None:
    """Apply the change to one batch of findings in the caller's transaction."""
    kwargs = _apply_kwargs(changes, assignee=assignee)
    now = timezone.now()
    # Row locks in id order: a finding changed by someone between the selection and now is
    # seen as it is, and two bulk changes (or a reconcile) never deadlock.
    rows = list(
        Finding.objects.select_for_update(of=("self",))
        .filter(pk__in=ids, team_id__in=list(team_ids))
        .select_related("due")
        .order_by("pk")
        .only("pk", "team_id", "environment", *_SNAPSHOT, "due")
    )
    to_change: list[Finding] = []
    events = []
    for f in rows:
        result.matched += 1
        expected = versions.get(str(f.pk))
        if expected is not None and f.version != int(expected):
            result.conflicts.append(f.pk)
            continue
        if not _differs(f, kwargs):
            result.unchanged += 1
            continue
        before = state_of(f)
        triage_apply(f, now=now, **kwargs)
        to_change.append(f)
        result.team_ids.add(f.team_id)
        events.append(
            actor.event(
                action="bulk_triaged",
                team_id=f.team_id,
                finding_id=f.pk,
                subject_type="bulk_triage",
                subject_id=ref,
                environment=f.environment,
                before=before,
                after=state_of(f),
                reason=reason,
                at=now,
            )
        )
    if not to_change:
        return
    values: dict[str, Any] = {"version": F("version") + 1, "updated_at": now}
    if "state" in kwargs:
        values.update(state=kwargs["state"], auto_resolved=False,
                      resolved_at=to_change[0].resolved_at)
    for name in ("justification", "response", "detail"):
        if kwargs.get(name) is not None:
            values[name] = kwargs[name]
    if "assignee" in kwargs:
        values["assignee"] = kwargs["assignee"]
    # One UPDATE for the batch: every changed row gets the same values.
    Finding.objects.filter(pk__in=[f.pk for f in to_change]).update(**values)
    if "due_date" in kwargs:
        due_dates_save(to_change)
    audit_events_record_bulk(events)
    result.changed += len(to_change)


def _summary_events(
    *, actor: Actor, ref: str, team_ids: Iterable[int], changes: dict[str, Any],
    selection: dict[str, Any], counts: dict[str, Any], reason: str,
) -> None:
    now = timezone.now()
    audit_events_record_bulk(
        actor.event(
            action="bulk_triage",
            team_id=team_id,
            subject_type="bulk_triage",
            subject_id=ref,
            after={"changes": changes, "selection": selection, "counts": counts},
            reason=reason,
            at=now,
        )
        for team_id in sorted(set(team_ids))
    )


@dataclass
class BulkSubmitted:
    """What bulk_triage_submit did: applied now (`result`) or queued as `job`."""

    result: BulkResult | None = None
    job: BulkTriageJob | None = None
    ref: str = ""


def bulk_triage_submit(
    *,
    principal: Principal,
    changes: dict[str, Any],
    reason: str,
    ids: list[int] | None = None,
    versions: dict[str, int] | None = None,
    filter_params: dict[str, Any] | None = None,
    user_id: int | None = None,
) -> BulkSubmitted:
    """Check the change and the selection, then apply it now or queue a job."""
    if ids is None and filter_params is None:
        raise TriageError("give `ids` or a `filter`", field="ids")
    if not principal.can(Scope.TRIAGE):
        raise TriageForbidden("changing triage state needs the 'triage' scope")
    reason = reason.strip()
    given = bulk_changes_validate(changes=changes, reason=reason)
    qs, wanted, cleaned, teams = bulk_selection(
        principal=principal, ids=ids, filter_params=filter_params, user_id=user_id
    )
    assignee = None
    if "assignee" in given:
        # Every team the change touches must count the assignee as a member.
        touched = teams if wanted is not None else sorted(
            set(qs.order_by().values_list("team_id", flat=True).distinct())
        )
        assignee = assignee_resolve(value=given["assignee"], team_ids=touched)
        given["assignee"] = assignee.pk if assignee is not None else None
    limit = bulk_sync_max()
    actor = Actor.of(principal)
    versions = {str(k): int(v) for k, v in (versions or {}).items()}
    if wanted is not None:
        total = len(wanted)
        selected = wanted
    else:
        selected = list(qs.order_by("pk").values_list("pk", flat=True)[: limit + 1])
        total = len(selected) if len(selected) <= limit else qs.order_by().count()
    selection = {"ids": total} if wanted is not None else {"filter": cleaned, "matched": total}
    if total <= limit:
        ref = f"sync-{uuid.uuid4().hex[:12]}"
        result = BulkResult()
        with transaction.atomic():
            for i in range(0, len(selected), BATCH_SIZE):
                bulk_triage_batch(
                    ids=selected[i : i + BATCH_SIZE], team_ids=teams, versions=versions,
                    changes=given, assignee=assignee, actor=actor, reason=reason, ref=ref,
                    result=result,
                )
            _summary_events(
                actor=actor, ref=ref, team_ids=result.team_ids or teams[:1], changes=given,
                selection=selection, counts=result.as_dict(), reason=reason,
            )
        return BulkSubmitted(result=result, ref=ref)
    job_admit(kind="bulk_triage", team_id=teams[0])
    with transaction.atomic():
        job = BulkTriageJob(
            team_id=teams[0],
            team_ids=teams,
            ids=wanted,
            versions=versions,
            filter=cleaned,
            changes=given,
            reason=reason,
            progress_total=total,
            enqueued_at=timezone.now(),
        )
        job.requested_by_set(principal)
        job.save(force_insert=True)
        job_enqueue_on_commit(job)
    return BulkSubmitted(job=job, ref=f"job-{job.pk}")


def _job_actor(job: BulkTriageJob) -> Actor:
    if job.requested_by_key_id is not None:
        return Actor(label=job.requested_by_label, kind=ActorKind.API_KEY,
                     api_key_id=job.requested_by_key_id)
    if job.requested_by_user_id is not None:
        return Actor(label=job.requested_by_label, kind=ActorKind.USER,
                     user=job.requested_by_user)
    return Actor.system(job.requested_by_label or "bulk triage")


def _job_next_ids(job: BulkTriageJob) -> list[int]:
    if job.ids is not None:
        # Stored sorted (bulk_triage_submit): the next batch starts right after the cursor.
        start = bisect.bisect_right(job.ids, job.cursor)
        return [int(i) for i in job.ids[start : start + BATCH_SIZE]]
    filterset = FindingFilterSet(
        filter_querydict(job.filter), queryset=Finding.objects.filter(team_id__in=job.team_ids)
    )
    return list(
        filterset.qs.filter(pk__gt=job.cursor).order_by("pk").values_list("pk", flat=True)[
            :BATCH_SIZE
        ]
    )


def bulk_triage_job_handle(*, job: BulkTriageJob, progress: Any) -> None:
    """The job runner's handler for the kind "bulk_triage": one transaction per batch. Each
    batch locks the job row and continues from its cursor, so a new attempt after a dead
    worker continues where the other stopped and never applies a batch twice. The last
    transaction writes the summary events and marks the job done together."""
    job_id, attempt = job.pk, job.attempts
    while True:
        with transaction.atomic():
            job = BulkTriageJob.objects.select_for_update().get(pk=job_id)
            if job.status != JobStatus.RUNNING or job.attempts != attempt:
                return  # taken over by a newer attempt
            batch = _job_next_ids(job)
            counts = dict(job.counts or {})
            if not batch:
                _job_finish(job, counts)
                return
            assignee = None
            if "assignee" in job.changes and job.changes["assignee"] is not None:
                from django.contrib.auth import get_user_model

                assignee = get_user_model().objects.get(pk=job.changes["assignee"])
            result = BulkResult()
            bulk_triage_batch(
                ids=batch, team_ids=job.team_ids, versions=job.versions or {},
                changes=job.changes, assignee=assignee, actor=_job_actor(job),
                reason=job.reason, ref=f"job-{job.pk}", result=result,
            )
            for key in ("matched", "changed", "unchanged"):
                counts[key] = int(counts.get(key, 0)) + getattr(result, key)
            counts["conflicts"] = int(counts.get("conflicts", 0)) + len(result.conflicts)
            counts["conflict_ids"] = (
                list(counts.get("conflict_ids", [])) + result.conflicts
            )[:1000]
            counts["team_ids"] = sorted(set(counts.get("team_ids", [])) | result.team_ids)
            done = job.progress_done + len(batch)
            total = max(job.progress_total or 0, done)
            BulkTriageJob.objects.filter(pk=job.pk).update(
                cursor=batch[-1], progress_done=done, progress_total=total, counts=counts,
            )
        # The batch's own transaction wrote done/total with the cursor. Handing them to the
        # heartbeat too would make a second writer: its UPDATE, blocked on this row's lock,
        # lands after a later batch's commit and puts an older count back.
        progress(phase="applying")


def bulk_triage_job_run(*, job_id: int) -> str:
    """Run one bulk triage job now, in this process (tests)."""
    return job_run(kind_name="bulk_triage", job_id=str(job_id))


def _job_finish(job: BulkTriageJob, counts: dict[str, Any]) -> None:
    team_ids = counts.get("team_ids") or job.team_ids[:1]
    selection = (
        {"ids": len(job.ids)} if job.ids is not None
        else {"filter": job.filter, "matched": job.progress_total}
    )
    public = {k: v for k, v in counts.items() if k != "team_ids"}
    _summary_events(
        actor=_job_actor(job), ref=f"job-{job.pk}", team_ids=team_ids, changes=job.changes,
        selection=selection, counts=public, reason=job.reason,
    )
    BulkTriageJob.objects.filter(pk=job.pk).update(
        status=JobStatus.DONE, finished_at=timezone.now(), phase="done", lease_until=None,
        backend_pid=None, progress_total=job.progress_done, counts=counts,
    )
