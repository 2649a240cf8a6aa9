"""The worker side: fan a batch out into deliveries, send them, schedule the retries.

`notify_dispatch_handle` is the handler of the job kind `notify_dispatch` (one NotifyBatch
row). Safe to run again from the start after a worker died anywhere in it:

1. Fan-out (one transaction, with the row's `fanned_out`): the batch's events become
   NotifyEvent rows, and one INSERT … SELECT makes a Delivery per event and listening
   webhook; each webhook's deliveries are a round (a row of the kind) of their own, so
   several workers send them at once and a slow endpoint holds up no other.
2. Send: deliveries of this round that are due are claimed in chunks (`FOR UPDATE SKIP
   LOCKED`, status `sending`, attempts + 1) and sent from a thread pool over pooled
   connections; the outcomes are written back in one statement per chunk. A worker killed
   mid-chunk leaves rows `sending` in a round the sweep queues again: they are sent again
   (at least once; receivers dedupe by X-TrustRank-Delivery).
3. Retries: deliveries still open move, in the same transaction, to a new row of the kind
   (source `retry`) ready at the earliest next attempt.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Min
from django.utils import timezone

from trustrank.accounts.models import Team
from trustrank.jobs.send import job_enqueue_on_commit
from trustrank.lib.outbound import OutboundError, OutboundRefused, outbound_request
from trustrank.notify.formats import request_of
from trustrank.notify.models import (
    OPEN_STATUSES,
    BatchSource,
    Delivery,
    DeliveryStatus,
    NotifyBatch,
    NotifyEvent,
    Webhook,
    WebhookFormat,
)
from trustrank.notify.sources import notify_source

log = logging.getLogger(__name__)

# --- Fan-out ----------------------------------------------------------------------------------


def _events_of(batch: NotifyBatch) -> list[tuple[int, str, dict[str, Any]]]:
    if batch.source in (BatchSource.EVENTS, BatchSource.PING):
        assert batch.team_id is not None
        name = Team.objects.filter(pk=batch.team_id).values_list("name", flat=True).first()
        # Every delivery says whose it is and when it happened, whatever the emitter gave.
        common = {"team": {"id": batch.team_id, "name": name or ""},
                  "occurred_at": batch.created_at.isoformat()}
        return [(batch.team_id, batch.event, {**common, **p}) for p in batch.items]
    listening: set[tuple[int, str]] = set()
    for team_id, events in Webhook.objects.filter(enabled=True).values_list("team_id", "events"):
        listening.update((team_id, e) for e in events)
    # Only the events some webhook listens to are kept (a KEV addition hits many teams).
    return [e for e in notify_source(batch.source)(batch=batch) if (e[0], e[1]) in listening]


_DELIVERIES_INSERT = """
INSERT INTO notify_delivery (uuid, webhook_id, notify_event_id, round_id, event, status,
                             attempts, next_attempt_at, error, created_at)
SELECT gen_random_uuid(), w.id, e.id, r.round_id, e.event, 'pending', 0, %(now)s, '', %(now)s
FROM notify_notifyevent e
JOIN notify_webhook w ON w.team_id = e.team_id AND w.enabled
JOIN unnest(%(hooks)s::bigint[], %(rounds)s::bigint[]) AS r(hook_id, round_id)
  ON r.hook_id = w.id
WHERE e.batch_id = %(batch)s AND {match}
ORDER BY e.id, w.id
"""


def _listeners(batch: NotifyBatch, events: list[tuple[int, str, dict[str, Any]]]) -> list[int]:
    """The webhooks that get deliveries from this batch."""
    if batch.source == BatchSource.PING:
        return [batch.ref_id] if batch.ref_id else []
    wanted = {(team_id, event) for team_id, event, _payload in events}
    hooks = Webhook.objects.filter(enabled=True, team_id__in={t for t, _e in wanted})
    return sorted(pk for pk, team_id, names in hooks.values_list("pk", "team_id", "events")
                  if any((team_id, name) in wanted for name in names))


def _fan_out(batch: NotifyBatch) -> dict[str, int]:
    """Events and deliveries in one transaction. The first webhook's deliveries stay in this
    batch; each other webhook's go to a `deliver` row of their own, sent on commit."""
    events = _events_of(batch)
    now = timezone.now()
    with transaction.atomic():
        NotifyEvent.objects.bulk_create(
            [NotifyEvent(batch_id=batch.pk, team_id=team_id, event=event, payload=payload,
                         occurred_at=now) for team_id, event, payload in events],
            batch_size=2000,
        )
        hooks = _listeners(batch, events)
        rounds = [batch.pk]
        for _hook in hooks[1:]:
            own = NotifyBatch.objects.create(
                team_id=batch.team_id, source=BatchSource.DELIVER, event=batch.event,
                fanned_out=True, enqueued_at=now, ready_at=now,
            )
            job_enqueue_on_commit(own)
            rounds.append(own.pk)
        match = ("w.id = %(hook)s" if batch.source == BatchSource.PING
                 else "w.events @> jsonb_build_array(e.event)")
        with connection.cursor() as cur:
            cur.execute(_DELIVERIES_INSERT.format(match=match), {
                "now": now, "batch": batch.pk, "hook": batch.ref_id,
                "hooks": hooks, "rounds": rounds[: len(hooks)],
            })
            deliveries = cur.rowcount
        counts = {"events": len(events), "deliveries": deliveries, "webhooks": len(hooks)}
        NotifyBatch.objects.filter(pk=batch.pk).update(fanned_out=True, counts=counts)
    return counts


