"""CSAF 2.0 VEX (document category `csaf_vex`), validated against the OASIS CSAF 2.0 JSON
schema shipped in trustrank/exports/schemas/ (its CVSS `$ref`s resolved locally).

Mapping from the CycloneDX VEX states TrustRank keeps (as CISA's VEX status mapping does):
in_triage → under_investigation; exploitable → known_affected (with a remediation: the
profile requires an action statement); resolved, resolved_with_pedigree → fixed;
not_affected, false_positive → known_not_affected (with a flag from the justification, and
a threat of category `impact` carrying the detail: the profile requires an impact
statement).

Products: csaf_tree.py (branches vendor → product_name → product_version, and a
`default_component_of` relationship per affected component of a project version).
Vulnerabilities: one per advisory id; the rows are read ordered by it, so a vulnerability is
complete when the id changes. The tree is built first (one DISTINCT query) and validated with
the document; then each vulnerability is checked against the mandatory tests it can fail on
its own (6.1.1, 6.1.6) and validated against the schema before it is written, so nothing
invalid is written and memory holds one vulnerability's findings. When two findings give
one product two statuses for one vulnerability, the most urgent wins (known_affected, then
under_investigation, fixed, known_not_affected).

Publisher: TRUSTRANK_CSAF_PUBLISHER_NAME, _NAMESPACE and _CATEGORY (settings). The audit
chain's head digest, as the export saw it, is a document note titled "Audit chain".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import cache
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from django.conf import settings
from django.utils import timezone

from trustrank.exports.services.csaf_tree import (
    csaf_product_tree,
    row_product_id,
    vulnerability_check,
)
from trustrank.exports.services.formats import Progress, explanation_text
from trustrank.exports.services.vex_cyclonedx import InvalidDocument
from trustrank.findings.choices import FindingKind

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
CSAF_SCHEMA_ID = "https://docs.oasis-open.org/csaf/csaf/v2.0/csaf_json_schema.json"

FLAG_OF_JUSTIFICATION = {
    "code_not_present": "vulnerable_code_not_present",
    "code_not_reachable": "vulnerable_code_not_in_execute_path",
    "requires_configuration": "vulnerable_code_cannot_be_controlled_by_adversary",
    "requires_dependency": "vulnerable_code_cannot_be_controlled_by_adversary",
    "requires_environment": "vulnerable_code_cannot_be_controlled_by_adversary",
    "protected_by_compiler": "inline_mitigations_already_exist",
    "protected_at_runtime": "inline_mitigations_already_exist",
    "protected_at_perimeter": "inline_mitigations_already_exist",
    "protected_by_mitigating_control": "inline_mitigations_already_exist",
}
STATUS_OF_STATE = {
    "in_triage": "under_investigation",
    "exploitable": "known_affected",
    "resolved": "fixed",
    "resolved_with_pedigree": "fixed",
    "not_affected": "known_not_affected",
    "false_positive": "known_not_affected",
}
REMEDIATION_OF_RESPONSE = {
    "update": "vendor_fix",
    "rollback": "vendor_fix",
    "workaround_available": "workaround",
    "will_not_fix": "no_fix_planned",
    "can_not_fix": "no_fix_planned",
}


@cache
def csaf_validator() -> Draft202012Validator:
    # Imported here, not with the module: importing jsonschema imports its format
    # checkers, and rfc3987-syntax among them builds 38 lark grammars (2-3 s of CPU) in
    # every process that loads the URLconf, on its first request, export or not.
    from jsonschema import Draft202012Validator
    from referencing import Registry
    from referencing.jsonschema import DRAFT4, DRAFT7, DRAFT202012

    def load(name: str) -> Any:
        return json.loads((SCHEMAS / name).read_text())

    first = "https://www.first.org/cvss/"
    registry: Registry = Registry().with_resources(
        [
            (first + "cvss-v2.0.json", DRAFT4.create_resource(load("cvss-v2.0.json"))),
            (first + "cvss-v3.0.json", DRAFT7.create_resource(load("cvss-v3.0.json"))),
            (first + "cvss-v3.1.json", DRAFT7.create_resource(load("cvss-v3.1.json"))),
        ]
    )
    schema = load("csaf_json_schema.json")
    registry = registry.with_resource(CSAF_SCHEMA_ID, DRAFT202012.create_resource(schema))
    return Draft202012Validator(
        schema, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER
    )


def validate_csaf(doc: dict[str, Any]) -> None:
    errors = sorted(csaf_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path)
        raise InvalidDocument(f"CSAF 2.0 schema at /{where}: {e.message}")


def _document(meta: dict[str, Any], *, now: datetime, notes_extra: list[str]) -> dict[str, Any]:
    stamp = now.isoformat()
    chain = meta.get("audit_chain") or {}
    export_id = meta.get("export_id") or "preview"
    notes = [
        {
            "category": "summary",
            "title": "What this document is",
            "text": "TrustRank findings with their triage state as a CSAF VEX document; "
            f"team {meta.get('team', {}).get('name', '')}, filter "
            f"{orjson.dumps(meta.get('filter') or {}).decode()}"
            + (f", as of {meta['as_of']}" if meta.get("as_of") else "")
            + ".",
        },
        {
            "category": "details",
            "title": "Audit chain",
            "text": f"head_digest {chain.get('head_digest') or '-'}; "
            f"{orjson.dumps(chain).decode()}",
        },
    ]
    if meta.get("notes") or notes_extra:
        notes.append(
            {
                "category": "general",
                "title": "Notes",
                "text": " ".join([*(meta.get("notes") or []), *notes_extra]),
            }
        )
    return {
        "category": "csaf_vex",
        "csaf_version": "2.0",
        "lang": "en",
        "title": f"TrustRank VEX export {export_id}",
        "notes": notes,
        "publisher": {
            "category": settings.TRUSTRANK_CSAF_PUBLISHER_CATEGORY,
            "name": settings.TRUSTRANK_CSAF_PUBLISHER_NAME,
            "namespace": settings.TRUSTRANK_CSAF_PUBLISHER_NAMESPACE,
        },
        "tracking": {
            "id": f"trustrank-export-{export_id}",
            "status": "final",
            "version": "1",
            "initial_release_date": stamp,
            "current_release_date": stamp,
            "revision_history": [{"date": stamp, "number": "1", "summary": "Exported."}],
            "generator": {"date": stamp, "engine": {"name": "TrustRank"}},
        },
    }


# Which status one product keeps when its findings for one vulnerability disagree (6.1.6).
_URGENCY = ("known_affected", "under_investigation", "fixed", "known_not_affected")


def _deciding_rows(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(product id, the finding that decides its status), the most urgent per product."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        pid = row_product_id(row)
        kept = best.get(pid)
        urgency = _URGENCY.index(STATUS_OF_STATE[row["state"]])
        if kept is None or urgency < _URGENCY.index(STATUS_OF_STATE[kept["state"]]):
            best[pid] = row
    return list(best.items())


def _vulnerability(vuln_id: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    status: dict[str, list[str]] = {}
    flags: dict[str, list[str]] = {}
    threats: list[dict[str, Any]] = []
    remediations: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for pid, row in _deciding_rows(rows):
        kind = STATUS_OF_STATE[row["state"]]
        status.setdefault(kind, []).append(pid)
        if kind == "known_not_affected":
            label = FLAG_OF_JUSTIFICATION.get(row["justification"])
            if label:
                flags.setdefault(label, []).append(pid)
            threats.append(
                {
                    "category": "impact",
                    "details": row["detail"]
                    or ("False positive." if row["state"] == "false_positive" else "Not affected.")
                    + (f" Justification: {row['justification']}." if row["justification"] else ""),
                    "product_ids": [pid],
                }
            )
        if kind == "known_affected":
            categories = {REMEDIATION_OF_RESPONSE[r] for r in row["response"] if r in
                          REMEDIATION_OF_RESPONSE}
            if not categories:
                categories = {"vendor_fix" if row["_fixed_versions"] else "none_available"}
            for category in sorted(categories):
                fixed = ", ".join(str(v) for v in row["_fixed_versions"])
                details = row["detail"] or (
                    f"Fixed in {fixed}." if fixed and category == "vendor_fix"
                    else "No remediation recorded yet."
                )
                remediations.append(
                    {"category": category, "details": details, "product_ids": [pid]}
                )
    for row in rows:
        if row["rank"] is not None or row["decision"]:
            notes.append(
                {
                    "category": "other",
                    "title": f"TrustRank finding {row['finding_id']} ({row_product_id(row)})",
                    "text": f"rank {row['rank']}, env_rank {row['env_rank']}, score "
                    f"{row['score']}, decision {row['decision'] or '-'}; "
                    f"{explanation_text(row['explanation']) or 'no explanation'}",
                }
            )
    first = rows[0]
    out: dict[str, Any] = {}
    cve = first["cve"] or (vuln_id if vuln_id.upper().startswith("CVE-") else "")
    if cve:
        out["cve"] = cve.upper()
    ids = [
        {"system_name": a.split("-", 1)[0].upper(), "text": a}
        for a in dict.fromkeys([vuln_id, *first["aliases"]])
        if a and a.upper() != cve.upper() and "-" in a
    ]
    if ids:
        out["ids"] = ids
    if "cve" not in out and "ids" not in out:
        out["ids"] = [{"system_name": "TrustRank", "text": vuln_id}]
    out["notes"] = [
        {"category": "description", "title": "Title", "text": first["title"] or vuln_id},
        *notes,
    ]
    out["product_status"] = status
    if flags:
        out["flags"] = [{"label": k, "product_ids": v} for k, v in flags.items()]
    if threats:
        out["threats"] = threats
    if remediations:
        out["remediations"] = remediations
    return out


def csaf_vex_chunks(
    rows: Iterable[dict[str, Any]],
    meta: dict[str, Any],
    progress: Progress | None = None,
    *,
    products: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> Iterator[bytes]:
    """Rows must come ordered by vuln_id (export_selection_for does so for this format);
    `products`: product.csaf_products_of of the same selection."""
    now = timezone.now().replace(microsecond=0)
    tree = csaf_product_tree(*products, vendor=settings.TRUSTRANK_CSAF_PUBLISHER_NAME)
    document = _document(meta, now=now, notes_extra=tree.notes)
    validate_csaf({"document": document, "product_tree": tree.tree})
    done = 0
    first_vuln = True
    yield orjson.dumps({"document": document, "product_tree": tree.tree})[:-1]
    vulns_only = (r for r in rows if r["kind"] == FindingKind.VULNERABILITY)
    for vuln_id, group in groupby(vulns_only, key=lambda r: r["vuln_id"] or r["cve"]):
        rows_ = list(group)
        vulnerability = _vulnerability(vuln_id or f"finding-{rows_[0]['finding_id']}", rows_)
        vulnerability_check(vulnerability, tree.defined)
        # The tree was validated above; each vulnerability is validated with the document.
        validate_csaf({"document": document, "vulnerabilities": [vulnerability]})
        body = orjson.dumps(vulnerability)
        # The schema wants at least one vulnerability when the key is there: the key is
        # written with the first one.
        yield b',"vulnerabilities":[' + body if first_vuln else b"," + body
        first_vuln = False
        done += len(rows_)
        if progress is not None:
            progress(done)
    if progress is not None:
        progress(done)
    yield b"}\n" if first_vuln else b"]}\n"
