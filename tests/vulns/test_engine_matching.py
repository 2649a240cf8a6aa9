"""Table-driven cases for OSV "affected" evaluation; expected answers follow the OSV schema's
Evaluation pseudocode and each ecosystem's own version ordering."""

from __future__ import annotations

import pytest

from trustrank.vulns.engine.ecosystems import PackageKey, component_package
from trustrank.vulns.engine.matching import (
    AdvisoryIndex,
    AdvisoryRef,
    AffectedPackage,
    ComponentRef,
    Verdict,
    affected_from_osv,
    canonical_id,
    decide,
)

A, N, U = Verdict.AFFECTED, Verdict.NOT_AFFECTED, Verdict.UNKNOWN


def aff(
    ecosystem: str,
    events: list[dict[str, str]] | None = None,
    *,
    type: str = "ECOSYSTEM",
    versions: list[str] | None = None,
    more: list[dict] | None = None,
) -> AffectedPackage:
    ranges = []
    if events is not None:
        ranges.append({"type": type, "events": events})
    ranges.extend(more or [])
    entry = {"package": {"ecosystem": ecosystem, "name": "pkg"}, "ranges": ranges}
    if versions is not None:
        entry["versions"] = versions
    return affected_from_osv(entry)


I0 = {"introduced": "0"}

