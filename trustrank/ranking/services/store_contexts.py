"""The ranked findings' contexts (`ranking_rankcontext`): one row per distinct context,
keyed by the SHA-256 of its JSON, shared by every ranked row and run that found the same."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from trustrank.ranking.services.store_keys import KeyParts
from trustrank.risk.results import RankedFinding, factor_json


def context_of(r: RankedFinding) -> dict[str, Any]:
    return {
        "deployed": r.deployed,
        "environment": r.environment,
        "service": r.service,
        "project_version": r.project_version,
        "exposure": r.exposure,
        "reachability": r.reachability,
        "exploitation": r.exploitation,
        "automatable": r.automatable,
        "human_impact": r.human_impact,
        "trust": r.trust,
        "path": list(r.path),
        "explanation": [factor_json(f) for f in r.explanation],
    }


def _context_body(r: RankedFinding, bodies: dict[str, bytes],
                  parts: KeyParts | None = None) -> tuple[str, bytes]:
    """(digest, JSON) of a ranked finding's context, the JSON one object per digest
    through `bodies`: the store keys contexts by the identity of the shared objects, and
    an incremental run's rescored findings hold new ones, so the same context comes under
    several keys (a rewritten queue of a million: 11,000 keys of 3,000 contexts, 5 kB
    each). `parts` notes the context's parts of the queue key."""
    body = orjson.dumps(context_of(r), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(body).hexdigest()
    if parts is not None:
        parts.add(digest, r)
    return digest, bodies.setdefault(digest, body)


def _contexts_insert(cur: Any, new_context: dict[str, bytes]) -> None:
    """Store the contexts (digest -> JSON) not stored yet. Only those are sent: an
    incremental run's walked rows mostly keep theirs, and PostgreSQL parsed megabytes of
    JSON to find them there."""
    cur.execute(
        "SELECT digest FROM ranking_rankcontext WHERE digest = ANY(%s::varchar[])",
        ["{" + ",".join(new_context) + "}"],
    )
    stored = {row[0] for row in cur.fetchall()}
    # One JSON object (digest -> context) as one parameter: the driver quotes a string
    # in C, where a text array is escaped element by element in Python.
    cur.execute(
        "INSERT INTO ranking_rankcontext (digest, data, created_at) "
        "SELECT key, value, now() FROM jsonb_each(%s::jsonb) "
        "ON CONFLICT (digest) DO NOTHING",
        [_json_object({d: b for d, b in new_context.items() if d not in stored})],
    )


def _json_object(bodies: dict[str, bytes]) -> str:
    """`{"digest": <context JSON>, …}` from already serialised bodies."""
    return "{" + ",".join(f'"{d}":{b.decode()}' for d, b in bodies.items()) + "}"
