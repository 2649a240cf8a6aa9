"""SPDX SBOMs: SPDX 2.2 / 2.3 JSON (`spdx2`, with spdx-tools) and SPDX 3.0.1 JSON-LD (`spdx3`),
given as bytes, parsed into the same `ParsedBom` as a CycloneDX BOM (`spdx_graph` documents
how packages and relationships map)."""

from __future__ import annotations

import re
from typing import Any

import orjson

from trustrank.parsers.bom import ParsedBom
from trustrank.parsers.spdx3 import context_version, read_spdx3
from trustrank.parsers.spdx_graph import SpdxError, bom_from_read

__all__ = ["SpdxError", "is_spdx", "parse_spdx", "spdx_kind"]

# A JSON escape of NUL: PostgreSQL stores no NUL in text, so such a document would be
# accepted with 202 and then fail in the worker (as for CycloneDX).
_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
_BOM = b"\xef\xbb\xbf"


def spdx_kind(doc: Any) -> str:
    """"2" for an SPDX 2.x JSON document (it has `spdxVersion`), "3" for SPDX 3 JSON-LD (its
    `@context` names spdx.org/rdf/3…), "" for anything else."""
    if not isinstance(doc, dict):
        return ""
    if "spdxVersion" in doc:
        return "2"
    if context_version(doc):
        return "3"
    return ""


def is_spdx(data: bytes) -> bool:
    """Whether the bytes are an SPDX JSON document (of any version, valid or not): decides
    which parser an upload goes to when its content type does not say."""
    head = data[:1024].lstrip(_BOM + b" \t\r\n")
    if not head.startswith(b"{"):
        return False
    # The markers may sit anywhere (keys sorted alphabetically put spdxVersion last); only
    # a document that names one of them is decoded here.
    if b'"spdxVersion"' not in data and b"spdx.org/rdf/3" not in data:
        return False
    try:
        doc = orjson.loads(data.removeprefix(_BOM))
    except orjson.JSONDecodeError:
        return False
    return bool(spdx_kind(doc))


def parse_spdx(data: bytes) -> ParsedBom:
    """Validate and parse an SPDX document; SpdxError (a BomError) says what is wrong."""
    try:
        doc = orjson.loads(data.removeprefix(_BOM))
    except orjson.JSONDecodeError as exc:
        raise SpdxError(f"the body is not valid JSON: {exc}") from exc
    if _JSON_NUL.search(data):
        raise SpdxError("the document contains a NUL character (\\u0000), which cannot be stored")
    kind = spdx_kind(doc)
    if kind == "2":
        # Imported on first use: spdx-tools and the licence list it loads add about 0.6 s to
        # the start of every web and worker process, most of which never see SPDX 2.
        from trustrank.parsers.spdx2 import read_spdx2

        read = read_spdx2(doc)
    elif kind == "3":
        read = read_spdx3(doc)
    else:
        raise SpdxError(
            'not an SPDX document: the JSON has neither "spdxVersion" (SPDX 2.x) nor an '
            '"@context" naming https://spdx.org/rdf/3.0.1/spdx-context.jsonld (SPDX 3)'
        )
    return bom_from_read(read)
