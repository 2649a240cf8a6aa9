"""From a component's package URL to the OSV ecosystem and package name that advisories use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from packageurl import PackageURL

# purl type -> OSV ecosystem (https://ossf.github.io/osv-schema/#defined-ecosystems).
PURL_TYPE_TO_ECOSYSTEM: dict[str, str] = {
    "pypi": "PyPI",
    "npm": "npm",
    "maven": "Maven",
    "golang": "Go",
    "cargo": "crates.io",
    "nuget": "NuGet",
    "gem": "RubyGems",
    "composer": "Packagist",
    "hex": "Hex",
    "pub": "Pub",
    "hackage": "Hackage",
    "cran": "CRAN",
    "swift": "SwiftURL",
    "apk": "Alpine",
}
# deb purls name the distribution in their namespace.
DEB_NAMESPACE_TO_ECOSYSTEM = {"debian": "Debian", "ubuntu": "Ubuntu"}

_PEP503 = re.compile(r"[-_.]+")


@dataclass(frozen=True, slots=True)
class PackageKey:
    """An OSV package identity: base ecosystem (no release suffix) and normalised name."""

    ecosystem: str
    name: str


@dataclass(frozen=True, slots=True)
class ComponentPackage:
    key: PackageKey
    version: str
    # The distribution release a purl states (Debian "11", Alpine "v3.16"), or "".
    release: str = ""


def normalize_name(ecosystem: str, name: str) -> str:
    """Names as each ecosystem compares them, so purl and advisory spellings meet."""
    if ecosystem == "PyPI":
        # PEP 503: runs of -, _ and . are equivalent and case does not matter.
        return _PEP503.sub("-", name).lower()
    if ecosystem in ("NuGet", "Packagist", "Hex", "Pub"):
        return name.lower()
    return name


@lru_cache(maxsize=4096)
def split_ecosystem(ecosystem: str) -> tuple[str, str]:
    """'Debian:11' -> ('Debian', '11'); 'Alpine:v3.16' -> ('Alpine', 'v3.16');
    'Maven' -> ('Maven', '').

    Maven and Packagist may carry a repository URL after the colon; it is not a release.
    """
    base, _, suffix = ecosystem.partition(":")
    if base in ("Maven", "Packagist"):
        return base, ""
    return base, suffix


def advisory_package_key(*, ecosystem: str, name: str) -> PackageKey:
    return _advisory_package_key(ecosystem, name)


@lru_cache(maxsize=262144)
def _advisory_package_key(ecosystem: str, name: str) -> PackageKey:
    base, _ = split_ecosystem(ecosystem)
    return PackageKey(base, normalize_name(base, name))


def _distro_release(ecosystem: str, qualifiers: dict[str, str]) -> str:
    distro = qualifiers.get("distro", "")
    if not distro:
        return ""
    # syft writes distro=debian-11 / alpine-3.16.2; others write just the version.
    version = distro.rsplit("-", 1)[-1] if "-" in distro else distro
    if ecosystem == "Alpine":
        parts = version.lstrip("v").split(".")
        return "v" + ".".join(parts[:2]) if len(parts) >= 2 else ""
    if ecosystem == "Debian":
        return version.split(".")[0]
    return version


@lru_cache(maxsize=65536)
def component_package(purl: str) -> ComponentPackage | None:
    """The OSV package a purl denotes, or None when the purl is absent, invalid or of a type
    no OSV ecosystem covers (generic, github, docker…)."""
    if not purl or not purl.startswith("pkg:"):
        return None
    try:
        parsed = PackageURL.from_string(purl)
    except ValueError:
        return None
    purl_type = parsed.type.lower()
    namespace = parsed.namespace or ""
    name = parsed.name or ""
    qualifiers = dict(parsed.qualifiers or {})
    if purl_type == "deb":
        ecosystem = DEB_NAMESPACE_TO_ECOSYSTEM.get(namespace.lower())
        if ecosystem is None:
            return None
        # OSV Debian records name the source package; syft records it as upstream=src(ver).
        upstream = qualifiers.get("upstream", "")
        package = upstream.split("@")[0].split(" ")[0].split("(")[0] if upstream else name
    else:
        ecosystem = PURL_TYPE_TO_ECOSYSTEM.get(purl_type)
        if ecosystem is None:
            return None
        if ecosystem == "Maven":
            if not namespace:
                return None
            package = f"{namespace}:{name}"
        elif ecosystem in ("npm", "Packagist", "Go", "SwiftURL"):
            package = f"{namespace}/{name}" if namespace else name
        elif ecosystem == "Alpine":
            package = qualifiers.get("origin") or name
        else:
            package = name
    version = parsed.version or ""
    return ComponentPackage(
        key=PackageKey(ecosystem, normalize_name(ecosystem, package)),
        version=version,
        release=_distro_release(ecosystem, qualifiers),
    )
