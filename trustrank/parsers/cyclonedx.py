"""CycloneDX 1.2–1.7 (JSON and XML): validate against the schemas cyclonedx-python-lib ships,
then turn the document into plain frozen data: components, dependencies, services and the
embedded vulnerabilities (VDR/VEX), all in one pass. No database access here.

The library's object model (Bom.from_json) and its strict validator are 100–1000× slower than
this path on large BOMs (DESIGN.md), so they stay on the export side. JSON is validated with
jsonschema-rs, XML with lxml's XSD validator; XML is parsed with entities and network access
off, and any DTD is refused outright (XXE, entity expansion).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import cyclonedx.schema._res as cdx_resources
import jsonschema_rs
import orjson
from lxml import etree

from trustrank.parsers.bom import BomError, ParsedBom, ParsedComponent, ParsedService
from trustrank.parsers.cyclonedx_packages import packages_from_json, packages_from_xml
from trustrank.parsers.cyclonedx_vulns import (
    CycloneDxVulnsError,
    EmbeddedVulnerability,
    from_json,
    from_xml,
)

SUPPORTED_VERSIONS = ("1.2", "1.3", "1.4", "1.5", "1.6", "1.7")
_SUPPORTED = ", ".join(SUPPORTED_VERSIONS)
_SCHEMA_DIR = Path(cdx_resources.__file__).parent
_XML_NS = re.compile(r"^\{http://cyclonedx\.org/schema/bom/(\d+\.\d+)\}bom$")
_MAX_ERRORS = 10


def parse_cyclonedx(data: bytes) -> ParsedBom:
    """Validate and parse a CycloneDX document given as bytes (JSON or XML)."""
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        parsed = _parse_json(data)
    # UTF-16/32 byte order marks: only XML may come in those encodings.
    elif head.startswith((b"<", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        parsed = _parse_xml(data)
    else:
        raise BomError("the body is neither JSON nor XML; upload a CycloneDX BOM")
    if parsed.version > _MAX_BOM_VERSION:
        raise BomError(f"the BOM version is larger than {_MAX_BOM_VERSION}")
    return parsed


# --- JSON ---------------------------------------------------------------------------------


@functools.cache
def _json_validator(spec_version: str) -> Any:
    schema = orjson.loads((_SCHEMA_DIR / f"bom-{spec_version}.SNAPSHOT.schema.json").read_bytes())
    # The schema refers to its siblings by relative file name (spdx, jsf, cryptography-defs);
    # serve them from the package instead of the network.
    return jsonschema_rs.validator_for(schema, retriever=_retrieve_sibling, validate_formats=False)


def _retrieve_sibling(uri: str) -> Any:
    name = uri.rsplit("/", 1)[-1]
    path = _SCHEMA_DIR / name
    if not name.endswith(".schema.json") or not path.is_file():
        raise ValueError(f"schema reference {uri!r} is not shipped with cyclonedx-python-lib")
    return json.loads(path.read_text())


# A JSON escape of NUL (an odd number of backslashes before u0000): PostgreSQL stores no NUL
# in text or jsonb, so such a BOM would be accepted with 202 and fail in the worker.
_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
# BOM "version" is stored in a 32-bit column.
_MAX_BOM_VERSION = 2**31 - 1


def _parse_json(data: bytes) -> ParsedBom:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BomError(f"the body is not valid JSON: {exc}") from exc
    if _JSON_NUL.search(data):
        raise BomError("the BOM contains a NUL character (\\u0000), which cannot be stored")
    if not isinstance(doc, dict) or doc.get("bomFormat") != "CycloneDX":
        raise BomError('not a CycloneDX BOM: the JSON has no "bomFormat": "CycloneDX"')
    spec = doc.get("specVersion")
    if spec not in SUPPORTED_VERSIONS:
        raise BomError(
            f"unsupported CycloneDX specVersion {spec!r}; supported: {_SUPPORTED}"
        )
    errors = list(_first(_json_validator(spec).iter_errors(doc), _MAX_ERRORS))
    if errors:
        raise BomError(
            f"the BOM does not conform to the CycloneDX {spec} JSON schema: "
            + "; ".join(f"at {_json_path(e.instance_path)}: {e.message}" for e in errors)
        )
    components: list[ParsedComponent] = []
    for comp in doc.get("components") or ():
        _json_component(comp, "", components)
    metadata = doc.get("metadata") or {}
    described = metadata.get("component") or {}
    dependencies = tuple(
        (dep["ref"], child)
        for dep in doc.get("dependencies") or ()
        for child in dep.get("dependsOn") or ()
    )
    return ParsedBom(
        format="json",
        spec_version=spec,
        serial_number=doc.get("serialNumber", ""),
        version=int(doc.get("version", 1)),
        timestamp=_timestamp(metadata.get("timestamp")),
        tools=tuple(_json_tools(metadata.get("tools"))),
        described_component=_summary(described) if described else {},
        components=tuple(components),
        dependencies=dependencies,
        vulnerability_count=len(doc.get("vulnerabilities") or ()),
        services=tuple(_json_services(doc.get("services"))),
        **_embedded(lambda: from_json(doc)),
    )


def _embedded(parse: Callable[[], list[EmbeddedVulnerability]]) -> dict[str, Any]:
    try:
        return {"vulnerabilities": tuple(parse()), "vulnerabilities_error": ""}
    except CycloneDxVulnsError as exc:
        return {"vulnerabilities": (), "vulnerabilities_error": str(exc)}


def _json_services(services: Any) -> Iterator[ParsedService]:
    for svc in services or ():
        if not isinstance(svc, dict):
            continue
        yield ParsedService(
            name=str(svc.get("name") or ""),
            bom_ref=str(svc.get("bom-ref") or ""),
            group=str(svc.get("group") or ""),
            version=str(svc.get("version") or ""),
            endpoints=tuple(str(e) for e in svc.get("endpoints") or ()),
            authenticated=svc.get("authenticated"),
            trust_boundary=svc.get("x-trust-boundary"),
        )
        yield from _json_services(svc.get("services"))


def _xml_services(services: Any, ns: dict[str, str]) -> Iterator[ParsedService]:
    if services is None:
        return
    for svc in services.findall("c:service", ns):

        def flag(name: str, svc: Any = svc) -> bool | None:
            text = svc.findtext(f"c:{name}", namespaces=ns)
            return None if text is None else text.strip() == "true"

        yield ParsedService(
            name=svc.findtext("c:name", default="", namespaces=ns),
            bom_ref=svc.get("bom-ref", ""),
            group=svc.findtext("c:group", default="", namespaces=ns),
            version=svc.findtext("c:version", default="", namespaces=ns),
            endpoints=tuple(
                (e.text or "").strip() for e in svc.iterfind("c:endpoints/c:endpoint", ns)
            ),
            authenticated=flag("authenticated"),
            trust_boundary=flag("x-trust-boundary"),
        )
        yield from _xml_services(svc.find("c:services", ns), ns)


def _json_component(comp: dict[str, Any], parent: str, out: list[ParsedComponent]) -> None:
    ref = comp.get("bom-ref", "")
    supplier = comp.get("supplier") or {}
    out.append(
        ParsedComponent(
            name=comp["name"],
            bom_ref=ref,
            parent_ref=parent,
            type=comp.get("type", ""),
            group=comp.get("group", ""),
            version=comp.get("version", ""),
            purl=comp.get("purl", ""),
            cpe=comp.get("cpe", ""),
            hashes={h["alg"]: h["content"] for h in comp.get("hashes") or ()},
            licenses=tuple(_json_licenses(comp.get("licenses") or ())),
            supplier=supplier.get("name", "") if isinstance(supplier, dict) else "",
            scope=comp.get("scope", ""),
            packages=packages_from_json(comp),
        )
    )
    for child in comp.get("components") or ():
        _json_component(child, ref, out)


def _json_licenses(items: Any) -> Iterator[str]:
    for item in items:
        if "expression" in item:
            yield item["expression"]
        lic = item.get("license")
        if lic:
            yield lic.get("id") or lic.get("name") or ""


def _json_tools(tools: Any) -> Iterator[dict[str, str]]:
    if isinstance(tools, dict):  # 1.5+: {"components": [...], "services": [...]}
        items = [*tools.get("components", ()), *tools.get("services", ())]
    else:
        items = tools or []
    for tool in items:
        vendor = tool.get("vendor") or (tool.get("group") or "")
        if isinstance(tool.get("manufacturer"), dict):
            vendor = tool["manufacturer"].get("name", vendor)
        yield {"vendor": vendor, "name": tool.get("name", ""), "version": tool.get("version", "")}


def _json_path(instance_path: Any) -> str:
    parts = list(instance_path)
    if not parts:
        return "$"
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


# --- XML ----------------------------------------------------------------------------------


@functools.cache
def _xml_schema(spec_version: str) -> etree.XMLSchema:
    return etree.XMLSchema(file=str(_SCHEMA_DIR / f"bom-{spec_version}.SNAPSHOT.xsd"))


def _xml_parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
    )


def _parse_xml(data: bytes) -> ParsedBom:
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise BomError(
            "the XML declares a DTD or entities; they are refused (XXE and entity expansion)"
        )
    try:
        root = etree.fromstring(data, parser=_xml_parser())
    except etree.XMLSyntaxError as exc:
        raise BomError(f"the body is not well-formed XML: {exc}") from exc
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:
        raise BomError("the XML declares a DTD; it is refused (XXE and entity expansion)")
    match = _XML_NS.match(root.tag)
    if not match:
        raise BomError(
            f"not a CycloneDX BOM: the root element is {root.tag!r}, expected <bom> in a "
            "http://cyclonedx.org/schema/bom/<version> namespace"
        )
    spec = match.group(1)
    if spec not in SUPPORTED_VERSIONS:
        raise BomError(
            f"unsupported CycloneDX spec version {spec}; supported: {_SUPPORTED}"
        )
    schema = _xml_schema(spec)
    if not schema.validate(root):
        errors = list(schema.error_log)[:_MAX_ERRORS]
        raise BomError(
            f"the BOM does not conform to the CycloneDX {spec} XML schema: "
            + "; ".join(f"line {e.line}: {e.message}" for e in errors)
        )
    ns = {"c": f"http://cyclonedx.org/schema/bom/{spec}"}
    components: list[ParsedComponent] = []
    top = root.find("c:components", ns)
    if top is not None:
        for comp in top.findall("c:component", ns):
            _xml_component(comp, "", ns, components)
    meta = root.find("c:metadata", ns)
    described: dict[str, Any] = {}
    tools: list[dict[str, str]] = []
    timestamp = None
    if meta is not None:
        timestamp = _timestamp(meta.findtext("c:timestamp", namespaces=ns))
        mcomp = meta.find("c:component", ns)
        if mcomp is not None:
            described = _summary(_xml_component_fields(mcomp, ns))
        for tool in meta.iterfind("c:tools/c:tool", ns):
            tools.append(_xml_tool(tool, ns))
        for tool in meta.iterfind("c:tools/c:components/c:component", ns):
            tools.append(_xml_tool(tool, ns))
    dependencies = tuple(
        (dep.get("ref", ""), child.get("ref", ""))
        for dep in root.iterfind("c:dependencies/c:dependency", ns)
        for child in dep.findall("c:dependency", ns)
    )
    vulns = root.find("c:vulnerabilities", ns)
    return ParsedBom(
        format="xml",
        spec_version=spec,
        serial_number=root.get("serialNumber", ""),
        version=int(root.get("version", "1")),
        timestamp=timestamp,
        tools=tuple(tools),
        described_component=described,
        components=tuple(components),
        dependencies=dependencies,
        vulnerability_count=0 if vulns is None else len(vulns),
        services=tuple(_xml_services(root.find("c:services", ns), ns)),
        **_embedded(lambda: from_xml(root)),
    )


def _xml_component_fields(comp: Any, ns: dict[str, str]) -> dict[str, Any]:
    return {
        "type": comp.get("type", ""),
        "bom-ref": comp.get("bom-ref", ""),
        "group": comp.findtext("c:group", "", ns),
        "name": comp.findtext("c:name", "", ns),
        "version": comp.findtext("c:version", "", ns),
        "purl": comp.findtext("c:purl", "", ns),
    }


def _xml_component(comp: Any, parent: str, ns: dict[str, str], out: list[ParsedComponent]) -> None:
    ref = comp.get("bom-ref", "")
    licenses: list[str] = []
    lic_el = comp.find("c:licenses", ns)
    if lic_el is not None:
        for child in lic_el:
            if not isinstance(child.tag, str):
                continue
            if child.tag.endswith("}expression"):
                licenses.append((child.text or "").strip())
            else:
                licenses.append(child.findtext("c:id", "", ns) or child.findtext("c:name", "", ns))
    out.append(
        ParsedComponent(
            name=(comp.findtext("c:name", "", ns) or "").strip(),
            bom_ref=ref,
            parent_ref=parent,
            type=comp.get("type", ""),
            group=(comp.findtext("c:group", "", ns) or "").strip(),
            version=(comp.findtext("c:version", "", ns) or "").strip(),
            purl=(comp.findtext("c:purl", "", ns) or "").strip(),
            cpe=(comp.findtext("c:cpe", "", ns) or "").strip(),
            hashes={
                h.get("alg", ""): (h.text or "").strip()
                for h in comp.iterfind("c:hashes/c:hash", ns)
            },
            licenses=tuple(licenses),
            supplier=(comp.findtext("c:supplier/c:name", "", ns) or "").strip(),
            scope=(comp.findtext("c:scope", "", ns) or "").strip(),
            packages=packages_from_xml(comp, ns),
        )
    )
    nested = comp.find("c:components", ns)
    if nested is not None:
        for child in nested.findall("c:component", ns):
            _xml_component(child, ref, ns, out)


def _xml_tool(tool: Any, ns: dict[str, str]) -> dict[str, str]:
    return {
        "vendor": tool.findtext("c:vendor", "", ns) or tool.findtext("c:group", "", ns),
        "name": tool.findtext("c:name", "", ns),
        "version": tool.findtext("c:version", "", ns),
    }


# --- shared -------------------------------------------------------------------------------


def _summary(comp: dict[str, Any]) -> dict[str, Any]:
    keys = ("type", "bom-ref", "group", "name", "version", "purl")
    return {k: comp[k] for k in keys if comp.get(k)}


def _timestamp(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    # An offset beyond any real time zone, or a date that leaves the calendar once in UTC,
    # cannot be stored: treat it as no timestamp, like an unreadable one.
    offset = value.utcoffset() or timedelta(0)
    if abs(offset) > timedelta(hours=14):
        return None
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return None


def _first(iterator: Any, n: int) -> Iterator[Any]:
    for i, item in enumerate(iterator):
        if i >= n:
            return
        yield item
