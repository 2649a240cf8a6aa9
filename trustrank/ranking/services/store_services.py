"""A run's per-service graph results, stored once per distinct content."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from django.db import connection

from trustrank.risk.results import RankResult


def services_json(result: RankResult) -> dict[str, dict[str, Any]]:
    """The per-service graph results by environment and name, as the run stores them."""
    out: dict[str, dict[str, Any]] = {}
    for s in result.services:
        out.setdefault(s.environment, {})[s.name] = {
            "trust": s.trust,
            "identity_trust": s.identity_trust,
            "exposure": s.exposure,
            "exposure_reason": s.exposure_reason,
            "path": list(s.path),
            "hops": orjson.loads(orjson.dumps(list(s.hops))),
        }
    return out


def services_store(
    result: RankResult, *, previous: RankResult | None = None, previous_digest: str = ""
) -> str:
    """Store the run's per-service results (a `ServiceResults` row unless one with the same
    content exists) and return their digest. When `previous`, whose results were stored
    under `previous_digest`, found the same for every service, nothing is built or sent:
    the ten thousand services of a large team are ten megabytes of JSON."""
    if previous is not None and previous_digest and result.services == previous.services:
        return previous_digest
    body = orjson.dumps(services_json(result), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(body).hexdigest()
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM ranking_serviceresults WHERE digest = %s", [digest])
        if cur.fetchone() is None:
            cur.execute(
                "INSERT INTO ranking_serviceresults (digest, data, created_at) "
                "VALUES (%s, %s::jsonb, now()) ON CONFLICT (digest) DO NOTHING",
                [digest, body.decode()],
            )
    return digest
