"""The code packages a CycloneDX component says it holds (Java packages, Python modules).

Library evidence in traces names code (`code.namespace org.h2.jdbc.JdbcConnection`); a BOM
that lists the packages of each component lets the ranking map that code to the component
exactly (`trustrank.risk.libraries`, before any general index). Read from, in any order:

- the property `Namespaces` (cdxgen with `--deep`/evidence: the component's class names,
  one per line) and TrustRank's own `trustrank:packages` (package names, separated by
  newlines, commas or spaces);
- `evidence.callstack.frames[].package` (CycloneDX 1.5+): the package of each frame;
- `evidence.occurrences[].location` that ends in `.class` (a class file inside the jar or
  the image: `org/h2/jdbc/JdbcConnection.class`, `app.jar!/BOOT-INF/classes/...`).

`evidence.identity` is not read: its methods say how the component's *identity* (its
purl, name, hashes) was concluded, not which code it holds. Class names are cut to their
package at the first capitalised segment; a package under another one of the same
component is dropped (the shorter prefix already matches it). At most `MAX_PACKAGES`
per component.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

MAX_PACKAGES = 500
PROPERTY_NAMES = ("Namespaces", "trustrank:packages")
_NAME = re.compile(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*$")
_CLASS_ROOTS = ("BOOT-INF/classes/", "WEB-INF/classes/")


def _package(dotted: str) -> str:
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part[:1].isupper():
            return ".".join(parts[:i])
    return dotted


def _from_class_path(location: str) -> str:
    path = location.rsplit("!/", 1)[-1].replace("\\", "/")
    for root in _CLASS_ROOTS:
        if root in path:
            path = path.split(root, 1)[1]
    return path.rpartition("/")[0].replace("/", ".")


def _from_property(name: str, value: str) -> Iterator[str]:
    for item in re.split(r"[\s,]+", value):
        if item:
            yield _package(item) if name == "Namespaces" else item


def normalise(names: Iterable[str]) -> tuple[str, ...]:
    """Valid dotted names, deduplicated, with any name under another one dropped."""
    kept = sorted({n for n in names if n and len(n) <= 512 and _NAME.match(n)})
    out: list[str] = []
    for name in kept:  # sorted: a package comes before the ones under it
        if out and (name == out[-1] or name.startswith(out[-1] + ".")):
            continue
        out.append(name)
        if len(out) == MAX_PACKAGES:
            break
    return tuple(out)


def packages_from_json(comp: dict[str, Any]) -> tuple[str, ...]:
    names: list[str] = []
    for prop in comp.get("properties") or ():
        if isinstance(prop, dict) and prop.get("name") in PROPERTY_NAMES:
            names.extend(_from_property(prop["name"], str(prop.get("value") or "")))
    evidence = comp.get("evidence")
    if isinstance(evidence, dict):
        callstack = evidence.get("callstack")
        if isinstance(callstack, dict):
            for frame in callstack.get("frames") or ():
                if isinstance(frame, dict) and frame.get("package"):
                    names.append(str(frame["package"]))
        for occ in evidence.get("occurrences") or ():
            location = occ.get("location", "") if isinstance(occ, dict) else ""
            if isinstance(location, str) and location.endswith(".class"):
                names.append(_from_class_path(location))
    return normalise(names)


def packages_from_xml(comp: Any, ns: dict[str, str]) -> tuple[str, ...]:
    names: list[str] = []
    for prop in comp.iterfind("c:properties/c:property", ns):
        name = prop.get("name")
        if name in PROPERTY_NAMES:
            names.extend(_from_property(name, prop.text or ""))
    for package in comp.iterfind("c:evidence/c:callstack/c:frames/c:frame/c:package", ns):
        names.append((package.text or "").strip())
    for location in comp.iterfind("c:evidence/c:occurrences/c:occurrence/c:location", ns):
        text = (location.text or "").strip()
        if text.endswith(".class"):
            names.append(_from_class_path(text))
    return normalise(names)
