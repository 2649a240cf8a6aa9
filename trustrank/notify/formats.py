"""What a delivery sends: the JSON body (or Slack's message), its signature and headers."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import orjson

USER_AGENT = "TrustRank-Webhooks/1"


def signature(secret: str, body: bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of the body>`, the X-TrustRank-Signature header's value."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def delivery_document(*, payload: dict[str, Any], event: str, delivery_id: str) -> dict[str, Any]:
    """The JSON delivered: the event's payload with the event name and the delivery id."""
    return {"event": event, "delivery_id": delivery_id, **payload}


_DECISION_EMOJI = {
    "immediate": ":rotating_light:",
    "out-of-cycle": ":warning:",
    "scheduled": ":calendar:",
    "defer": ":zzz:",
}


def _escape(text: Any) -> str:
    # Slack's mrkdwn: &, < and > are control characters.
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _finding_lines(doc: dict[str, Any]) -> tuple[str, list[str]]:
    name = _escape(doc.get("title") or doc.get("vuln_id") or f"finding {doc.get('finding_id')}")
    url = doc.get("finding_url") or ""
    link = f"<{url}|{name}>" if url else name
    decision = str(doc.get("decision") or "")
    previous = doc.get("previous_decision")
    headline = f"{_DECISION_EMOJI.get(decision, '')} *{link}*".strip()
    facts = [
        *([f"*Vulnerability:* {_escape(doc['vuln_id'])}"] if doc.get("vuln_id") else []),
        *([f"*Added to CISA KEV:* {_escape(doc['kev_cve_id'])}"] if doc.get("kev_cve_id")
          else []),
        f"*Rank:* {doc.get('rank', '—')}",
        f"*Decision:* {_escape(decision)}"
        + (f" (was {_escape(previous)})" if previous else ""),
    ]
    where = " / ".join(
        _escape(doc[k]) for k in ("component", "project", "version", "service", "environment")
        if doc.get(k)
    )
    if where:
        facts.append(f"*Where:* {where}")
    reasons = [
        f"{_escape(f.get('name', ''))}: {_escape(f.get('value', ''))}"
        for f in (doc.get("explanation") or [])[:5] if isinstance(f, dict)
    ]
    if reasons:
        facts.append("*Why:* " + "; ".join(reasons))
    return headline, facts


def slack_document(doc: dict[str, Any]) -> dict[str, Any]:
    """Slack's incoming-webhook message (`text` for notifications, `blocks` in mrkdwn)."""
    event = str(doc.get("event", ""))
    if "finding_id" in doc:
        headline, facts = _finding_lines(doc)
        text = f"TrustRank {event}: {headline}"
    elif event == "job.failed":
        job = doc.get("job") or {}
        text = f"TrustRank job.failed: {_escape(job.get('kind'))} job {_escape(job.get('id'))}"
        facts = [f"*Error:* {_escape(job.get('error', ''))[:500]}"]
    else:
        text = f"TrustRank {_escape(event)}"
        facts = [
            f"*{_escape(k)}:* {_escape(v)}"[:300] for k, v in doc.items()
            if k not in ("event", "delivery_id") and not isinstance(v, (dict, list))
        ][:8]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
    ]
    if facts:
        blocks.append({"type": "section", "text": {"type": "mrkdwn",
                                                   "text": "\n".join(facts)[:3000]}})
    blocks.append({"type": "context", "elements": [
        {"type": "mrkdwn", "text": f"delivery {_escape(doc.get('delivery_id', ''))}"}
    ]})
    return {"text": text[:3000], "blocks": blocks}


def request_of(
    *, fmt: str, secret: str, event: str, delivery_id: str, payload: dict[str, Any]
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one delivery in the webhook's format (json or slack)."""
    doc = delivery_document(payload=payload, event=event, delivery_id=delivery_id)
    body = orjson.dumps(slack_document(doc) if fmt == "slack" else doc)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-TrustRank-Event": event,
        "X-TrustRank-Delivery": delivery_id,
        "X-TrustRank-Signature": signature(secret, body),
    }
    return body, headers
