"""OpenVEX 0.2 (https://openvex.dev/ns/v0.2.0): one statement per vulnerability finding,
each statement checked against the official JSON schema (parsers/openvex.py) before it is
written, so nothing invalid is served and memory holds one statement at a time.

Document: `@id` a stable `urn:uuid:` (a UUID 5 of the publisher namespace and the export id),
`author` TRUSTRANK_CSAF_PUBLISHER_NAME (the organisation publishing TrustRank's VEX, as for
CSAF), `timestamp` when it was made, `version` 1, `tooling` naming the export and the team.

Statement: `vulnerability` the advisory id (or CVE) with the other ids as `aliases`;
`products` the project version (its SBOM's purl, else `urn:uuid:<project version uuid>`)
with the affected component's purl as a subcomponent; `status` from the triage (in_triage →
under_investigation, exploitable → affected with an action statement, resolved →
fixed, not_affected → not_affected with the justification mapped as parsers.openvex says,
false_positive → not_affected with an impact statement starting "False positive"); the
triage detail as impact or action statement. Importing the document (POST /api/v1/vex)
into another project version gives its findings the same states.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from django.conf import settings
from django.utils import timezone

from trustrank.exports.services.formats import CHUNK_BYTES, Progress
from trustrank.exports.services.vex_cyclonedx import InvalidDocument
from trustrank.findings.choices import FindingKind
from trustrank.parsers.openvex import (
    CONTEXT,
    FALSE_POSITIVE,
    OPENVEX_JUSTIFICATION,
    OPENVEX_STATUS,
    openvex_validator,
)

_RESPONSE_TEXT = {
    "update": "update to a fixed version",
    "rollback": "roll back to a version without the vulnerability",
    "workaround_available": "apply the available workaround",
    "will_not_fix": "no fix is planned",
    "can_not_fix": "it cannot be fixed",
}


def document_id(meta: dict[str, Any]) -> str:
    """The document's IRI: the same for every download of one export."""
    export_id = meta.get("export_id")
    if export_id is None:
        return f"urn:uuid:{uuid.uuid4()}"
    name = f"{settings.TRUSTRANK_CSAF_PUBLISHER_NAMESPACE}/exports/{export_id}/openvex"
    return f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, name)}"


def _product_id(product: dict[str, Any] | None, row: dict[str, Any]) -> str:
    if product is not None:
        return str(product.get("purl") or f"urn:uuid:{product['uuid']}")
    # A finding of no project version: the component is the product.
    return str(row["component_purl"] or f"urn:trustrank:finding:{row['finding_id']}")


def _vulnerability(row: dict[str, Any]) -> dict[str, Any]:
    name = row["vuln_id"] or row["cve"] or f"TRUSTRANK-FINDING-{row['finding_id']}"
    aliases = [a for a in dict.fromkeys([row["cve"], *row["aliases"]]) if a and a != name]
    return {"name": name, **({"aliases": aliases} if aliases else {})}


def _action(row: dict[str, Any]) -> str:
    detail = (row["detail"] or "").strip()
    if detail:
        return detail
    steps = [_RESPONSE_TEXT[r] for r in row["response"] if r in _RESPONSE_TEXT]
    if steps:
        return "Response: " + "; ".join(steps) + "."
    return "Affected; no remediation has been recorded yet."


def statement_of(row: dict[str, Any], product: dict[str, Any] | None) -> dict[str, Any]:
    state = row["state"]
    status = OPENVEX_STATUS[state]
    detail = (row["detail"] or "").strip()
    item: dict[str, Any] = {"@id": _product_id(product, row)}
    if product is not None and row["component_purl"]:
        item["subcomponents"] = [{"@id": row["component_purl"]}]
    statement: dict[str, Any] = {
        "vulnerability": _vulnerability(row),
        "products": [item],
        "status": status,
    }
    if state == "false_positive":
        statement["impact_statement"] = FALSE_POSITIVE + (f": {detail}" if detail else "")
    elif status == "not_affected":
        justification = OPENVEX_JUSTIFICATION.get(row["justification"] or "")
        if justification:
            statement["justification"] = justification
        if detail or not justification:
            statement["impact_statement"] = detail or "Not affected (no justification given)."
    elif status == "affected":
        statement["action_statement"] = _action(row)
    elif detail:
        statement["status_notes"] = detail
    return statement


def _head(meta: dict[str, Any]) -> dict[str, Any]:
    team = (meta.get("team") or {}).get("name") or ""
    return {
        "@context": CONTEXT,
        "@id": document_id(meta),
        "author": settings.TRUSTRANK_CSAF_PUBLISHER_NAME,
        "timestamp": timezone.now().isoformat(),
        "version": 1,
        "tooling": f"TrustRank export {meta.get('export_id', 'preview')}"
        + (f" for team {team}" if team else ""),
    }


def _checked(head: dict[str, Any], statement: dict[str, Any]) -> bytes:
    errors = list(openvex_validator().iter_errors({**head, "statements": [statement]}))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.instance_path)
        raise InvalidDocument(f"OpenVEX 0.2 schema at /{where}: {e.message}")
    return orjson.dumps(statement)


def openvex_chunks(
    rows: Iterable[dict[str, Any]],
    meta: dict[str, Any],
    progress: Progress | None = None,
    *,
    products: dict[int, dict[str, Any]],
) -> Iterator[bytes]:
    """The document in chunks of about 64 KiB. `products`: project version id → its
    product_data (exports.services.product)."""
    head = _head(meta)
    parts = [orjson.dumps(head)[:-1], b',"statements":[']
    size, n = 0, 0
    for row in rows:
        if row["kind"] != FindingKind.VULNERABILITY:
            continue
        body = _checked(head, statement_of(row, products.get(row["_project_version_id"])))
        parts.append(body if n == 0 else b"," + body)
        n += 1
        size += len(body) + 1
        if progress is not None and n % 1000 == 0:
            progress(n)
        if size >= CHUNK_BYTES:
            yield b"".join(parts)
            parts, size = [], 0
    if n == 0:
        # The schema asks for at least one statement.
        raise InvalidDocument("an OpenVEX document needs at least one statement: the "
                              "selection has no vulnerability finding")
    if progress is not None:
        progress(n)
    parts.append(b"]}\n")
    yield b"".join(parts)
