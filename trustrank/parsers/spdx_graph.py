"""SPDX documents (2.x and 3.0) as the same `ParsedBom` the CycloneDX parser gives, so matching,
ranking and exports do not know which format an SBOM came in.

Both readers (`spdx2`, `spdx3`) produce an `SpdxRead`: packages already shaped as
`ParsedComponent` (their SPDX id as `bom_ref`), the relationships as (from, type, to) and the
ids the document describes. `bom_from_read` turns that into the `ParsedBom`:

- **Root.** When the document describes exactly one package (2.x `documentDescribes` /
  `DOCUMENT DESCRIBES x` / `x DESCRIBED_BY DOCUMENT`; 3.0 `SpdxDocument.rootElement` /
  `describes`), that package is the BOM's subject, like CycloneDX `metadata.component`: it
  goes to `described_component` and is not a component (no findings on the product itself).
  Its dependency edges stay, as the metadata component's do in CycloneDX. Several described
  packages all stay components.
- **Dependency graph** (`ref` depends on `depends_on`), only between packages of the document:

  - A DEPENDS_ON B (2.x), A dependsOn B (3.0): A → B
  - B DEPENDENCY_OF / RUNTIME_DEPENDENCY_OF / PROVIDED_DEPENDENCY_OF / BUILD_DEPENDENCY_OF A;
    A hasProvidedDependency B: A → B (a build dependency of a compiled program is in it)
  - B DEV_DEPENDENCY_OF / TEST_DEPENDENCY_OF / OPTIONAL_DEPENDENCY_OF A;
    A hasOptionalDependency B: A → B, optional
  - A CONTAINS B, B CONTAINED_BY A; A contains B: A → B (an image or a bundle and its parts)
  - A STATIC_LINK / DYNAMIC_LINK B; A hasStaticLink / hasDynamicLink B: A → B
  - A HAS_PREREQUISITE B, B PREREQUISITE_FOR A; A hasPrerequisite B: A → B
  - B OPTIONAL_COMPONENT_OF A; A hasOptionalComponent B: A → B, optional
  - 3.0 LifecycleScopedRelationship with scope design, development or test: optional

  Other relationships (GENERATED_FROM, VARIANT_OF, licences, files, …) are not dependencies.
  Edges to files, snippets or other documents are dropped; duplicates are kept once.
- **Scope.** A package every path to which passes an optional edge (a test dependency and
  what only it pulls in) gets the CycloneDX scope `optional`; others keep the empty default
  (required).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from packageurl import PackageURL

from trustrank.parsers.bom import BomError, ParsedBom, ParsedComponent

FORWARD = "forward"
REVERSE = "reverse"
FORWARD_OPTIONAL = "forward-optional"
REVERSE_OPTIONAL = "reverse-optional"

EDGES_2: dict[str, str] = {
    "DEPENDS_ON": FORWARD,
    "DEPENDENCY_OF": REVERSE,
    "RUNTIME_DEPENDENCY_OF": REVERSE,
    "PROVIDED_DEPENDENCY_OF": REVERSE,
    "DEV_DEPENDENCY_OF": REVERSE_OPTIONAL,
    "TEST_DEPENDENCY_OF": REVERSE_OPTIONAL,
    "BUILD_DEPENDENCY_OF": REVERSE,
    "OPTIONAL_DEPENDENCY_OF": REVERSE_OPTIONAL,
    "CONTAINS": FORWARD,
    "CONTAINED_BY": REVERSE,
    "STATIC_LINK": FORWARD,
    "DYNAMIC_LINK": FORWARD,
    "HAS_PREREQUISITE": FORWARD,
    "PREREQUISITE_FOR": REVERSE,
    "OPTIONAL_COMPONENT_OF": REVERSE_OPTIONAL,
}

EDGES_3: dict[str, str] = {
    "dependsOn": FORWARD,
    "hasProvidedDependency": FORWARD,
    "hasOptionalDependency": FORWARD_OPTIONAL,
    "contains": FORWARD,
    "hasStaticLink": FORWARD,
    "hasDynamicLink": FORWARD,
    "hasPrerequisite": FORWARD,
    "hasOptionalComponent": FORWARD_OPTIONAL,
}

# SPDX checksum / hash algorithm names, without punctuation and upper-cased (2.x writes
# SHA256 and BLAKE2b-256, 3.0 sha256 and blake2b256), spelled as CycloneDX spells them.
_HASH_NAMES = {
    "MD5": "MD5",
    "SHA1": "SHA-1",
    "SHA256": "SHA-256",
    "SHA384": "SHA-384",
    "SHA512": "SHA-512",
    "SHA3256": "SHA3-256",
    "SHA3384": "SHA3-384",
    "SHA3512": "SHA3-512",
    "BLAKE2B256": "BLAKE2b-256",
    "BLAKE2B384": "BLAKE2b-384",
    "BLAKE2B512": "BLAKE2b-512",
    "BLAKE3": "BLAKE3",
}


class SpdxError(BomError):
    """The document is not an acceptable SPDX SBOM; the message says why and where."""


@dataclass(frozen=True, slots=True)
class SpdxRead:
    """What a reader found, before the root and the graph are worked out."""

    spec_version: str
    namespace: str
    timestamp: datetime | None
    tools: tuple[dict[str, str], ...]
    packages: tuple[ParsedComponent, ...]
    # (from, relationship type as the document spells it, to, optional-by-lifecycle)
    relationships: tuple[tuple[str, str, str, bool], ...]
    described: tuple[str, ...]
    edge_kinds: dict[str, str]
    # What is wrong in the document but tolerated (spdx_validate), "where: what".
    warnings: tuple[str, ...] = ()


def hash_name(algorithm: str) -> str:
    key = "".join(ch for ch in algorithm.upper() if ch.isalnum())
    return _HASH_NAMES.get(key, algorithm)


def purl_group(purl: str) -> str:
    """The purl's namespace (Maven groupId, npm scope…), what CycloneDX keeps as `group`."""
    if not purl:
        return ""
    with contextlib.suppress(ValueError):
        return PackageURL.from_string(purl).namespace or ""
    return ""


