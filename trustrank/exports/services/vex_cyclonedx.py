"""CycloneDX 1.6 VEX, built with cyclonedx-python-lib and validated with its JSON schema.

One document per project version (product.vex_product_of): `metadata.component` is the
product (its project name and version, the purl and cpe its SBOM gave it, and the SBOM's
bom-ref for it, else `urn:uuid:<project version uuid>`), `components` the affected
components inside it, and each vulnerability's `affects[].ref` a component's bom-ref in the
same document. `metadata.properties` carry the export's provenance, among them
`trustrank:audit_head_digest` (the audit chain's head when the export was made) and
`trustrank:sbom`, a BOM-Link (`urn:cdx:serial/version`) to the SBOM the product came from.

Big exports: the library builds and serializes a whole Bom in memory, so the document is
built a chunk of findings at a time — each chunk a complete Bom (its findings and the
components they affect that no earlier chunk carried), serialized by the library and
validated against the 1.6 schema — and the chunks' `vulnerabilities` are written out as
they come while the components wait in a spooled temporary file. Uniqueness of bom-refs
across chunks is kept by construction (a component ref is emitted once; a vulnerability's ref
is its finding's id). Nothing holds more than one chunk of findings, and no chunk is written
before the library's validator accepted it.
"""

from __future__ import annotations

import tempfile
import uuid
import warnings
from collections.abc import Iterable, Iterator
from decimal import Decimal
from itertools import islice
from typing import TYPE_CHECKING, Any

import orjson
from cyclonedx.model import Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.vulnerability import (
    BomTarget,
    ImpactAnalysisJustification,
    ImpactAnalysisResponse,
    ImpactAnalysisState,
    Vulnerability,
    VulnerabilityAnalysis,
    VulnerabilityRating,
    VulnerabilitySeverity,
)
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL

from trustrank.exports.services.formats import Progress, explanation_text
from trustrank.findings.choices import FindingKind

if TYPE_CHECKING:
    from cyclonedx.validation.json import JsonStrictValidator

CHUNK_FINDINGS = 1000


class InvalidDocument(Exception):
    """The document the export built fails its schema: an error, never served."""


_validator: JsonStrictValidator | None = None


def validate_cyclonedx(text: str) -> None:
    # Imported here, not with the module: it imports jsonschema, whose format checkers
    # (rfc3987-syntax builds 38 lark grammars) cost 2-3 s of CPU in every process that
    # loads the URLconf, on its first request.
    from cyclonedx.validation.json import JsonStrictValidator

    global _validator
    if _validator is None:
        _validator = JsonStrictValidator(SchemaVersion.V1_6)
    error = _validator.validate_str(text)
    if error is not None:
        raise InvalidDocument(f"CycloneDX 1.6 schema: {error}")


def component_ref(row: dict[str, Any]) -> str:
    purl = row["component_purl"]
    if purl:
        return str(purl)
    name, version = row["_component_name"], row["_component_version"]
    if name:
        return f"component:{name}@{version}"
    return f"component:finding-{row['finding_id']}"


def _component(row: dict[str, Any], ref: str) -> Component:
    purl = None
    if row["component_purl"]:
        try:
            purl = PackageURL.from_string(row["component_purl"])
        except ValueError:
            purl = None
    return Component(
        name=row["_component_name"] or (purl.name if purl else ref),
        version=row["_component_version"] or (purl.version if purl else None) or None,
        type=ComponentType.LIBRARY,
        bom_ref=ref,
        purl=purl,
    )


def _properties(row: dict[str, Any]) -> list[Property]:
    values = {
        "trustrank:finding_id": row["finding_id"],
        "trustrank:project": row["project"],
        "trustrank:version": row["version"],
        "trustrank:environment": row["environment"],
        "trustrank:service": row["service"],
        "trustrank:rank": row["rank"],
        "trustrank:env_rank": row["env_rank"],
        "trustrank:score": row["score"],
        "trustrank:decision": row["decision"],
        "trustrank:explanation": explanation_text(row["explanation"]),
        "trustrank:assignee": row["assignee"],
        "trustrank:due_date": row["due_date"],
        "trustrank:epss": row["epss"],
        "trustrank:kev": row["kev"],
    }
    return [
        Property(name=k, value=str(v).lower() if isinstance(v, bool) else str(v))
        for k, v in values.items()
        if v not in (None, "")
    ]