CASES = [
    # id, affected, version, expected
    # --- SEMVER basics (schema examples) ---
    ("semver-unfixed-all", aff("npm", [I0], type="SEMVER"), "0.0.1", A),
    ("semver-before-fix", aff("npm", [I0, {"fixed": "1.0.2"}], type="SEMVER"), "1.0.1", A),
    (
        "semver-fixed-is-not-affected",
        aff("npm", [I0, {"fixed": "1.0.2"}], type="SEMVER"),
        "1.0.2",
        N,
    ),
    ("semver-after-fix", aff("npm", [I0, {"fixed": "1.0.2"}], type="SEMVER"), "2.0.0", N),
    (
        "semver-introduced-inclusive",
        aff("npm", [{"introduced": "1.0.0"}, {"fixed": "1.0.2"}], type="SEMVER"),
        "1.0.0",
        A,
    ),
    (
        "semver-before-introduced",
        aff("npm", [{"introduced": "1.0.0"}, {"fixed": "1.0.2"}], type="SEMVER"),
        "0.9.9",
        N,
    ),
    (
        "semver-multi-first",
        aff(
            "npm",
            [
                {"introduced": "1.0.0"},
                {"fixed": "1.0.2"},
                {"introduced": "3.0.0"},
                {"fixed": "3.2.5"},
            ],
            type="SEMVER",
        ),
        "1.0.1",
        A,
    ),
    (
        "semver-multi-gap",
        aff(
            "npm",
            [
                {"introduced": "1.0.0"},
                {"fixed": "1.0.2"},
                {"introduced": "3.0.0"},
                {"fixed": "3.2.5"},
            ],
            type="SEMVER",
        ),
        "2.5.0",
        N,
    ),
    (
        "semver-multi-second",
        aff(
            "npm",
            [
                {"introduced": "1.0.0"},
                {"fixed": "1.0.2"},
                {"introduced": "3.0.0"},
                {"fixed": "3.2.5"},
            ],
            type="SEMVER",
        ),
        "3.2.4",
        A,
    ),
    (
        "semver-unsorted-events",
        aff(
            "npm",
            [
                {"introduced": "3.0.0"},
                {"fixed": "3.2.5"},
                {"introduced": "1.0.0"},
                {"fixed": "1.0.2"},
            ],
            type="SEMVER",
        ),
        "1.0.1",
        A,
    ),
    # --- last_affected (inclusive ceiling) ---
    ("last-affected-equal", aff("Maven", [I0, {"last_affected": "2.1.214"}]), "2.1.214", A),
    ("last-affected-above", aff("Maven", [I0, {"last_affected": "2.1.214"}]), "2.1.215", N),
    ("last-affected-below", aff("Maven", [I0, {"last_affected": "2.1.214"}]), "1.4.200", A),
    # --- limit ---
    (
        "limit-below",
        aff("npm", [{"introduced": "1.0.0"}, {"limit": "2.0.0"}], type="SEMVER"),
        "1.5.0",
        A,
    ),
    (
        "limit-equal-excluded",
        aff("npm", [{"introduced": "1.0.0"}, {"limit": "2.0.0"}], type="SEMVER"),
        "2.0.0",
        N,
    ),
    (
        "limit-star-infinity",
        aff("npm", [{"introduced": "1.0.0"}, {"limit": "*"}], type="SEMVER"),
        "99.0.0",
        A,
    ),
    (
        "limit-any-of-several",
        aff("npm", [I0, {"limit": "1.0.0"}, {"limit": "3.0.0"}], type="SEMVER"),
        "2.0.0",
        A,
    ),
    # --- explicit versions list ---
    ("versions-listed", aff("PyPI", None, versions=["1.0", "1.1"]), "1.1", A),
    ("versions-not-listed", aff("PyPI", None, versions=["1.0", "1.1"]), "1.2", N),
    ("versions-pep440-equal", aff("PyPI", None, versions=["1.0"]), "1.0.0", A),
    (
        "versions-or-range",
        aff("PyPI", [{"introduced": "2.0"}, {"fixed": "2.1"}], versions=["1.5"]),
        "1.5",
        A,
    ),
    # --- several ranges per package (any one suffices) ---
    (
        "two-ranges-second",
        aff(
            "PyPI",
            [{"introduced": "1.0"}, {"fixed": "1.1"}],
            more=[{"type": "ECOSYSTEM", "events": [{"introduced": "2.0"}, {"fixed": "2.2"}]}],
        ),
        "2.1",
        A,
    ),
    (
        "two-ranges-none",
        aff(
            "PyPI",
            [{"introduced": "1.0"}, {"fixed": "1.1"}],
            more=[{"type": "ECOSYSTEM", "events": [{"introduced": "2.0"}, {"fixed": "2.2"}]}],
        ),
        "1.5",
        N,
    ),
    # --- GIT ranges cannot be evaluated; versions list stands in ---
    (
        "git-only-uses-versions",
        aff("PyPI", [{"introduced": "a" * 40}, {"fixed": "b" * 40}], type="GIT", versions=["1.0"]),
        "1.0",
        A,
    ),
    (
        "git-only-not-listed",
        aff("PyPI", [{"introduced": "a" * 40}, {"fixed": "b" * 40}], type="GIT", versions=["1.0"]),
        "1.1",
        N,
    ),
    # --- PEP 440 ---
    ("pep440-epoch-above", aff("PyPI", [I0, {"fixed": "2.0"}]), "1!0.5", N),
    ("pep440-prerelease-before-final", aff("PyPI", [I0, {"fixed": "2.0"}]), "2.0rc1", A),
    (
        "pep440-dev-before-pre",
        aff("PyPI", [{"introduced": "2.0a1"}, {"fixed": "2.0"}]),
        "2.0.dev3",
        N,
    ),
    ("pep440-post-after-final", aff("PyPI", [I0, {"fixed": "2.0"}]), "2.0.post1", N),
    ("pep440-numeric-not-lexical", aff("PyPI", [I0, {"fixed": "1.10"}]), "1.9", A),
    ("pep440-invalid-unknown", aff("PyPI", [I0, {"fixed": "2.0"}]), "not-a-version", U),
    # --- SemVer pre-release order ---
    (
        "semver-pre-before-release",
        aff("npm", [I0, {"fixed": "1.0.0"}], type="SEMVER"),
        "1.0.0-rc.1",
        A,
    ),
    (
        "semver-pre-numeric-order",
        aff("npm", [{"introduced": "1.0.0-beta.2"}, {"fixed": "1.0.0-beta.11"}], type="SEMVER"),
        "1.0.0-beta.10",
        A,
    ),
    (
        "semver-alpha-before-beta",
        aff("npm", [{"introduced": "1.0.0-beta"}, {"fixed": "1.0.0"}], type="SEMVER"),
        "1.0.0-alpha",
        N,
    ),
    (
        "semver-build-metadata-ignored",
        aff("npm", [I0, {"fixed": "1.0.2"}], type="SEMVER"),
        "1.0.2+build.5",
        N,
    ),
    ("npm-range-x-unknown", aff("npm", [I0, {"fixed": "1.0.2"}]), "1.x", U),
    # --- Maven qualifiers ---
    ("maven-alpha-before-release", aff("Maven", [I0, {"fixed": "2.0"}]), "2.0-alpha-1", A),
    ("maven-snapshot-before-release", aff("Maven", [I0, {"fixed": "2.0"}]), "2.0-SNAPSHOT", A),
    ("maven-sp-after-release", aff("Maven", [I0, {"fixed": "2.0"}]), "2.0-sp1", N),
    ("maven-ga-equals-release", aff("Maven", [I0, {"fixed": "2.0"}]), "2.0-ga", N),
    (
        "maven-four-part",
        aff("Maven", [{"introduced": "2.9.0"}, {"fixed": "2.9.10.8"}]),
        "2.9.10.7",
        A,
    ),
    ("maven-final-qualifier", aff("Maven", [I0, {"fixed": "5.4.24.Final"}]), "5.4.2.Final", A),
    # --- Go: v prefix, pseudo-versions, +incompatible ---
    ("go-v-prefix", aff("Go", [I0, {"fixed": "1.5.1"}], type="SEMVER"), "v1.5.0", A),
    ("go-v-prefix-fixed", aff("Go", [I0, {"fixed": "1.5.1"}], type="SEMVER"), "v1.5.1", N),
    (
        "go-pseudo-before-fix",
        aff("Go", [I0, {"fixed": "0.0.0-20220314234659-1baeb1ce4c0b"}], type="SEMVER"),
        "v0.0.0-20210921155107-089bfa567519",
        A,
    ),
    (
        "go-pseudo-after-fix",
        aff("Go", [I0, {"fixed": "0.0.0-20220314234659-1baeb1ce4c0b"}], type="SEMVER"),
        "v0.0.0-20230101000000-aaaaaaaaaaaa",
        N,
    ),
    (
        "go-pseudo-prerelease-of-next",
        aff("Go", [I0, {"fixed": "1.2.3"}], type="SEMVER"),
        "v1.2.3-0.20210921155107-089bfa567519",
        A,
    ),
    (
        "go-incompatible-affected",
        aff("Go", [I0, {"fixed": "20.10.18+incompatible"}], type="SEMVER"),
        "v20.10.7+incompatible",
        A,
    ),
    (
        "go-incompatible-fixed",
        aff("Go", [I0, {"fixed": "20.10.18+incompatible"}], type="SEMVER"),
        "v20.10.18+incompatible",
        N,
    ),
    ("go-garbage-unknown", aff("Go", [I0, {"fixed": "1.0.0"}], type="SEMVER"), "master", U),
    # --- other ecosystems via univers ---
    ("nuget-prerelease", aff("NuGet", [I0, {"fixed": "4.0.0"}]), "4.0.0-beta1", A),
    (
        "rubygems-pre",
        aff("RubyGems", [{"introduced": "1.0.0"}, {"fixed": "1.0.1"}]),
        "1.0.1.pre",
        A,
    ),
    ("debian-epoch", aff("Debian:11", [I0, {"fixed": "1:2.0-1"}]), "3.0-1", A),
    ("debian-tilde", aff("Debian:9", [I0, {"fixed": "1.1.0l-1~deb9u6"}]), "1.1.0l-1~deb9u5", A),
    (
        "alpine-revision",
        aff("Alpine:v3.16", [{"introduced": "0.9.13"}, {"fixed": "1.2.3-r4"}]),
        "1.2.3-r10",
        N,
    ),
    ("packagist-v-prefix", aff("Packagist", [I0, {"fixed": "5.4.10"}]), "v5.4.9", A),
    ("crates-semver", aff("crates.io", [I0, {"fixed": "0.10.0"}]), "0.9.9", A),
    # --- no ordering known, empty version ---
    ("unknown-ecosystem-unknown", aff("Hackage", [I0, {"fixed": "1.0"}]), "0.5", U),
    ("empty-version-unknown", aff("npm", [I0, {"fixed": "1.0.0"}], type="SEMVER"), "", U),
    ("bad-advisory-version-unknown", aff("PyPI", [I0, {"fixed": "not valid!"}]), "1.0", U),
]


