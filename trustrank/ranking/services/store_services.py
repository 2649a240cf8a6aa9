"""A run's per-service graph results, stored once per distinct content."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from django.db import connection, transaction

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
    """Store the run's per-service results (a `ServiceResults` set unless one with the same
    content exists: its header row and a `ServiceResultRow` per service, in one
    transaction) and return their digest. When `previous`, whose results were stored under
    `previous_digest`, found the same for every service, nothing is built or sent: the
    ten thousand services of a large team are ten megabytes of JSON."""
    if previous is not None and previous_digest and result.services == previous.services:
        return previous_digest
    services = services_json(result)
    digest = hashlib.sha256(orjson.dumps(services, option=orjson.OPT_SORT_KEYS)).hexdigest()
    with transaction.atomic(), connection.cursor() as cur:
        # The header first: a run storing the same set beside this one waits on it here,
        # then finds it stored (with its rows: they commit together) and writes nothing.
        cur.execute(
            "INSERT INTO ranking_serviceresults (digest, created_at) VALUES (%s, now()) "
            "ON CONFLICT (digest) DO NOTHING RETURNING digest", [digest])
        if cur.fetchone() is not None:
            with cur.cursor.copy(
                "COPY ranking_serviceresultrow (digest, environment, name, exposure, data) "
                "FROM STDIN"
            ) as copy:
                for env, named in services.items():
                    for name, data in named.items():
                        copy.write_row((digest, env, name, data["exposure"] or "",
                                        orjson.dumps(data).decode()))
    return digest
