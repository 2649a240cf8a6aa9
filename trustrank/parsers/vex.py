"""VEX documents (CycloneDX VEX, JSON or XML, and OpenVEX 0.2 JSON) as plain statements.

Every statement comes out in one vocabulary, CycloneDX's analysis (the one findings keep):
`state`, `justification`, `response`, `detail`. OpenVEX is mapped by `parsers.openvex`.

What a statement is about (`products`): components named by bom-ref, purl or name and
version. A statement without products speaks of the whole product the document was sent for;
so does a CycloneDX `affects` ref naming the document's own `metadata.component`
(`VexDocument.product_refs`). The caller resolves the rest against its inventory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from trustrank.parsers.bom import BomError, ParsedBom
from trustrank.parsers.cyclonedx import parse_cyclonedx


class VexError(ValueError):
    """The document cannot be read as VEX; the message says what is wrong and where."""


@dataclass(frozen=True)
class VexProduct:
    """A component a statement speaks of: any of a bom-ref / IRI, a purl, a name and version."""

    ref: str = ""
    purl: str = ""
    name: str = ""
    version: str = ""

    def label(self) -> str:
        return self.purl or self.ref or f"{self.name}@{self.version}"


@dataclass(frozen=True)
class VexStatement:
    index: int  # position in the document (0-based)
    vulnerability: str
    aliases: tuple[str, ...]
    products: tuple[VexProduct, ...]  # empty: the whole product
    state: str  # CycloneDX analysis state (findings.TriageState values)
    justification: str = ""  # CycloneDX justification
    response: tuple[str, ...] = ()
    detail: str = ""
    # As the document said it: the OpenVEX status / justification, or the CycloneDX state.
    source_status: str = ""
    source_justification: str = ""

    def summary(self) -> dict[str, Any]:
        """A short JSON description (for responses and audit events)."""
        return {
            "index": self.index,
            "vulnerability": self.vulnerability,
            "aliases": list(self.aliases),
            "products": [p.label() for p in self.products],
            "status": self.source_status,
        }


@dataclass(frozen=True)
class VexDocument:
    format: str  # "cyclonedx" or "openvex"
    id: str  # serialNumber / @id
    statements: tuple[VexStatement, ...]
    # Statements the document carries but that state nothing (a CycloneDX vulnerability
    # without an analysis): reported, never applied.
    skipped: tuple[VexStatement, ...] = ()
    product_refs: frozenset[str] = field(default_factory=frozenset)
    spec_version: str = ""


def vex_parse(data: bytes) -> VexDocument:
    """Validate and read a VEX document; VexError says what is wrong."""
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise VexError(f"the body is not valid JSON: {exc}") from exc
        if isinstance(doc, dict) and "@context" in doc:
            from trustrank.parsers.openvex import openvex_parse

            return openvex_parse(doc)
        if not isinstance(doc, dict) or doc.get("bomFormat") != "CycloneDX":
            raise VexError(
                'not a VEX document: give CycloneDX VEX ("bomFormat": "CycloneDX") or OpenVEX '
                '0.2 ("@context": "https://openvex.dev/ns/v0.2.0")'
            )
    elif not head.startswith((b"<", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        raise VexError("the body is neither JSON nor XML; send CycloneDX VEX or OpenVEX 0.2")
    try:
        parsed = parse_cyclonedx(data)
    except BomError as exc:
        raise VexError(str(exc).replace("the BOM", "the VEX document")) from exc
    return _cyclonedx(parsed)


def _cyclonedx(parsed: ParsedBom) -> VexDocument:
    if parsed.vulnerabilities_error:
        raise VexError(f"vulnerabilities: {parsed.vulnerabilities_error}")
    if not parsed.vulnerabilities:
        raise VexError("the CycloneDX document has no vulnerabilities: it states nothing")
    components = {c.bom_ref: c for c in parsed.components if c.bom_ref}
    product_ref = str(parsed.described_component.get("bom-ref") or "")
    statements: list[VexStatement] = []
    skipped: list[VexStatement] = []
    for index, v in enumerate(parsed.vulnerabilities):
        products: list[VexProduct] = []
        for ref in dict.fromkeys(v.affects):
            if ref == product_ref:
                # The document's own product: every component of it.
                products = []
                break
            c = components.get(ref)
            if c is not None:
                products.append(VexProduct(ref=ref, purl=c.purl, name=c.name, version=c.version))
            else:
                products.append(VexProduct(ref=ref, purl=ref if ref.startswith("pkg:") else ""))
        analysis = v.analysis
        statement = VexStatement(
            index=index,
            vulnerability=v.id,
            aliases=tuple(a for a in v.aliases if a != v.id),
            products=tuple(products),
            state=analysis.state if analysis else "",
            justification=analysis.justification if analysis else "",
            response=tuple(dict.fromkeys(analysis.response)) if analysis else (),
            detail=analysis.detail if analysis else "",
            source_status=analysis.state if analysis else "",
            source_justification=analysis.justification if analysis else "",
        )
        (statements if analysis is not None else skipped).append(statement)
    return VexDocument(
        format="cyclonedx",
        id=parsed.serial_number,
        statements=tuple(statements),
        skipped=tuple(skipped),
        product_refs=frozenset({product_ref} if product_ref else ()),
        spec_version=parsed.spec_version,
    )