# --- Send -------------------------------------------------------------------------------------

_CLAIM = """
UPDATE notify_delivery d SET status = 'sending', attempts = d.attempts + 1,
       last_attempt_at = clock_timestamp()
FROM (SELECT id FROM notify_delivery
      WHERE round_id = %s AND status IN ('pending', 'sending', 'retrying')
        AND next_attempt_at <= clock_timestamp()
      ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) AS c
WHERE d.id = c.id
RETURNING d.id, d.uuid::text, d.webhook_id, d.notify_event_id, d.event, d.attempts
"""

_RECORD = """
UPDATE notify_delivery d SET status = v.status, response_code = v.code, error = v.error,
       next_attempt_at = v.next_at, delivered_at = v.delivered_at
FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::text[], %s::timestamptz[],
            %s::timestamptz[]) AS v(id, status, code, error, next_at, delivered_at)
WHERE d.id = v.id
"""


@dataclass
class _Item:
    id: int
    uuid: str
    hook: Webhook | None
    event: str
    payload: dict[str, Any]
    attempts: int


@dataclass
class _Outcome:
    id: int
    status: str
    code: int | None
    error: str
    next_at: datetime | None
    delivered_at: datetime | None


def backoff_seconds(attempts: int, retry_after: float | None = None) -> float:
    """Exponential: base · 2^(attempts − 1), capped, with up to 10 % jitter; a receiver's
    Retry-After (429/503) is honoured up to the cap."""
    base = settings.TRUSTRANK_WEBHOOK_RETRY_BASE_SECONDS
    cap = settings.TRUSTRANK_WEBHOOK_RETRY_MAX_SECONDS
    delay = min(cap, base * (2 ** max(0, attempts - 1)))
    if retry_after is not None:
        delay = min(cap, max(delay, retry_after))
    return delay * (1 + random.random() / 10)  # noqa: S311 - jitter, not security


def _retry_after(headers: dict[str, str]) -> float | None:
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _outcome(item: _Item, *, code: int | None, error: str,
             retry_after: float | None = None) -> _Outcome:
    now = timezone.now()
    if code is not None and 200 <= code < 300:
        return _Outcome(item.id, DeliveryStatus.DELIVERED, code, "", None, now)
    retryable = code is None or code >= 500 or code in (408, 429)
    if retryable and item.attempts < settings.TRUSTRANK_WEBHOOK_MAX_ATTEMPTS:
        wait = backoff_seconds(item.attempts, retry_after)
        return _Outcome(item.id, DeliveryStatus.RETRYING, code, error[:2000],
                        now + timedelta(seconds=wait), None)
    if retryable:
        error = f"gave up after {item.attempts} attempts: {error}"
    return _Outcome(item.id, DeliveryStatus.FAILED, code, error[:2000], None, None)


def _deliver(item: _Item) -> _Outcome:
    hook = item.hook
    if hook is None or not hook.enabled:
        return _Outcome(item.id, DeliveryStatus.FAILED, None, "the webhook is disabled",
                        None, None)
    if hook.format == WebhookFormat.JIRA:
        return _deliver_jira(item, hook)
    body, headers = request_of(fmt=hook.format, secret=hook.secret, event=item.event,
                               delivery_id=item.uuid, payload=item.payload)
    try:
        response = outbound_request(
            "POST", hook.url, body=body, headers=headers,
            timeout=settings.TRUSTRANK_WEBHOOK_TIMEOUT_SECONDS,
        )
    except OutboundRefused as exc:
        return _Outcome(item.id, DeliveryStatus.FAILED, None, f"refused: {exc}", None, None)
    except OutboundError as exc:
        return _outcome(item, code=None, error=str(exc))
    except Exception as exc:  # one delivery's surprise must not stop the others
        log.exception("delivery %s crashed", item.uuid)
        return _outcome(item, code=None, error=f"{type(exc).__name__}: {exc}")
    if 300 <= response.status < 400:
        return _outcome(item, code=response.status, error="redirects are not followed")
    detail = "" if 200 <= response.status < 300 else response.body[:500].decode(
        "utf-8", "replace")
    return _outcome(item, code=response.status, error=detail,
                    retry_after=_retry_after(response.headers))


