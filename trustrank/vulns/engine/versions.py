"""Version parsing per ecosystem through univers/packaging; no hand-written comparators.

`parse()` returns a comparable object or None when the string is not a valid version of that
scheme. Results are cached: the same few thousand version strings recur across advisories.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import semantic_version
from packaging import version as packaging_version
from univers import debian, gem, maven, nuget
from univers import versions as uv

# OSV ecosystem -> univers version class for ECOSYSTEM ranges.
ECOSYSTEM_SCHEMES: dict[str, type[uv.Version]] = {
    "PyPI": uv.PypiVersion,
    "npm": uv.SemverVersion,
    "Maven": uv.MavenVersion,
    "Go": uv.GolangVersion,
    "crates.io": uv.SemverVersion,
    "NuGet": uv.NugetVersion,
    "RubyGems": uv.RubygemsVersion,
    "Packagist": uv.ComposerVersion,
    "Hex": uv.SemverVersion,
    "Pub": uv.SemverVersion,
    "Debian": uv.DebianVersion,
    "Ubuntu": uv.DebianVersion,
    "Alpine": uv.AlpineLinuxVersion,
}
SEMVER = "SEMVER"
# Strict SemVer schemes: univers coerces ("1.x" -> 1.0.0), which would invent versions that
# do not exist, so these are validated strictly first.
_STRICT_SEMVER = {SEMVER, "npm", "crates.io", "Go", "Hex", "Pub"}


def scheme_for(*, ecosystem: str, range_type: str) -> str | None:
    """The comparison scheme a range uses, or None when it cannot be evaluated here."""
    if range_type == SEMVER:
        return SEMVER
    if range_type == "ECOSYSTEM" and ecosystem in ECOSYSTEM_SCHEMES:
        return ecosystem
    return None


def _semver_text(text: str) -> str:
    # SemVer 2.0 §10: build metadata does not take part in precedence (Go's "+incompatible"
    # too), and OSV allows it to be stripped; Go versions carry a "v" prefix OSV omits.
    text = text.strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    return text.split("+", 1)[0]


def _build(scheme: str, text: str) -> Any:
    if scheme in _STRICT_SEMVER:
        # Strict SemVer 2.0 precedence (semantic_version, the library univers wraps).
        return semantic_version.Version(_semver_text(text))
    if scheme == "PyPI":
        return packaging_version.Version(text)
    if scheme == "Maven":
        return maven.Version(text)
    if scheme == "NuGet":
        return nuget.Version.from_string(text)
    if scheme in ("Debian", "Ubuntu"):
        return debian.Version.from_string(text)
    if scheme == "RubyGems":
        if not gem.GemVersion.is_correct(text):
            return None
        return gem.GemVersion(text)
    # Composer and Alpine: univers' wrapper classes carry the scheme's comparison.
    return ECOSYSTEM_SCHEMES[scheme](text)


@lru_cache(maxsize=262144)
def parse(scheme: str, text: str) -> Any | None:
    """A comparable version object, or None. The objects are the schemes' own value types
    (packaging, semantic_version, univers' maven/nuget/debian/gem) rather than univers'
    attrs wrappers, whose generic comparison costs more than the comparison itself."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return _build(scheme, text)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        # InvalidVersion is a ValueError; a few tokenisers raise plain errors on odd input.
        # All mean "not a version of this scheme".
        return None