@pytest.mark.parametrize(
    ("affected", "version", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_osv_evaluation(affected: AffectedPackage, version: str, expected: Verdict) -> None:
    assert decide(version, affected).verdict is expected


def test_there_are_at_least_forty_cases() -> None:
    assert len(CASES) >= 40


PURLS = [
    (
        "pkg:pypi/Django_REST.framework@3.14.0",
        PackageKey("PyPI", "django-rest-framework"),
        "3.14.0",
    ),
    (
        "pkg:maven/com.fasterxml.jackson.core/jackson-databind@2.9.4?type=jar",
        PackageKey("Maven", "com.fasterxml.jackson.core:jackson-databind"),
        "2.9.4",
    ),
    ("pkg:npm/%40babel/core@7.0.0", PackageKey("npm", "@babel/core"), "7.0.0"),
    ("pkg:npm/lodash@4.17.15", PackageKey("npm", "lodash"), "4.17.15"),
    (
        "pkg:golang/github.com/labstack/echo/v4@v4.1.11",
        PackageKey("Go", "github.com/labstack/echo/v4"),
        "v4.1.11",
    ),
    ("pkg:cargo/smallvec@1.6.0", PackageKey("crates.io", "smallvec"), "1.6.0"),
    ("pkg:nuget/Newtonsoft.Json@12.0.1", PackageKey("NuGet", "newtonsoft.json"), "12.0.1"),
    ("pkg:gem/rails@5.0.0.1", PackageKey("RubyGems", "rails"), "5.0.0.1"),
    (
        "pkg:composer/laravel/framework@7.12.0",
        PackageKey("Packagist", "laravel/framework"),
        "7.12.0",
    ),
    (
        "pkg:deb/debian/libssl1.1@1.1.1n-0+deb11u3?arch=amd64&upstream=openssl&distro=debian-11",
        PackageKey("Debian", "openssl"),
        "1.1.1n-0+deb11u3",
    ),
    (
        "pkg:apk/alpine/musl@1.2.3-r0?arch=x86_64&distro=alpine-3.16.2",
        PackageKey("Alpine", "musl"),
        "1.2.3-r0",
    ),
]


@pytest.mark.parametrize(("purl", "key", "version"), PURLS, ids=[p[0].split("@")[0] for p in PURLS])
def test_purl_maps_to_osv_package(purl: str, key: PackageKey, version: str) -> None:
    pkg = component_package(purl)
    assert pkg is not None and pkg.key == key and pkg.version == version


def test_unsupported_or_invalid_purls_map_to_nothing() -> None:
    assert component_package("pkg:generic/openssl@1.1") is None
    assert component_package("not a purl") is None
    assert component_package("") is None


def test_distro_release_must_agree_when_both_state_one() -> None:
    adv = AdvisoryRef(
        id="ALPINE-1",
        aliases=(),
        affected=(
            affected_from_osv(
                {
                    "package": {"ecosystem": "Alpine:v3.16", "name": "musl"},
                    "ranges": [{"type": "ECOSYSTEM", "events": [I0, {"fixed": "1.2.3-r4"}]}],
                }
            ),
            affected_from_osv(
                {
                    "package": {"ecosystem": "Alpine:v3.17", "name": "musl"},
                    "ranges": [{"type": "ECOSYSTEM", "events": [I0, {"fixed": "1.2.3-r1"}]}],
                }
            ),
        ),
    )
    index = AdvisoryIndex.build([adv])
    on_316 = index.match_component(
        ComponentRef(1, "pkg:apk/alpine/musl@1.2.3-r2?distro=alpine-3.16.2")
    )
    on_317 = index.match_component(
        ComponentRef(2, "pkg:apk/alpine/musl@1.2.3-r2?distro=alpine-3.17.0")
    )
    assert [m.verdict for m in on_316] == [A]
    assert on_317 == []


def test_withdrawn_advisories_match_nothing() -> None:
    entry = {
        "package": {"ecosystem": "npm", "name": "lodash"},
        "ranges": [{"type": "SEMVER", "events": [I0]}],
    }
    live = AdvisoryRef(id="GHSA-live", aliases=(), affected=(affected_from_osv(entry),))
    gone = AdvisoryRef(
        id="GHSA-gone", aliases=(), affected=(affected_from_osv(entry),), withdrawn=True
    )
    matches = AdvisoryIndex.build([live, gone]).match_component(
        ComponentRef(1, "pkg:npm/lodash@1.0.0")
    )
    assert [m.advisory_id for m in matches] == ["GHSA-live"]


def test_unparseable_component_version_is_reported_unknown_not_dropped() -> None:
    entry = {
        "package": {"ecosystem": "PyPI", "name": "requests"},
        "ranges": [{"type": "ECOSYSTEM", "events": [I0, {"fixed": "2.20.0"}]}],
    }
    index = AdvisoryIndex.build(
        [AdvisoryRef(id="PYSEC-1", aliases=(), affected=(affected_from_osv(entry),))]
    )
    matches = index.match_component(ComponentRef(1, "pkg:pypi/requests@latest-and-greatest"))
    assert len(matches) == 1 and matches[0].verdict is U and "not a valid" in matches[0].reason


def test_fixed_versions_are_reported() -> None:
    entry = {
        "package": {"ecosystem": "npm", "name": "x"},
        "ranges": [
            {
                "type": "SEMVER",
                "events": [I0, {"fixed": "1.2.3"}, {"introduced": "2.0.0"}, {"fixed": "2.0.5"}],
            }
        ],
    }
    index = AdvisoryIndex.build(
        [AdvisoryRef(id="GHSA-x", aliases=(), affected=(affected_from_osv(entry),))]
    )
    (m,) = index.match_component(ComponentRef(1, "pkg:npm/x@2.0.1"))
    assert m.fixed == ("1.2.3", "2.0.5")


def test_canonical_id_prefers_the_cve() -> None:
    assert canonical_id(["GHSA-aaaa-bbbb-cccc", "CVE-2021-1234", "PYSEC-2021-9"]) == "CVE-2021-1234"
    assert canonical_id(["PYSEC-2021-9", "GHSA-aaaa-bbbb-cccc"]) == "GHSA-aaaa-bbbb-cccc"


def test_cvss_v3_and_v4_base_scores_come_from_the_cvss_library() -> None:
    from trustrank.parsers.cvss import best_score, score_vector, severity_label

    v3 = score_vector(type="CVSS_V3", vector="CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H")
    v4 = score_vector(
        type="CVSS_V4", vector="CVSS:4.0/AV:N/AC:L/AT:N/PR:H/UI:N/VC:L/VI:L/VA:N/SC:N/SI:N/SA:N"
    )
    bad = score_vector(type="CVSS_V3", vector="CVSS:3.1/AV:X")
    assert (v3.base_score, v4.base_score) == (9.8, 5.1)
    assert bad.base_score is None and "invalid CVSS vector" in bad.error
    assert best_score([v4, v3]) == 9.8 and best_score([v4]) == 5.1
    assert severity_label(9.8) == "critical" and severity_label(None, "MODERATE") == "medium"


def test_the_engine_imports_no_django() -> None:
    import subprocess
    import sys

    # The `trustrank` package itself loads the Celery app; what the engine adds must not
    # include any Django module.
    code = (
        "import sys, trustrank; before = set(sys.modules); "
        "import trustrank.vulns.engine.matching, trustrank.parsers.cyclonedx_vulns, "
        "trustrank.parsers.cvss; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] == 'django'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def test_alias_groups_join_transitively_and_keep_input_order():
    from trustrank.vulns.engine.matching import alias_groups

    items = [
        ({"GHSA-1", "CVE-1"}, "a"),
        ({"PYSEC-9"}, "b"),
        ({"OSV-2", "CVE-2"}, "c"),
        ({"CVE-1", "OSV-2"}, "d"),  # joins a and c
    ]
    assert alias_groups(items) == [
        ({"GHSA-1", "CVE-1", "OSV-2", "CVE-2"}, ["a", "c", "d"]),
        ({"PYSEC-9"}, ["b"]),
    ]


def test_alias_groups_are_not_quadratic():
    import time

    from trustrank.vulns.engine.matching import alias_groups

    items = [({f"CVE-{i}", f"GHSA-{i}"}, i) for i in range(20_000)]
    start = time.perf_counter()
    assert len(alias_groups(items)) == 20_000
    assert time.perf_counter() - start < 5