def _vulnerability(row: dict[str, Any], ref: str) -> Vulnerability:
    justification = (
        ImpactAnalysisJustification(row["justification"]) if row["justification"] else None
    )
    analysis = VulnerabilityAnalysis(
        state=ImpactAnalysisState(row["state"]),
        justification=justification,
        responses=[ImpactAnalysisResponse(r) for r in row["response"]],
        detail=row["detail"] or None,
    )
    ratings = []
    if row["severity"] or row["cvss"] is not None:
        ratings.append(
            VulnerabilityRating(
                score=Decimal(str(row["cvss"])) if row["cvss"] is not None else None,
                severity=VulnerabilitySeverity(row["severity"] or "unknown"),
            )
        )
    return Vulnerability(
        bom_ref=f"finding-{row['finding_id']}",
        id=row["vuln_id"] or row["cve"] or f"finding-{row['finding_id']}",
        description=row["title"] or None,
        ratings=ratings,
        analysis=analysis,
        affects=[BomTarget(ref=ref)],
        properties=_properties(row),
    )


def _product(product: dict[str, Any]) -> Component:
    purl = None
    if product.get("purl"):
        try:
            purl = PackageURL.from_string(product["purl"])
        except ValueError:
            purl = None
    return Component(
        name=product["name"],
        version=product.get("version") or None,
        type=ComponentType.APPLICATION,
        bom_ref=product["bom_ref"],
        purl=purl,
        cpe=product.get("cpe") or None,
    )


def _bom(meta: dict[str, Any]) -> Bom:
    bom = Bom(serial_number=uuid.UUID(meta["serial"]))
    product = meta.get("product")
    if product:
        bom.metadata.component = _product(product)
    chain = meta.get("audit_chain") or {}
    props = {
        "trustrank:project_version": (product or {}).get("uuid"),
        "trustrank:sbom": (product or {}).get("sbom"),
        "trustrank:audit_head_digest": chain.get("head_digest"),
        "trustrank:export_id": meta.get("export_id"),
        "trustrank:team": meta.get("team", {}).get("name"),
        "trustrank:filter": orjson.dumps(meta.get("filter") or {}).decode(),
        "trustrank:as_of": meta.get("as_of"),
        "trustrank:ranking_run": meta.get("ranking_run"),
        "trustrank:ranks": meta.get("ranks"),
        "trustrank:notes": " | ".join(meta.get("notes") or []),
        "trustrank:audit_chain": orjson.dumps(meta.get("audit_chain") or {}).decode(),
    }
    bom.metadata.properties = [
        Property(name=k, value=str(v)) for k, v in props.items() if v not in (None, "")
    ]
    return bom


def cyclonedx_vex_chunks(
    rows: Iterable[dict[str, Any]], meta: dict[str, Any], progress: Progress | None = None
) -> Iterator[bytes]:
    meta = {**meta, "serial": meta.get("serial") or str(uuid.uuid4())}
    # The product's bom-ref is taken: a component that shares it is the product itself.
    seen: set[str] = {str((meta.get("product") or {}).get("bom_ref") or "")}
    done = 0
    header_sent = False
    first_vuln = True
    vulns_only = (r for r in rows if r["kind"] == FindingKind.VULNERABILITY)
    with tempfile.SpooledTemporaryFile(max_size=4 * 1024 * 1024) as components:
        first_component = True
        while True:
            chunk = list(islice(vulns_only, CHUNK_FINDINGS))
            if not chunk and header_sent:
                break
            bom = _bom(meta)
            for row in chunk:
                ref = component_ref(row)
                if ref not in seen:
                    seen.add(ref)
                    bom.components.add(_component(row, ref))
                bom.vulnerabilities.add(_vulnerability(row, ref))
            with warnings.catch_warnings():
                # The library asks for the product's dependency graph; a VEX document states
                # analyses, the graph is the SBOM's (metadata.properties trustrank:sbom).
                warnings.filterwarnings("ignore", "The Component this BOM is describing")
                text = JsonV1Dot6(bom).output_as_string()
            validate_cyclonedx(text)
            doc = orjson.loads(text)
            if not header_sent:
                head = {
                    k: v for k, v in doc.items() if k not in ("components", "vulnerabilities")
                }
                yield orjson.dumps(head)[:-1] + b',"vulnerabilities":['
                header_sent = True
            parts = []
            for v in doc.get("vulnerabilities", []):
                parts.append(orjson.dumps(v) if first_vuln else b"," + orjson.dumps(v))
                first_vuln = False
            if parts:
                yield b"".join(parts)
            for c in doc.get("components", []):
                components.write(orjson.dumps(c) if first_component else b"," + orjson.dumps(c))
                first_component = False
            done += len(chunk)
            if progress is not None:
                progress(done)
            if not chunk:
                break
        yield b'],"components":['
        components.seek(0)
        while block := components.read(64 * 1024):
            yield block
        yield b"]}\n"
