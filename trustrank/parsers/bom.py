"""The parsed SBOM every format gives (CycloneDX in `cyclonedx`, SPDX in `spdx`): plain
frozen data, no database access."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trustrank.parsers.cyclonedx_vulns import EmbeddedVulnerability


class BomError(ValueError):
    """The document is not an acceptable SBOM; the message says why and where."""


@dataclass(frozen=True, slots=True)
class ParsedComponent:
    name: str
    bom_ref: str = ""
    parent_ref: str = ""
    type: str = ""
    group: str = ""
    version: str = ""
    purl: str = ""
    cpe: str = ""
    hashes: dict[str, str] = field(default_factory=dict)
    licenses: tuple[str, ...] = ()
    supplier: str = ""
    scope: str = ""
    # Code packages the component says it holds (`cyclonedx_packages`).
    packages: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ParsedService:
    """A service the BOM declares (CycloneDX `services`); nested services are flattened."""

    name: str
    bom_ref: str = ""
    group: str = ""
    version: str = ""
    endpoints: tuple[str, ...] = ()
    authenticated: bool | None = None
    trust_boundary: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "bom_ref": self.bom_ref,
            "group": self.group,
            "name": self.name,
            "version": self.version,
            "endpoints": list(self.endpoints),
            "authenticated": self.authenticated,
            "trust_boundary": self.trust_boundary,
        }


@dataclass(frozen=True, slots=True)
class ParsedBom:
    format: str
    spec_version: str
    serial_number: str
    version: int
    timestamp: datetime | None
    tools: tuple[dict[str, str], ...]
    described_component: dict[str, Any]
    components: tuple[ParsedComponent, ...]
    dependencies: tuple[tuple[str, str], ...]
    vulnerability_count: int
    services: tuple[ParsedService, ...] = ()
    # The embedded VDR/VEX, parsed in the same pass. A malformed vulnerability section does
    # not refuse the BOM (its inventory is still good): it is left out and explained here.
    vulnerabilities: tuple[EmbeddedVulnerability, ...] = ()
    vulnerabilities_error: str = ""
    # Problems in the document that do not spoil its inventory (an SPDX field TrustRank does
    # not read, in a form the specification does not allow): kept and shown, not refused.
    warnings: tuple[str, ...] = ()
