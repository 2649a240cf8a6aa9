"""OpenVEX 0.2 (https://openvex.dev/ns/v0.2.0): validated against the official JSON schema
(schemas/openvex_json_schema.json, see schemas/README.md) with jsonschema-rs, then mapped to
CycloneDX's analysis vocabulary, which findings keep.

Status: not_affected → not_affected; affected → exploitable; fixed → resolved;
under_investigation → in_triage. Justification (not_affected), the reverse of the mapping the
exports use (CISA's status justifications against CycloneDX's):

    component_not_present                              → requires_dependency
    vulnerable_code_not_present                        → code_not_present
    vulnerable_code_not_in_execute_path                → code_not_reachable
    vulnerable_code_cannot_be_controlled_by_adversary  → requires_environment
    inline_mitigations_already_exist                   → protected_by_mitigating_control

Detail: the statement's impact_statement, action_statement and status_notes, in that order.
A not_affected statement without a justification whose impact statement starts with "False
positive" (how TrustRank's own OpenVEX export writes one) is read as false_positive.
Products: a product's `subcomponents` when it has them (the product is then the container
they are in: an image, an application), else the product itself; each by its `@id` and its
`identifiers.purl`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import orjson

from trustrank.parsers.vex import VexDocument, VexError, VexProduct, VexStatement

SCHEMA = Path(__file__).resolve().parent / "schemas" / "openvex_json_schema.json"
CONTEXT = "https://openvex.dev/ns/v0.2.0"
_MAX_ERRORS = 5

STATE_OF_STATUS = {
    "not_affected": "not_affected",
    "affected": "exploitable",
    "fixed": "resolved",
    "under_investigation": "in_triage",
}
# The other way, for documents TrustRank writes (exports): several CycloneDX justifications
# share one OpenVEX justification, so a round trip keeps the state but may name the nearest.
OPENVEX_JUSTIFICATION = {
    "code_not_present": "vulnerable_code_not_present",
    "code_not_reachable": "vulnerable_code_not_in_execute_path",
    "requires_configuration": "vulnerable_code_cannot_be_controlled_by_adversary",
    "requires_dependency": "component_not_present",
    "requires_environment": "vulnerable_code_cannot_be_controlled_by_adversary",
    "protected_by_compiler": "inline_mitigations_already_exist",
    "protected_at_runtime": "inline_mitigations_already_exist",
    "protected_at_perimeter": "inline_mitigations_already_exist",
    "protected_by_mitigating_control": "inline_mitigations_already_exist",
}
OPENVEX_STATUS = {
    "in_triage": "under_investigation",
    "exploitable": "affected",
    "resolved": "fixed",
    "resolved_with_pedigree": "fixed",
    "not_affected": "not_affected",
    "false_positive": "not_affected",
}
# OpenVEX has no "false positive": TrustRank writes one as not_affected whose impact
# statement starts with this, and reads such a statement back as false_positive.
FALSE_POSITIVE = "False positive"

JUSTIFICATION_OF = {
    "component_not_present": "requires_dependency",
    "vulnerable_code_not_present": "code_not_present",
    "vulnerable_code_not_in_execute_path": "code_not_reachable",
    "vulnerable_code_cannot_be_controlled_by_adversary": "requires_environment",
    "inline_mitigations_already_exist": "protected_by_mitigating_control",
}


@functools.cache
def openvex_validator() -> Any:
    import jsonschema_rs

    schema = orjson.loads(SCHEMA.read_bytes())
    return jsonschema_rs.validator_for(schema, validate_formats=True)


def _path(parts: Any) -> str:
    return "/" + "/".join(str(p) for p in parts)


def openvex_validate(doc: Any) -> None:
    """VexError listing the first schema errors, each with where it is."""
    errors = []
    # The schema's two conditional rules, said plainly (its own message is an anyOf failure).
    statements = doc.get("statements") if isinstance(doc, dict) else None
    for i, s in enumerate(statements if isinstance(statements, list) else ()):
        if not isinstance(s, dict):
            continue
        if s.get("status") == "not_affected" and not (
            "justification" in s or "impact_statement" in s
        ):
            errors.append(f"at /statements/{i}: not_affected needs a justification or an "
                          "impact_statement")
        if s.get("status") == "affected" and "action_statement" not in s:
            errors.append(f"at /statements/{i}: affected needs an action_statement")
    for error in openvex_validator().iter_errors(doc):
        errors.append(f"at {_path(error.instance_path)}: {error.message}")
        if len(errors) >= _MAX_ERRORS:
            break
    if errors:
        raise VexError("the document does not conform to the OpenVEX 0.2 JSON schema: "
                       + "; ".join(errors))


def _products(statement: dict[str, Any]) -> tuple[VexProduct, ...]:
    out: list[VexProduct] = []
    for product in statement.get("products") or ():
        parts = product.get("subcomponents") or [product]
        for part in parts:
            ref = str(part.get("@id") or "")
            purl = str((part.get("identifiers") or {}).get("purl") or "")
            if not purl and ref.startswith("pkg:"):
                purl = ref
            out.append(VexProduct(ref=ref, purl=purl))
    return tuple(dict.fromkeys(out))


def _detail(statement: dict[str, Any]) -> str:
    parts = [
        str(statement.get(key) or "").strip()
        for key in ("impact_statement", "action_statement", "status_notes")
    ]
    return "\n\n".join(dict.fromkeys(p for p in parts if p))


def openvex_parse(doc: Any) -> VexDocument:
    """An OpenVEX 0.2 document (already decoded JSON) as statements."""
    if not isinstance(doc, dict):
        raise VexError("an OpenVEX document must be a JSON object")
    context = doc.get("@context")
    if context != CONTEXT:
        raise VexError(
            f"@context is {context!r}: only OpenVEX 0.2 ({CONTEXT!r}) is accepted"
        )
    openvex_validate(doc)
    statements = []
    for index, s in enumerate(doc["statements"]):
        vuln = s["vulnerability"]
        status = s["status"]
        justification = str(s.get("justification") or "")
        state = STATE_OF_STATUS[status]
        detail = _detail(s)
        if status == "not_affected" and not justification and detail.startswith(FALSE_POSITIVE):
            state = "false_positive"
            detail = detail.removeprefix(FALSE_POSITIVE).lstrip(":").strip()
        statements.append(
            VexStatement(
                index=index,
                vulnerability=str(vuln["name"]),
                aliases=tuple(str(a) for a in vuln.get("aliases") or () if a != vuln["name"]),
                products=_products(s),
                state=state,
                justification=JUSTIFICATION_OF.get(justification, "")
                if status == "not_affected" else "",
                detail=detail,
                source_status=status,
                source_justification=justification,
            )
        )
    return VexDocument(
        format="openvex", id=str(doc["@id"]), statements=tuple(statements), spec_version="0.2.0"
    )
