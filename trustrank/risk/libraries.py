"""Library evidence → component keys: which code a span names, as SBOM component keys.

Telemetry names code, SBOMs name packages. The rules, in the order they are tried:

- instrumentation scope names
  - Java agent `io.opentelemetry.<lib>-<ver>` (`io.opentelemetry.log4j-context-data-2.17`):
    the version suffix is dropped and `<lib>` is looked up in `java_scope`, then its
    shorter dash-prefixes (`log4j-context-data`, `log4j-context`, `log4j`);
  - Python `opentelemetry.instrumentation.<lib>`: `python_scope`, else `pkg:pypi/<lib>`
    with the name normalised as PyPI does (PEP 503);
  - JS `@opentelemetry/instrumentation-<lib>`: `js_scope`, else `pkg:npm/<lib>`;
- `code.namespace`: first the packages the service's own SBOM names for its components
  (`sbom_packages`, see below); then a Java class (a dotted name with a capitalised segment
  or a reverse-domain first segment) is matched by the longest package prefix in
  `java_package` and in the generated index of real jars (`data/java_packages.json.gz`,
  made by `scripts/gen_package_index.py`): the longer prefix wins, so
  `org.springframework.boot.autoconfigure.web.servlet.error.BasicErrorController` names
  `spring-boot-autoconfigure`, not the `org.springframework` group; when the table's hit is
  an artifact and the index's one as deep or deeper, both are kept (one package shipped by two
  artifacts: Debian's `tomcat-catalina`, Maven Central's `tomcat-embed-core`). Otherwise
  the top module of a Python dotted name is looked up in `python_module` (longest dotted
  prefix first), else `pkg:pypi/<module>`; standard-library modules map to nothing;
- stack frames in span `exception` events, as the trace aggregation records them (kinds
  `java_frame`, `python_frame`, `js_frame`; see `trustrank.parsers.stackframes`): a Java
  frame `org.apache.logging.log4j.core.Logger.log` through the Java package rules only
  (an unlisted package names nothing: a Maven group cannot be guessed from a package); a
  Python frame `requests.sessions.request` (the module under site-packages) through the
  Python module rules; a JS frame `express/lib/router/index.js` (the path below
  node_modules) gives `pkg:npm/express` (`pkg:npm/%40scope/name` for `@scope/name/...`).
  The evidence reads `exception frame <frame>`. `map_stacktrace` reads a whole trace text
  with the same rules.

A key may name a whole Maven group (`pkg:maven/org.apache.logging.log4j`): it says some
artifact of the group runs, not which, and the ranking reads it as "unknown" for the
group's components, never as "observed" (`trustrank.risk.factors`). Table hits are high
confidence; a package the index gives to several artifacts and names derived by the
fallbacks are medium.

`sbom_packages` (package prefix → component keys, from the components of the service's
deployed SBOMs that list their packages; `trustrank.parsers.cyclonedx`) is tried before
every table for `code.namespace` and stack frames: a BOM that says which packages a
component holds knows better than any general index. `RankSettings.library_map` holds extra rules as
`(table, name, key)`; several rules for one `(table, name)` accumulate, and an empty key
maps that name to nothing.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from trustrank.risk.inputs import Confidence, ObservedComponent

TABLES = ("java_scope", "java_package", "python_scope", "python_module", "js_scope")
LibraryMap = Mapping[str, Mapping[str, tuple[str, ...]]]
# Package prefix -> component keys named by the service's own SBOM.
SbomPackages = Mapping[str, tuple[str, ...]]

_JAVA_SCOPE = re.compile(r"^io\.opentelemetry\.([a-z0-9][a-z0-9.-]*?)(?:-\d+(?:\.\d+)*)?$")
_PY_SCOPE = "opentelemetry.instrumentation."
_JS_SCOPE = "@opentelemetry/instrumentation-"
_JAVA_FRAME = re.compile(r"^\s*at\s+(?:[\w.$]+/)?([\w$]+(?:\.[\w$]+)+)\.[\w$<>]+\(", re.M)
_PY_FRAME = re.compile(r'File "[^"]*?[/\\](?:site|dist)-packages[/\\]([A-Za-z_][\w]*)')
_NODE_FRAME = re.compile(r"node_modules/((?:@[\w.-]+/)?[\w.-]+)/")
_REVERSE_DOMAIN = frozenset({"org", "com", "io", "net", "edu", "gov", "javax", "jakarta"})
_STDLIB = frozenset(sys.stdlib_module_names)


@dataclass(frozen=True, slots=True)
class LibraryMatch:
    component_key: str
    evidence: str
    confidence: Confidence


@cache
def _default_map() -> dict[str, dict[str, tuple[str, ...]]]:
    text = resources.files("trustrank.risk").joinpath("data", "library_map.json").read_text()
    raw = json.loads(text)
    return {t: {k: tuple(v) for k, v in raw.get(t, {}).items()} for t in TABLES}


@cache
def java_package_index() -> dict[str, tuple[str, ...]]:
    """The generated index (`data/java_packages.json.gz`): package prefix → Maven component
    keys (`pkg:maven/<groupId>/<artifactId>`)."""
    raw = resources.files("trustrank.risk").joinpath("data", "java_packages.json.gz").read_bytes()
    doc = json.loads(gzip.decompress(raw))
    return {
        prefix: tuple(f"pkg:maven/{c.replace(':', '/', 1)}" for c in coords)
        for prefix, coords in doc["packages"].items()
    }


@cache
def library_map(overrides: tuple[tuple[str, str, str], ...] = ()) -> LibraryMap:
    """The default rules with `overrides` applied: rules named in the overrides replace
    the default rules for that name."""
    base = _default_map()
    replaced: dict[tuple[str, str], list[str]] = {}
    for table, name, key in overrides:
        if table not in TABLES:
            raise ValueError(f"unknown library map table {table!r}; expected one of {TABLES}")
        keys = replaced.setdefault((table, name), [])
        if key:
            keys.append(key)
    merged = {t: dict(rules) for t, rules in base.items()}
    for (table, name), keys in replaced.items():
        merged[table][name] = tuple(keys)
    return merged


def component_key_from_purl(purl: str) -> str:
    """`pkg:maven/g/a@1.0?type=jar#x` → `pkg:maven/g/a`; npm `@scope` spelled `%40scope`
    so keys from SBOMs and from evidence compare equal."""
    key = purl.split("#", 1)[0].split("?", 1)[0]
    head, _, last = key.rpartition("/")
    if "@" in last:
        last = last.split("@", 1)[0]
    key = f"{head}/{last}" if head else last
    return key.replace("/@", "/%40")


def component_matches(component_key: str, observed_key: str) -> bool:
    """An observed key matches the component itself or a group that contains it."""
    return component_key == observed_key or component_key.startswith(observed_key + "/")


def _pypi(name: str) -> str:
    return "pkg:pypi/" + re.sub(r"[-_.]+", "-", name).lower()


def _package_parts(fqn: str) -> list[str]:
    parts = fqn.split(".")
    # Cut at the first class segment: packages are lower case by convention.
    for i, part in enumerate(parts):
        if part[:1].isupper():
            return parts[:i]
    return parts


def _longest(table: Mapping[str, tuple[str, ...]], parts: list[str]) -> tuple[
        int, tuple[str, ...] | None]:
    for n in range(len(parts), 0, -1):
        keys = table.get(".".join(parts[:n]))
        if keys is not None:
            return n, keys
    return 0, None


def _is_group(key: str) -> bool:
    return key.startswith("pkg:maven/") and key.count("/") == 1


def _sbom_package(dotted: str, sbom: SbomPackages | None, evidence: str) -> list[
        LibraryMatch] | None:
    if not sbom:
        return None
    n, keys = _longest(sbom, dotted.split("."))
    if keys is None:
        return None
    package = ".".join(dotted.split(".")[:n])
    return [LibraryMatch(k, f"{evidence} (package {package} listed in the SBOM)", "high")
            for k in keys]


def _java_package(fqn: str, rules: LibraryMap, evidence: str,
                  sbom: SbomPackages | None = None) -> list[LibraryMatch] | None:
    """Matches of the SBOM's own packages, else of the longest listed package prefix (the
    table's or the generated index's); None when no prefix is listed (an empty list means a
    listed prefix that maps to nothing, such as the JDK's)."""
    found = _sbom_package(fqn, sbom, evidence)
    if found is not None:
        return found
    parts = _package_parts(fqn)
    n_table, table_keys = _longest(rules["java_package"], parts)
    n_index, index_keys = _longest(java_package_index(), parts)
    if index_keys is None or n_index < n_table:
        if table_keys is None:
            return None
        return [LibraryMatch(k, evidence, "high") for k in table_keys]
    conf: Confidence = "high" if len(index_keys) == 1 else "medium"
    keys = list(index_keys)
    keys += [k for k in table_keys or () if not _is_group(k) and k not in keys]
    return [LibraryMatch(k, evidence, conf) for k in keys]


def _python_module(dotted: str, rules: LibraryMap, evidence: str) -> list[LibraryMatch]:
    parts = dotted.split(".")
    table = rules["python_module"]
    for n in range(len(parts), 0, -1):
        keys = table.get(".".join(parts[:n]))
        if keys is not None:
            return [LibraryMatch(k, evidence, "high") for k in keys]
    top = parts[0]
    if not top or top in _STDLIB or top.startswith("_"):
        return []
    return [LibraryMatch(_pypi(top), evidence, "medium")]


def _looks_java(dotted: str) -> bool:
    parts = dotted.split(".")
    return len(parts) > 2 and (
        parts[0] in _REVERSE_DOMAIN or any(p[:1].isupper() for p in parts[1:])
    )


def map_scope(*, name: str, rules: LibraryMap | None = None) -> tuple[LibraryMatch, ...]:
    """Component keys named by an instrumentation scope name."""
    rules = rules or library_map()
    evidence = f"scope {name}"
    m = _JAVA_SCOPE.match(name)
    if m:
        lib = m.group(1)
        table = rules["java_scope"]
        pieces = lib.split("-")
        for n in range(len(pieces), 0, -1):
            keys = table.get("-".join(pieces[:n]))
            if keys is not None:
                return tuple(LibraryMatch(k, evidence, "high") for k in keys)
        return ()
    if name.startswith(_PY_SCOPE):
        lib = name[len(_PY_SCOPE) :].split(".", 1)[0]
        keys = rules["python_scope"].get(lib)
        if keys is not None:
            return tuple(LibraryMatch(k, evidence, "high") for k in keys)
        return tuple(_python_module(lib, rules, evidence))
    if name.startswith(_JS_SCOPE):
        lib = re.sub(r"-\d+$", "", name[len(_JS_SCOPE) :])
        keys = rules["js_scope"].get(lib)
        if keys is not None:
            return tuple(LibraryMatch(k, evidence, "high") for k in keys)
        return (LibraryMatch("pkg:npm/" + lib, evidence, "medium"),)
    return ()


def map_code_namespace(*, name: str, rules: LibraryMap | None = None,
                       sbom: SbomPackages | None = None) -> tuple[LibraryMatch, ...]:
    """Component keys named by a `code.namespace` value (Java class or Python module)."""
    rules = rules or library_map()
    evidence = f"code.namespace {name}"
    from_sbom = _sbom_package(name, sbom, evidence)
    if from_sbom is not None:
        return tuple(from_sbom)
    if _looks_java(name):
        found = _java_package(name, rules, evidence)
        if found is not None:
            return tuple(found)
        if name.split(".")[0] in _REVERSE_DOMAIN:
            return ()
    return tuple(_python_module(name, rules, evidence))


def map_stacktrace(*, text: str, rules: LibraryMap | None = None,
                   sbom: SbomPackages | None = None) -> tuple[LibraryMatch, ...]:
    """Component keys named by the frames of an `exception.stacktrace`; one match per key,
    from its first frame."""
    rules = rules or library_map()
    found: dict[str, LibraryMatch] = {}
    for m in _JAVA_FRAME.finditer(text):
        for hit in _java_package(m.group(1), rules, f"stack frame at {m.group(1)}",
                                 sbom) or ():
            found.setdefault(hit.component_key, hit)
    for m in _PY_FRAME.finditer(text):
        module = m.group(1)
        for hit in _python_module(module, rules, f"stack frame in {module}"):
            found.setdefault(hit.component_key, hit)
    for m in _NODE_FRAME.finditer(text):
        name = m.group(1).replace("@", "%40", 1)
        found.setdefault(
            "pkg:npm/" + name, LibraryMatch("pkg:npm/" + name, f"stack frame in {name}", "medium")
        )
    return tuple(found.values())


FRAME_KINDS = ("java_frame", "python_frame", "js_frame")


def map_frame(*, kind: str, name: str, rules: LibraryMap | None = None,
              sbom: SbomPackages | None = None) -> tuple[LibraryMatch, ...]:
    """Component keys named by one recorded stack frame (`kind` one of FRAME_KINDS)."""
    rules = rules or library_map()
    evidence = f"exception frame {name}"
    if kind == "java_frame":
        return tuple(_java_package(name, rules, evidence, sbom) or ())
    if kind == "python_frame":
        return tuple(_sbom_package(name, sbom, evidence) or _python_module(name, rules,
                                                                           evidence))
    if kind == "js_frame":
        parts = name.split("/")
        package = "/".join(parts[:2]) if name.startswith("@") else parts[0]
        if not package or package.startswith("."):
            return ()
        key = "pkg:npm/" + package.replace("@", "%40", 1)
        return (LibraryMatch(key, evidence, "medium"),)
    return ()


def map_evidence(
    *, kind: str, name: str, rules: LibraryMap | None = None, sbom: SbomPackages | None = None
) -> tuple[LibraryMatch, ...]:
    """One piece of library evidence as stored by the runtime app (`kind` is `scope`,
    `code`, `exception` or a frame kind). Database, messaging and RPC *system* names (`postgresql`,
    `kafka`) name the server, not a client library, and map to nothing."""
    if kind == "scope":
        return map_scope(name=name, rules=rules)
    if kind == "code":
        return map_code_namespace(name=name, rules=rules, sbom=sbom)
    if kind == "exception":
        return map_stacktrace(text=name, rules=rules, sbom=sbom)
    if kind in FRAME_KINDS:
        return map_frame(kind=kind, name=name, rules=rules, sbom=sbom)
    return ()


Evidence = tuple[str, str, float] | tuple[str, str, float, float | None, float | None]


def observed_components(
    *,
    evidence: Iterable[Evidence],
    rules: LibraryMap | None = None,
    sbom: SbomPackages | None = None,
) -> tuple[ObservedComponent, ...]:
    """Fold `(kind, name, calls_per_minute[, recent_per_minute, peak_per_minute])` evidence
    rows of one service into observed components: rates add up per key (the last hour's
    and the peak too, when every row has them: the peak of a sum is at most the sum of
    the peaks); the evidence named is the one with the highest rate (ties: the smallest
    name), so the explanation shows what mattered most."""
    rules = rules or library_map()
    rate: dict[str, float] = {}
    recent: dict[str, float | None] = {}
    peak: dict[str, float | None] = {}
    best: dict[str, tuple[float, str]] = {}
    for row in evidence:
        kind, name, per_minute = row[0], row[1], row[2]
        row_recent = row[3] if len(row) > 3 else None  # type: ignore[misc]
        row_peak = row[4] if len(row) > 4 else None  # type: ignore[misc]
        for hit in map_evidence(kind=kind, name=name, rules=rules, sbom=sbom):
            key = hit.component_key
            first = key not in rate
            rate[key] = rate.get(key, 0.0) + per_minute
            old_recent, old_peak = recent.get(key), peak.get(key)
            recent[key] = None if row_recent is None or (old_recent is None and not first) \
                else (old_recent or 0.0) + row_recent
            peak[key] = None if row_peak is None or (old_peak is None and not first) \
                else (old_peak or 0.0) + row_peak
            current = best.get(key)
            if current is None or (-per_minute, hit.evidence) < (-current[0], current[1]):
                best[key] = (per_minute, hit.evidence)
    return tuple(
        ObservedComponent(
            component_key=k, calls_per_minute=round(rate[k], 4), evidence=best[k][1],
            recent_calls_per_minute=_round(recent[k]), peak_calls_per_minute=_round(peak[k]),
        )
        for k in sorted(rate)
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
