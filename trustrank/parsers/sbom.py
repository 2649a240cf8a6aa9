"""Which parser an SBOM goes to: SPDX when the client says so (`application/spdx+json`) or
the JSON is an SPDX document, CycloneDX otherwise. Both give the same `ParsedBom` and raise a
`BomError` that says what is wrong."""

from __future__ import annotations

from trustrank.parsers.bom import ParsedBom
from trustrank.parsers.cyclonedx import parse_cyclonedx
from trustrank.parsers.spdx import is_spdx, parse_spdx

SPDX_JSON = "application/spdx+json"


def sbom_format(data: bytes, *, content_type: str = "") -> str:
    """"spdx" or "cyclonedx"."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == SPDX_JSON or is_spdx(data):
        return "spdx"
    return "cyclonedx"


def parse_sbom(data: bytes, *, content_type: str = "") -> ParsedBom:
    if sbom_format(data, content_type=content_type) == "spdx":
        return parse_spdx(data)
    return parse_cyclonedx(data)