def bom_from_read(read: SpdxRead) -> ParsedBom:
    ids = {p.bom_ref for p in read.packages}
    described = [ref for ref in dict.fromkeys(read.described) if ref in ids]
    root = described[0] if len(described) == 1 else ""
    edges: dict[tuple[str, str], bool] = {}
    for source, kind, target, lifecycle_optional in read.relationships:
        direction = read.edge_kinds.get(kind)
        if direction is None:
            continue
        ref, dep = (source, target) if direction.startswith(FORWARD) else (target, source)
        if ref not in ids or dep not in ids or ref == dep:
            continue
        optional = direction.endswith("optional") or lifecycle_optional
        # An edge stated both ways keeps "required" if either says so.
        edges[(ref, dep)] = edges.get((ref, dep), True) and optional
    optional_only = _optional_only(edges, ids)
    components = tuple(
        replace(p, scope="optional") if p.bom_ref in optional_only else p
        for p in read.packages
        if p.bom_ref != root
    )
    return ParsedBom(
        format="spdx",
        spec_version=read.spec_version,
        serial_number=read.namespace,
        version=1,
        timestamp=read.timestamp,
        tools=read.tools,
        described_component=_summary(next(p for p in read.packages if p.bom_ref == root))
        if root
        else {},
        components=components,
        dependencies=tuple(edges),
        vulnerability_count=0,
        warnings=read.warnings,
    )


def _optional_only(edges: dict[tuple[str, str], bool], ids: set[str]) -> set[str]:
    """Packages the graph reaches from its tops (packages nothing depends on) only through an
    optional edge somewhere on every path: a test dependency's own dependencies are test-only
    too. Packages no top reaches (a cycle on its own) keep the default."""
    children: dict[str, list[tuple[str, bool]]] = {}
    for (ref, dep), optional in edges.items():
        children.setdefault(ref, []).append((dep, optional))
    tops = ids - {dep for (_, dep) in edges}

    def reach(*, required_only: bool) -> set[str]:
        seen = set(tops)
        todo = list(tops)
        while todo:
            for dep, optional in children.get(todo.pop(), ()):
                if dep not in seen and not (required_only and optional):
                    seen.add(dep)
                    todo.append(dep)
        return seen

    return reach(required_only=False) - reach(required_only=True)


def _summary(p: ParsedComponent) -> dict[str, Any]:
    values = {
        "type": p.type,
        "bom-ref": p.bom_ref,
        "group": p.group,
        "name": p.name,
        "version": p.version,
        "purl": p.purl,
    }
    return {k: v for k, v in values.items() if v}


def message_list(messages: list[str], *, limit: int = 5, width: int = 300) -> str:
    """The first few messages, each cut to a readable length, and how many were left out."""
    shown = [m if len(m) <= width else m[: width - 1] + "…" for m in messages[:limit]]
    more = len(messages) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")
