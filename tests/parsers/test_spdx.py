"""SPDX 2.2 / 2.3 JSON and SPDX 3.0.1 JSON-LD into the same ParsedBom as CycloneDX: components
with purls, the dependency graph and the root, checked against the real documents in
tests/data/sbom/spdx (PROVENANCE.md); bad documents refused with what is wrong."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from trustrank.parsers.bom import BomError
from trustrank.parsers.sbom import parse_sbom, sbom_format
from trustrank.parsers.spdx import SpdxError, is_spdx, parse_spdx
from trustrank.parsers.spdx_validate import validation_messages

SPDX = Path(__file__).resolve().parent.parent / "data" / "sbom" / "spdx"
CDX = SPDX.parent / "cdx-1.6_pypi_poetry-project-56deps.json"


def read(name: str) -> bytes:
    return (SPDX / name).read_bytes()


def doc(name: str) -> dict[str, Any]:
    return orjson.loads(read(name))


def by_name(bom: Any) -> dict[str, Any]:
    return {c.name: c for c in bom.components}


def named_edges(bom: Any) -> set[tuple[str, str]]:
    names = {c.bom_ref: c.name for c in bom.components}
    names[bom.described_component["bom-ref"]] = bom.described_component["name"]
    return {(names[a], names[b]) for a, b in bom.dependencies}


# --- SPDX 2.x ---------------------------------------------------------------------------------


def test_spdx_23_packages_become_components_with_their_purls_and_the_described_one_is_the_root():
    source = doc("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")
    bom = parse_spdx(read("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json"))
    assert (bom.format, bom.spec_version) == ("spdx", "2.3")
    assert bom.serial_number == source["documentNamespace"]
    assert bom.timestamp is not None and bom.timestamp.isoformat() == "2022-11-03T07:10:10+00:00"
    assert bom.tools == ({"vendor": "", "name": "sigs.k8s.io/bom/pkg/spdx", "version": ""},)
    # Four packages; documentDescribes names one of them (and a file): that one is the root.
    assert len(source["packages"]) == 4
    assert bom.described_component == {
        "type": "library",
        "bom-ref": "SPDXRef-Package-hello-server-src",
        "group": "debian",
        "name": "hello-server-src",
        "version": "0.1.0",
        "purl": "pkg:deb/debian/libselinux1-dev@3.1-3?arch=s390x",
    }
    assert {c.purl for c in bom.components} == {
        "pkg:cargo/hyper@0.14", "pkg:cargo/tokio@1.19.2", "pkg:cargo/pretty_env_logger@0.4.0"
    }
    tokio = by_name(bom)["tokio"]
    assert tokio.version == "1.19.2" and tokio.licenses == ("MIT",)
    assert tokio.hashes == {
        "SHA-256": "c51a52ed6686dd62c320f9b89299e9dfb46f730c7a48e635c19f21d116cb1439"
    }
    # Three DEPENDS_ON from the root; GENERATED_FROM (file → package) is no dependency.
    assert named_edges(bom) == {
        ("hello-server-src", "hyper"),
        ("hello-server-src", "tokio"),
        ("hello-server-src", "pretty_env_logger"),
    }


def test_spdx_22_reverse_and_test_dependencies_point_the_graph_from_the_product():
    source = doc("spdx-2.2_maven_appbomination.spdx.json")
    bom = parse_spdx(read("spdx-2.2_maven_appbomination.spdx.json"))
    assert bom.spec_version == "2.2"
    assert bom.described_component["name"] == "App-BOM-ination"
    assert len(bom.components) == len(source["packages"]) - 1 == 6
    purls = {c.purl for c in bom.components if c.purl}
    assert purls == {
        "pkg:maven/junit/junit@4.12",
        "pkg:maven/org.hamcrest/hamcrest-core@1.3",
        "pkg:maven/org.apache.commons/commons-lang3@3.4",
        "pkg:maven/org.slf4j/slf4j-api@1.7.21",
    }
    # X DEPENDENCY_OF Y reads as Y → X; CONTAINED_BY files and METAFILE_OF are no edges.
    assert named_edges(bom) == {
        ("App-BOM-ination", "commons-lang3"),
        ("App-BOM-ination", "slf4j-api"),
        ("App-BOM-ination", "junit"),
        ("junit", "hamcrest-core"),
    }
    components = by_name(bom)
    # junit is a TEST_DEPENDENCY_OF the product, and hamcrest comes only through junit.
    assert components["junit"].scope == components["hamcrest-core"].scope == "optional"
    assert components["commons-lang3"].scope == ""
    assert components["junit"].group == "junit"
    assert components["commons-lang3"].group == "org.apache.commons"
    assert components["junit"].licenses == ("EPL-1.0",)
    assert components["junit"].hashes == {"SHA-1": "4e6be5af63e3373b4f0cbc4c151c13e059151e00"}


@pytest.mark.parametrize(
    "name", ["spdx-2.2_tools-python-example.spdx.json", "spdx-2.3_tools-python-example.spdx.json"]
)
def test_the_spdx_specification_example_parses_with_purls_hashes_and_licences(name):
    source = doc(name)
    bom = parse_spdx(read(name))
    described = source.get("documentDescribes") or [
        r["relatedSpdxElement"] for r in source["relationships"]
        if r["relationshipType"] == "DESCRIBES" and r["spdxElementId"] == "SPDXRef-DOCUMENT"
    ]
    assert bom.described_component["bom-ref"] in described
    assert len(bom.components) == len(source["packages"]) - 1
    jena = by_name(bom)["Jena"]
    assert jena.purl == "pkg:maven/org.apache.jena/apache-jena@3.12.0"
    assert jena.group == "org.apache.jena"
    saxon = by_name(bom)["Saxon"]
    assert saxon.hashes == {"SHA-1": "85ed0817af83a24ad8da68c2b5094de69833983c"}
    assert saxon.licenses == ("MPL-1.0",) and saxon.version == "8.8"
    root = next(p for p in source["packages"] if p["SPDXID"] == "SPDXRef-Package")
    assert bom.described_component["name"] == root["name"] == "glibc"


def test_the_purl_category_may_be_spelled_with_an_underscore():
    source = doc("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")
    for package in source["packages"]:
        for ref in package["externalRefs"]:
            ref["referenceCategory"] = "PACKAGE_MANAGER"
    bom = parse_spdx(orjson.dumps(source))
    assert "pkg:cargo/tokio@1.19.2" in {c.purl for c in bom.components}


def test_a_package_without_purl_is_kept_by_name_and_version():
    bom = parse_spdx(read("spdx-2.3_maven_examplemaven-enriched.spdx.json"))
    assert bom.described_component["name"] == "examplemaven"
    assert bom.components and all(c.name and not c.purl for c in bom.components)
    assert len(bom.dependencies) == len(set(bom.dependencies)) > 0


# --- SPDX 3.0.1 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("v2", "v3"),
    [
        ("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json",
         "spdx-3.0.1_cargo_k8s-bom-hello-server.spdx3.json"),
        ("spdx-2.2_maven_appbomination.spdx.json", "spdx-3.0.1_maven_appbomination.spdx3.json"),
    ],
)
def test_spdx_301_gives_the_same_inventory_as_its_spdx_2_twin(v2, v3):
    two, three = parse_spdx(read(v2)), parse_spdx(read(v3))
    assert (three.format, three.spec_version) == ("spdx", "3.0.1")
    key = lambda c: (c.name, c.version, c.purl, c.scope)  # noqa: E731
    assert sorted(map(key, three.components)) == sorted(map(key, two.components))
    assert named_edges(three) == named_edges(two)
    assert three.described_component["name"] == two.described_component["name"]
    assert three.timestamp == two.timestamp
    graph = doc(v3)["@graph"]
    assert len(three.components) == sum(e["type"] == "software_Package" for e in graph) - 1


def test_spdx_301_packages_take_purls_from_external_identifiers_and_the_sbom_root():
    """A writer may give the purl as an externalIdentifier and root the document in an Sbom."""
    source = doc("spdx-3.0.1_cargo_k8s-bom-hello-server.spdx3.json")
    graph = source["@graph"]
    for element in graph:
        if element["type"] == "software_Package":
            purl = element.pop("software_packageUrl")
            element["externalIdentifier"] = [{"type": "ExternalIdentifier",
                                              "externalIdentifierType": "packageUrl",
                                              "identifier": purl}]
    document = next(e for e in graph if e["type"] == "SpdxDocument")
    sbom_id = document["spdxId"] + "-sbom"
    graph.append({"type": "software_Sbom", "spdxId": sbom_id,
                  "creationInfo": document["creationInfo"],
                  "rootElement": document.pop("rootElement")})
    document["rootElement"] = [sbom_id]
    graph[:] = [e for e in graph if e.get("relationshipType") != "describes"]
    bom = parse_spdx(orjson.dumps(source))
    assert bom.described_component["name"] == "hello-server-src"
    assert {c.purl for c in bom.components} == {
        "pkg:cargo/hyper@0.14", "pkg:cargo/tokio@1.19.2", "pkg:cargo/pretty_env_logger@0.4.0"
    }


def test_spdx_301_licences_come_from_the_licence_relationships():
    components = by_name(parse_spdx(read("spdx-3.0.1_maven_appbomination.spdx3.json")))
    assert components["junit"].licenses == ("EPL-1.0",)
    assert components["junit"].purl == "pkg:maven/junit/junit@4.12"


# --- bad documents ----------------------------------------------------------------------------


def refused(data: bytes) -> str:
    with pytest.raises(SpdxError) as caught:
        parse_spdx(data)
    assert isinstance(caught.value, BomError)  # the loader and the receiver catch BomError
    return str(caught.value)


def test_not_json_is_refused():
    assert "not valid JSON" in refused(b"SPDXVersion: SPDX-2.3\nDataLicense: CC0-1.0\n")


def test_json_that_is_no_spdx_document_is_refused_naming_the_markers():
    message = refused(b'{"SPDXID": "SPDXRef-DOCUMENT", "packages": []}')
    assert "spdxVersion" in message and "@context" in message


def test_an_unsupported_spdx_version_is_refused():
    source = doc("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")
    message = refused(orjson.dumps({**source, "spdxVersion": "SPDX-2.1"}))
    assert "SPDX-2.1" in message and "SPDX-2.3" in message


def test_a_document_spdx_tools_cannot_read_is_refused_naming_the_field():
    message = refused(read("bad/spdx-2.2_syft-bad_example7-go-module.spdx.json"))
    assert "Package name" in message
    assert "SetterError" not in message  # the library's internals are said shortly


def test_a_package_that_contains_files_missing_from_the_document_is_refused_naming_them():
    """Syft 2022 put the fractional seconds and the files without checksums right (tolerated),
    but its package CONTAINS four files the document does not hold: an edge to nothing."""
    message = refused(read("bad/spdx-2.2_syft_alpine-3.10-dangling-contains.spdx.json"))
    assert message.startswith("the document is not valid SPDX-2.2: relationship ")
    assert 'did not find the referenced spdx_id "SPDXRef-499bb68237b0f2b8"' in message
    assert "2022-01-20T21:40:24.439211Z" not in message and "checksums" not in message


def test_an_invalid_document_is_refused_with_its_fatal_messages_and_their_elements():
    message = refused(read("bad/spdx-2.2_syft_alpine-3.10-vendor.spdx.json"))
    assert message.startswith("the document is not valid SPDX-2.2: ")
    assert 'did not find the referenced spdx_id "SPDXRef-9fb3aa2f8b"' in message
    assert "relationship SPDXRef-9fb3aa2f8b CONTAINS SPDXRef-busybox-1.30.1-r5" in message
    # An id spelled with "_" breaks no edge: a warning, not a reason to refuse.
    assert "spdx_id must only contain" not in message


def test_duplicate_spdx_ids_are_refused_naming_the_id():
    source = doc("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")
    source["packages"][2]["SPDXID"] = source["packages"][1]["SPDXID"]
    message = refused(orjson.dumps(source))
    assert "must be unique" in message and source["packages"][1]["SPDXID"] in message


def test_a_package_without_spdxid_is_refused():
    source = doc("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")
    del source["packages"][1]["SPDXID"]
    assert "Package spdx_id" in refused(orjson.dumps(source))


def test_a_relationship_from_a_missing_element_is_refused_naming_it():
    source = doc("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")
    source["relationships"].append({
        "spdxElementId": "SPDXRef-ghost", "relationshipType": "CONTAINS",
        "relatedSpdxElement": "SPDXRef-Package-hello-server-src",
    })
    message = refused(orjson.dumps(source))
    assert "relationship SPDXRef-ghost CONTAINS SPDXRef-Package-hello-server-src" in message


def test_a_relationship_to_another_document_is_not_refused():
    source = doc("spdx-2.3_tools-python-example.spdx.json")
    assert any(":" in r["relatedSpdxElement"] for r in source["relationships"])
    assert parse_spdx(orjson.dumps(source)).components


# --- real generators' output: accepted, with warnings -------------------------------------------

REAL = {
    # file: (components, with purl, dependencies, warnings, a warning that must be there)
    "spdx-2.2_syft-0.58_alpine-oci.spdx.json": (
        15, 15, 0, 249, "(file): file name must not be an absolute path"),
    "spdx-2.2_syft-0.58_kubectl-linux-amd64.spdx.json": (
        88, 88, 0, 90, "copyright_text is mandatory in SPDX-2.2"),
    "spdx-2.2_ko-0.12_go-multi-arch.spdx.json": (
        2, 2, 1, 1, "SPDXRef-Package-- (package): package download_location must be a valid URL"),
    "spdx-2.2_trivy_centos-7.spdx.json": (
        3, 2, 3, 12, "4 packages have no downloadLocation (read as NOASSERTION)"),
    "spdx-2.2_trivy_happy-bom.spdx.json": (
        11, 6, 11, 26, "12 packages have no downloadLocation"),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_generator_output_is_accepted_with_its_warnings(name):
    components, purls, dependencies, warnings, warning = REAL[name]
    bom = parse_spdx(read(f"real/{name}"))
    assert len(bom.components) == components
    assert sum(1 for c in bom.components if c.purl) == purls
    assert len(bom.dependencies) == dependencies
    assert len(bom.warnings) == warnings
    assert any(warning in w for w in bom.warnings), bom.warnings[:5]


def test_fractional_seconds_in_created_are_read_as_whole_seconds_with_a_warning():
    bom = parse_spdx(read("real/spdx-2.2_syft-0.58_kubectl-linux-amd64.spdx.json"))
    assert bom.timestamp is not None
    assert bom.timestamp.isoformat() == "2023-08-29T23:44:36+00:00"
    assert bom.warnings[0].startswith("creationInfo.created '2023-08-29T23:44:36.856125332Z'")


def test_files_without_checksums_are_a_warning_and_no_file_is_a_component():
    bom = parse_spdx(read("real/spdx-2.2_syft-0.58_alpine-oci.spdx.json"))
    assert "77 files have no checksums (the first: SPDXRef-43490cf90e799459)" in bom.warnings
    assert all(c.purl.startswith("pkg:alpine/") for c in bom.components)


def test_documents_without_problems_have_no_warnings():
    assert parse_spdx(read("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")).warnings == ()


def test_a_relationship_to_a_missing_package_is_refused():
    source = doc("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")
    source["relationships"].append({
        "spdxElementId": "SPDXRef-Package-hello-server-src",
        "relationshipType": "DEPENDS_ON",
        "relatedSpdxElement": "SPDXRef-nowhere",
    })
    assert 'did not find the referenced spdx_id "SPDXRef-nowhere"' in refused(orjson.dumps(source))


def test_a_nul_character_is_refused():
    source = doc("spdx-2.3_cargo_k8s-bom-hello-server.spdx.json")
    source["packages"][1]["name"] = "hy\x00per"
    assert "NUL" in refused(orjson.dumps(source))


def test_spdx_3_of_the_wrong_shape_is_refused_naming_the_path():
    source = doc("spdx-3.0.1_cargo_k8s-bom-hello-server.spdx3.json")
    i = next(i for i, e in enumerate(source["@graph"]) if e["type"] == "software_Package")
    source["@graph"][i]["software_packageVersion"] = 5
    message = refused(orjson.dumps(source))
    assert "SPDX 3.0.1 JSON schema" in message and f"$.@graph[{i}]" in message


def test_spdx_3_relationship_without_from_is_refused():
    source = doc("spdx-3.0.1_cargo_k8s-bom-hello-server.spdx3.json")
    i = next(i for i, e in enumerate(source["@graph"]) if e["type"] == "Relationship")
    del source["@graph"][i]["from"]
    assert f"$.@graph[{i}]" in refused(orjson.dumps(source))


def test_spdx_3_of_another_version_is_refused():
    source = doc("spdx-3.0.1_cargo_k8s-bom-hello-server.spdx3.json")
    source["@context"] = "https://spdx.org/rdf/3.0.0/spdx-context.jsonld"
    message = refused(orjson.dumps(source))
    assert "3.0.0" in message and "3.0.1" in message


# --- validation: spdx-tools' checks, in linear time -------------------------------------------

_TOLERATED = "package must contain no elements if files_analyzed is False"


@pytest.mark.parametrize(
    "name",
    [
        *sorted(p.name for p in SPDX.glob("spdx-2*.json")),
        "bad/spdx-2.2_syft_alpine-3.10-vendor.spdx.json",
    ],
)
def test_the_linear_validation_finds_what_the_full_spdx_tools_validator_finds(name):
    document = JsonLikeDictParser().parse(doc(name))
    full = sorted(
        m.validation_message for m in validate_full_spdx_document(document)
        if not m.validation_message.startswith(_TOLERATED)
    )
    assert sorted(m.validation_message for m in validation_messages(document)) == full


def big_spdx(n: int) -> bytes:
    packages = [{"SPDXID": "SPDXRef-root", "name": "app", "versionInfo": "1.0",
                 "downloadLocation": "NOASSERTION", "filesAnalyzed": False}]
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                      "relatedSpdxElement": "SPDXRef-root"}]
    for i in range(n):
        packages.append({
            "SPDXID": f"SPDXRef-p{i}", "name": f"lib{i}", "versionInfo": f"1.{i}.0",
            "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
            "licenseConcluded": "MIT", "licenseDeclared": "Apache-2.0 OR MIT",
            "supplier": "Organization: Acme",
            "checksums": [{"algorithm": "SHA256", "checksumValue": "a" * 64}],
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": f"pkg:npm/lib{i}@1.{i}.0"}],
        })
        relationships.append({"spdxElementId": "SPDXRef-root" if i < 50 else f"SPDXRef-p{i % 50}",
                              "relationshipType": "DEPENDS_ON",
                              "relatedSpdxElement": f"SPDXRef-p{i}"})
    return orjson.dumps({
        "spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
        "name": "big", "documentNamespace": "https://example.org/big",
        "creationInfo": {"created": "2024-01-01T00:00:00Z", "creators": ["Tool: test"]},
        "packages": packages, "relationships": relationships,
    })


def test_a_5000_package_document_parses_in_seconds_not_minutes():
    """spdx-tools' full validator takes 17.5 s on this document (quadratic); ours about 1.3 s
    on one core. The bound leaves room for a loaded CI machine and still fails a quadratic."""
    data = big_spdx(5000)
    started = time.perf_counter()
    bom = parse_spdx(data)
    elapsed = time.perf_counter() - started
    assert len(bom.components) == 5000 and len(bom.dependencies) == 5000
    assert bom.components[0].supplier == "Acme" and bom.components[0].group == ""
    assert bom.warnings == ()
    assert elapsed < 10, f"{elapsed:.1f} s"


# --- which parser ------------------------------------------------------------------------------


def test_spdx_json_is_recognised_without_a_content_type_and_cyclonedx_still_goes_its_way():
    assert sbom_format(read("spdx-2.2_maven_appbomination.spdx.json")) == "spdx"
    assert sbom_format(read("spdx-3.0.1_maven_appbomination.spdx3.json")) == "spdx"
    assert sbom_format(CDX.read_bytes(), content_type="application/json") == "cyclonedx"
    assert not is_spdx(CDX.read_bytes()) and not is_spdx(b"<bom/>")
    assert parse_sbom(CDX.read_bytes()).format == "json"
    assert parse_sbom(read("spdx-2.2_maven_appbomination.spdx.json")).format == "spdx"


def test_the_spdx_content_type_sends_even_a_cyclonedx_body_to_the_spdx_parser():
    with pytest.raises(SpdxError, match="not an SPDX document"):
        parse_sbom(CDX.read_bytes(), content_type="application/spdx+json; charset=utf-8")