def _deliver_jira(item: _Item, hook: Webhook) -> _Outcome:
    # Another part of TrustRank (trustrank.jira) creates the issues; imported when used.
    try:
        from importlib import import_module

        jira_deliver = import_module("trustrank.jira.services").jira_deliver
        doc = {"event": item.event, "delivery_id": item.uuid, **item.payload}
        code, detail = jira_deliver(webhook=hook, event=item.event, payload=doc)
    except OutboundRefused as exc:
        return _Outcome(item.id, DeliveryStatus.FAILED, None, f"refused: {exc}", None, None)
    except (ImportError, AttributeError):
        return _Outcome(item.id, DeliveryStatus.FAILED, None,
                        "Jira delivery is not available on this site", None, None)
    except Exception as exc:
        return _outcome(item, code=None, error=f"{type(exc).__name__}: {exc}")
    return _outcome(item, code=int(code), error="" if 200 <= int(code) < 300 else str(detail))


def _claim(round_id: int, limit: int) -> list[tuple[Any, ...]]:
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_CLAIM, [round_id, limit])
        return list(cur.fetchall())


def _record(outcomes: list[_Outcome]) -> None:
    with connection.cursor() as cur:
        cur.execute(_RECORD, [
            [o.id for o in outcomes], [o.status for o in outcomes],
            [o.code for o in outcomes], [o.error for o in outcomes],
            [o.next_at for o in outcomes], [o.delivered_at for o in outcomes],
        ])


def _send_round(batch: NotifyBatch, progress: Any) -> Counter[str]:
    totals: Counter[str] = Counter()
    hooks: dict[int, Webhook | None] = {}
    payloads: dict[int, dict[str, Any]] = {}
    chunk = settings.TRUSTRANK_WEBHOOK_CHUNK
    with ThreadPoolExecutor(settings.TRUSTRANK_WEBHOOK_CONCURRENCY,
                            thread_name_prefix="webhook") as pool:
        while True:
            rows = _claim(batch.pk, chunk)
            if not rows:
                break
            missing = {r[2] for r in rows} - hooks.keys()
            if missing:
                found = {h.pk: h for h in Webhook.objects.filter(pk__in=missing)}
                hooks.update({pk: found.get(pk) for pk in missing})
            wanted = {r[3] for r in rows} - payloads.keys()
            if wanted:
                payloads.update(NotifyEvent.objects.filter(pk__in=wanted)
                                .values_list("pk", "payload"))
            items = [_Item(r[0], r[1], hooks[r[2]], r[4], payloads[r[3]], r[5]) for r in rows]
            # Jira deliveries run here, in the job's thread (they may use the database).
            jira = [i for i in items if i.hook is not None and i.hook.enabled
                    and i.hook.format == WebhookFormat.JIRA]
            jira_ids = {i.id for i in jira}
            http = [i for i in items if i.id not in jira_ids]
            outcomes = list(pool.map(_deliver, http)) + [_deliver(i) for i in jira]
            _record(outcomes)
            totals.update(o.status for o in outcomes)
            progress(done=sum(totals.values()), phase="delivering")
    return totals


def _carry_over(batch: NotifyBatch) -> int:
    """Move the deliveries still open to a new round, ready at the earliest next attempt."""
    with transaction.atomic():
        left = Delivery.objects.filter(round_id=batch.pk, status__in=OPEN_STATUSES)
        first = left.aggregate(at=Min("next_attempt_at"))["at"]
        if first is None and not left.exists():
            return 0
        now = timezone.now()
        ready = first or now
        follow = NotifyBatch.objects.create(
            team_id=batch.team_id, source=BatchSource.RETRY, event=batch.event,
            ready_at=ready, fanned_out=True, enqueued_at=now,
        )
        moved = left.update(round=follow)
        job_enqueue_on_commit(follow, countdown=max(0.0, (ready - now).total_seconds()))
    return moved


def notify_dispatch_handle(*, job: NotifyBatch, progress: Any) -> dict[str, Any]:
    counts = dict(job.counts or {})
    if not job.fanned_out:
        progress(phase="fanning out")
        counts.update(_fan_out(job))
    sent = _send_round(job, progress)
    counts.update({f"sent_{k}": v for k, v in sent.items()})
    counts["carried_over"] = _carry_over(job)
    return {"counts": counts}
