"""SPDX 3.0.1 JSON-LD, validated against the official SPDX 3.0.1 JSON schema, then read from
its `@graph`.

spdx-tools 0.8 has an SPDX 3 model and writer but no parser, so the graph is read here: the
schema (jsonschema-rs, `schemas/spdx-json-schema-3.0.1.json`, see its PROVENANCE.md) checks the
shape, and this walks the elements it needs — `software_Package` (name,
`software_packageVersion`, `software_packageUrl` or an `externalIdentifier` of type
`packageUrl`, `cpe23`/`cpe22`, `verifiedUsing` hashes, `suppliedBy`/`originatedBy`), the
licence relationships, `Relationship` / `LifecycleScopedRelationship` (`from`, `to`,
`relationshipType`), `SpdxDocument.rootElement` and `CreationInfo`.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson

from trustrank.parsers.bom import ParsedComponent
from trustrank.parsers.spdx_graph import (
    EDGES_3,
    SpdxError,
    SpdxRead,
    hash_name,
    message_list,
    purl_group,
)

CONTEXT_301 = "https://spdx.org/rdf/3.0.1/spdx-context.jsonld"
_SCHEMA = Path(__file__).parent / "schemas" / "spdx-json-schema-3.0.1.json"
_MAX_ERRORS = 5
# Lifecycle scopes whose dependencies do not ship with the product. Not "build": what a
# compiled language builds with ends up in the binary.
_OPTIONAL_SCOPES = frozenset({"design", "development", "test"})
# software_primaryPurpose → CycloneDX component type; the rest read as "library".
_PURPOSE_TYPES = {
    "application": "application",
    "framework": "framework",
    "library": "library",
    "container": "container",
    "operatingSystem": "operating-system",
    "device": "device",
    "firmware": "firmware",
    "file": "file",
}


@functools.cache
def _validator() -> Any:
    return jsonschema_rs.validator_for(orjson.loads(_SCHEMA.read_bytes()), validate_formats=False)


def context_version(doc: dict[str, Any]) -> str:
    """The SPDX 3 version an `@context` names ("3.0.1"), or "" when it names none."""
    context = doc.get("@context")
    for value in context if isinstance(context, list) else [context]:
        if isinstance(value, str) and "spdx.org/rdf/3" in value:
            return value.split("spdx.org/rdf/", 1)[1].split("/", 1)[0]
    return ""


def read_spdx3(doc: dict[str, Any]) -> SpdxRead:
    version = context_version(doc)
    if doc.get("@context") != CONTEXT_301:
        raise SpdxError(
            f"unsupported SPDX 3 version {version or '?'}: the @context must be "
            f"{CONTEXT_301!r} (SPDX 3.0.1 JSON-LD)"
        )
    errors = [
        f"at {_path(e.instance_path)}: {e.message}"
        for e in _first(_validator().iter_errors(doc), _MAX_ERRORS)
    ]
    if errors:
        raise SpdxError(
            "the document does not conform to the SPDX 3.0.1 JSON schema: "
            + message_list(errors, limit=_MAX_ERRORS)
        )
    graph = doc.get("@graph")
    elements = graph if isinstance(graph, list) else [doc]
    by_id: dict[str, dict[str, Any]] = {}
    for element in elements:
        key = element.get("spdxId") or element.get("@id")
        if isinstance(key, str):
            by_id[key] = element
    packages: list[dict[str, Any]] = []
    relationships: list[tuple[str, str, str, bool]] = []
    described: list[str] = []
    licences: dict[str, list[str]] = {}
    creation: dict[str, Any] = {}
    namespace = ""
    for element in elements:
        kind = _type(element)
        if kind == "software_Package":
            packages.append(element)
        elif kind in ("Relationship", "LifecycleScopedRelationship"):
            rel_type = str(element.get("relationshipType", ""))
            source = str(element.get("from", ""))
            optional = element.get("scope") in _OPTIONAL_SCOPES
            for target in element.get("to") or ():
                relationships.append((source, rel_type, str(target), optional))
                if rel_type == "describes" and _type(by_id.get(source, {})) == "SpdxDocument":
                    described.append(str(target))
                if rel_type in ("hasDeclaredLicense", "hasConcludedLicense"):
                    text = _licence(by_id.get(str(target), {}))
                    if text:
                        licences.setdefault(source, []).append(text)
        elif kind == "software_Sbom":
            # Some writers make the document's root an Sbom whose root is the product.
            described.extend(str(r) for r in element.get("rootElement") or ())
        elif kind == "SpdxDocument":
            described.extend(str(r) for r in element.get("rootElement") or ())
            namespace = namespace or str(element.get("spdxId") or "")
            info = element.get("creationInfo")
            creation = by_id.get(info, {}) if isinstance(info, str) else (info or {})
    if not creation:
        creation = next((e for e in elements if _type(e) == "CreationInfo"), {})
    return SpdxRead(
        spec_version=str(creation.get("specVersion") or version)[:8],
        namespace=namespace,
        timestamp=_timestamp(creation.get("created")),
        tools=tuple(
            {"vendor": "", "name": str(by_id.get(t, {}).get("name") or t), "version": ""}
            for t in creation.get("createdUsing") or ()
        ),
        packages=tuple(_component(p, by_id, licences) for p in packages),
        relationships=tuple(relationships),
        described=tuple(described),
        edge_kinds=EDGES_3,
    )


def _component(
    p: dict[str, Any], by_id: dict[str, dict[str, Any]], licences: dict[str, list[str]]
) -> ParsedComponent:
    ref = str(p.get("spdxId") or p.get("@id") or "")
    purl = str(p.get("software_packageUrl") or "")
    cpe = ""
    for ident in p.get("externalIdentifier") or ():
        kind = ident.get("externalIdentifierType")
        if kind == "packageUrl" and not purl:
            purl = str(ident.get("identifier") or "")
        elif kind in ("cpe23", "cpe22") and not cpe:
            cpe = str(ident.get("identifier") or "")
    supplier = p.get("suppliedBy")
    if not supplier and p.get("originatedBy"):
        supplier = p["originatedBy"][0]
    return ParsedComponent(
        name=str(p.get("name") or ""),
        bom_ref=ref,
        type=_PURPOSE_TYPES.get(str(p.get("software_primaryPurpose") or ""), "library"),
        group=purl_group(purl),
        version=str(p.get("software_packageVersion") or ""),
        purl=purl,
        cpe=cpe,
        hashes={
            hash_name(str(h.get("algorithm", ""))): str(h.get("hashValue", ""))
            for h in p.get("verifiedUsing") or ()
            if _type(h) == "Hash"
        },
        licenses=tuple(dict.fromkeys(licences.get(ref, ()))),
        supplier=_agent_name(supplier, by_id),
    )


def _agent_name(value: Any, by_id: dict[str, dict[str, Any]]) -> str:
    agent = by_id.get(value, {}) if isinstance(value, str) else (value or {})
    return str(agent.get("name") or "") if isinstance(agent, dict) else ""


def _licence(element: dict[str, Any]) -> str:
    text = element.get("simplelicensing_licenseExpression")
    if not text and _type(element).startswith("expandedlicensing_"):
        text = element.get("spdxId") or ""
        text = text.rsplit("/", 1)[-1]
    text = str(text or "")
    return "" if text in ("NOASSERTION", "NONE") else text


def _type(element: Any) -> str:
    if not isinstance(element, dict):
        return ""
    return str(element.get("type") or element.get("@type") or "")


def _timestamp(raw: Any) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        return None


def _path(instance_path: Any) -> str:
    parts = list(instance_path)
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _first(iterator: Any, n: int) -> list[Any]:
    out = []
    for item in iterator:
        out.append(item)
        if len(out) >= n:
            break
    return out
