"""SPDX 2.2 / 2.3 JSON, read and validated with spdx-tools (the SPDX project's Python library).

`spdx2_quirks` first puts right what real generators commonly get wrong in a way spdx-tools'
parser would refuse (fractional seconds in `created`, files without checksums…).
`JsonLikeDictParser` then builds the spdx-tools document model (it refuses missing required
fields and wrong types: fatal); `spdx_validate` runs that library's validators over it and
sorts their messages into fatal ones and warnings (its docstring says which are which). What
the model holds is then turned into components (`spdx_graph`), with the warnings.
"""

from __future__ import annotations

import re
from datetime import UTC
from typing import Any

from spdx_tools.spdx.model import (
    ActorType,
    Document,
    ExternalPackageRefCategory,
    Package,
    RelationshipType,
    SpdxNoAssertion,
    SpdxNone,
)
from spdx_tools.spdx.parser.error import SPDXParsingError
from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser

from trustrank.parsers.bom import ParsedComponent
from trustrank.parsers.spdx2_quirks import quirks_normalise
from trustrank.parsers.spdx_graph import (
    EDGES_2,
    SpdxError,
    SpdxRead,
    hash_name,
    message_list,
    purl_group,
)
from trustrank.parsers.spdx_validate import validation_problems

SUPPORTED_2 = ("SPDX-2.2", "SPDX-2.3")

# SPDX 2.3 primaryPackagePurpose → CycloneDX component type; the rest read as "library".
_PURPOSE_TYPES = {
    "APPLICATION": "application",
    "FRAMEWORK": "framework",
    "LIBRARY": "library",
    "CONTAINER": "container",
    "OPERATING_SYSTEM": "operating-system",
    "DEVICE": "device",
    "FIRMWARE": "firmware",
    "FILE": "file",
}


def read_spdx2(doc: dict[str, Any]) -> SpdxRead:
    version = doc.get("spdxVersion")
    if version not in SUPPORTED_2:
        raise SpdxError(
            f"unsupported spdxVersion {version!r}; supported: {', '.join(SUPPORTED_2)} "
            "(JSON) and SPDX 3.0.1 (JSON-LD)"
        )
    doc, warnings = quirks_normalise(doc)
    document = _parse(doc)
    fatal, tolerated = validation_problems(document)
    if fatal:
        raise SpdxError(f"the document is not valid {version}: " + message_list(fatal))
    warnings += tolerated
    info = document.creation_info
    described = [
        r.related_spdx_element_id
        for r in document.relationships
        if r.relationship_type == RelationshipType.DESCRIBES and r.spdx_element_id == info.spdx_id
    ] + [
        r.spdx_element_id
        for r in document.relationships
        if r.relationship_type == RelationshipType.DESCRIBED_BY
        and r.related_spdx_element_id == info.spdx_id
    ]
    if not described and len(document.packages) == 1:
        described = [document.packages[0].spdx_id]
    created = info.created
    return SpdxRead(
        spec_version=version.removeprefix("SPDX-"),
        namespace=info.document_namespace,
        timestamp=created.replace(tzinfo=UTC) if created.tzinfo is None else created,
        tools=tuple(
            {"vendor": "", "name": c.name, "version": ""}
            for c in info.creators
            if c.actor_type == ActorType.TOOL
        ),
        packages=tuple(_component(p) for p in document.packages),
        relationships=tuple(
            (r.spdx_element_id, r.relationship_type.name, str(r.related_spdx_element_id), False)
            for r in document.relationships
        ),
        described=tuple(str(d) for d in described),
        edge_kinds=EDGES_2,
        warnings=tuple(warnings),
    )


def _parse(doc: dict[str, Any]) -> Document:
    try:
        return JsonLikeDictParser().parse(doc)
    except SPDXParsingError as exc:
        raise SpdxError(
            "the document cannot be read as SPDX: "
            + message_list(list(dict.fromkeys(_readable(m) for m in exc.get_messages())))
        ) from exc
    except (TypeError, AttributeError, ValueError, KeyError, IndexError) as exc:
        # spdx-tools checks the fields it knows; a value of an unexpected JSON type in some
        # corners (a number where a list is due…) escapes as a plain Python error instead.
        raise SpdxError(
            f"the document cannot be read as SPDX: {type(exc).__name__}: {exc}"
        ) from exc


# spdx-tools reports a field of the wrong type through its type checker, in one long line
# naming internal functions: "SetterError Package: Method …set_field() parameter
# download_location="None" violates type hint …". Said shortly instead.
_SETTER = re.compile(
    r"SetterError (\w+): Method .*? parameter (\w+)=(.{0,80}?) violates type hint .*?(?=['\"]\]|$)"
)


def _readable(message: str) -> str:
    return _SETTER.sub(
        lambda m: f"{m.group(1)} {m.group(2)} cannot be {m.group(3)} "
        "(missing, or of the wrong type)",
        message,
    )


def _component(p: Package) -> ParsedComponent:
    purl = cpe = ""
    for ref in p.external_references:
        kind = ref.reference_type
        manager = ref.category == ExternalPackageRefCategory.PACKAGE_MANAGER
        if not purl and kind == "purl" and manager:
            purl = ref.locator.strip()
        elif not cpe and kind in ("cpe23Type", "cpe22Type"):
            cpe = ref.locator.strip()
    purpose = p.primary_package_purpose
    return ParsedComponent(
        name=p.name,
        bom_ref=p.spdx_id,
        type=_PURPOSE_TYPES.get(purpose.name, "library") if purpose else "library",
        group=purl_group(purl),
        version=p.version or "",
        purl=purl,
        cpe=cpe,
        hashes={hash_name(c.algorithm.name): c.value for c in p.checksums},
        licenses=tuple(
            dict.fromkeys(
                str(e)
                for e in (p.license_declared, p.license_concluded)
                if e is not None and not isinstance(e, SpdxNoAssertion | SpdxNone)
            )
        ),
        supplier=_actor_name(p.supplier) or _actor_name(p.originator),
    )


def _actor_name(actor: Any) -> str:
    if actor is None or isinstance(actor, SpdxNoAssertion):
        return ""
    return str(getattr(actor, "name", "") or "")
