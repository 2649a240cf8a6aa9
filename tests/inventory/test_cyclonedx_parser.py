"""The CycloneDX parser on real SBOMs and on hostile or broken input."""

from __future__ import annotations

import json

import orjson
import pytest

from tests.conftest import DATA
from trustrank.parsers.bom import BomError
from trustrank.parsers.cyclonedx import parse_cyclonedx
from trustrank.parsers.cyclonedx_vulns import vulnerability_from_json, vulnerability_to_json

SBOMS = DATA / "sbom"

# Component counts taken from the documents themselves (nested components included), as
# listed in tests/data/sbom/PROVENANCE.md and recounted with a plain JSON/XML walk below.
REAL_SBOMS = [
    ("cdx-1.2_golang_proton-bridge-1.8.0.json", "1.2", 201),
    ("cdx-1.2_maven_dropwizard-1.3.15.xml", "1.2", 167),
    ("cdx-1.2_maven_keycloak-10.0.2.json", "1.2", 903),
    ("cdx-1.2_npm_cern-lhc-vdm-editor.json", "1.2", 43),
    ("cdx-1.2_npm_cern-lhc-vdm-editor.xml", "1.2", 43),
    ("cdx-1.3_composer_laravel-7.12.0.xml", "1.3", 62),
    ("cdx-1.4_alpine_alpine-image.json", "1.4", 15),
    ("cdx-1.4_deb-golang_mongo-image.json", "1.4", 293),
    ("cdx-1.4_maven_dependency-track-5.6.0.json", "1.4", 238),
    ("cdx-1.4_maven_dependency-track-apiserver-4.5.0.json", "1.4", 132),
    ("cdx-1.4_maven_quarkus-deps.json", "1.4", 94),
    ("cdx-1.4_npm_juice-shop-11.1.2_flat.json", "1.4", 1115),
    ("cdx-1.4_saasbom_apigateway-microservices.json", "1.4", 0),
    ("cdx-1.5_golang_minikube-1.23.1_app.json", "1.5", 136),
    ("cdx-1.5_pypi_poetry-project-56deps.xml", "1.5", 56),
    ("cdx-1.6_apk-maven_dependency-track-issue4455.json", "1.6", 23),
    ("cdx-1.6_dt-valid-bom.json", "1.6", 2),
    ("cdx-1.6_maven_dt-valid-bom.xml", "1.6", 3),
    ("cdx-1.6_pypi_poetry-project-56deps.json", "1.6", 56),
    ("cdx-1.6_pypi_torch-nvidia-cuda.json", "1.6", 22),
    ("edge/cdx-1.7_maven_dt-valid-bom.json", "1.7", 3),
    ("edge/cdx_empty-bom.json", "1.4", 0),
]


def _count_json(components: list[dict]) -> int:
    return sum(1 + _count_json(c.get("components") or []) for c in components)


@pytest.mark.parametrize(("name", "spec", "count"), REAL_SBOMS)
def test_real_sbom_parses_with_its_component_count(name: str, spec: str, count: int) -> None:
    data = (SBOMS / name).read_bytes()
    bom = parse_cyclonedx(data)
    assert bom.spec_version == spec
    assert len(bom.components) == count
    if name.endswith(".json"):
        assert count == _count_json(json.loads(data).get("components") or [])


NESTED = {
    "bomFormat": "CycloneDX",
    "specVersion": "1.6",
    "version": 1,
    "components": [
        {
            "type": "application",
            "bom-ref": "app",
            "name": "app",
            "components": [
                {
                    "type": "library",
                    "bom-ref": "lib",
                    "name": "lib",
                    "version": "1.0",
                    "components": [{"type": "library", "bom-ref": "inner", "name": "inner"}],
                },
            ],
        },
        {"type": "library", "bom-ref": "top", "name": "top"},
    ],
}


def test_nested_components_are_flattened_with_their_parent() -> None:
    bom = parse_cyclonedx(json.dumps(NESTED).encode())
    parents = {c.bom_ref: c.parent_ref for c in bom.components}
    assert parents == {"app": "", "lib": "app", "inner": "lib", "top": ""}


def test_fields_hashes_licenses_and_dependencies_are_kept() -> None:
    bom = parse_cyclonedx(
        (SBOMS / "cdx-1.4_maven_dependency-track-apiserver-4.5.0.json").read_bytes()
    )
    assert bom.serial_number.startswith("urn:uuid:")
    assert bom.described_component["name"]
    jackson = next(c for c in bom.components if c.name == "jackson-databind")
    assert jackson.group == "com.fasterxml.jackson.core"
    assert jackson.purl.startswith("pkg:maven/com.fasterxml.jackson.core/jackson-databind@")
    assert "SHA-1" in jackson.hashes
    assert jackson.licenses
    assert len(bom.dependencies) > 100
    assert all(ref and dep for ref, dep in bom.dependencies)


def test_xml_and_json_of_the_same_bom_agree() -> None:
    j = parse_cyclonedx((SBOMS / "cdx-1.2_npm_cern-lhc-vdm-editor.json").read_bytes())
    x = parse_cyclonedx((SBOMS / "cdx-1.2_npm_cern-lhc-vdm-editor.xml").read_bytes())
    key = lambda c: (c.name, c.version, c.purl)  # noqa: E731
    assert sorted(map(key, j.components)) == sorted(map(key, x.components))


def test_tools_of_a_1_5_bom_are_read_from_the_components_form() -> None:
    bom = parse_cyclonedx((SBOMS / "cdx-1.5_golang_minikube-1.23.1_app.json").read_bytes())
    assert any(t["name"] for t in bom.tools)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"hello world", "neither JSON nor XML"),
        ((SBOMS / "edge/invalid_not-a-bom.json").read_bytes(), "not valid JSON"),
        (b'{"name": "not a bom"}', 'no "bomFormat": "CycloneDX"'),
        (
            b'{"bomFormat": "CycloneDX", "specVersion": "2.0", "version": 1}',
            "unsupported CycloneDX specVersion '2.0'",
        ),
        (b"<html><body>no</body></html>", "root element is 'html'"),
        (
            (SBOMS / "cdx-1.1_npm_auditjs-generated.xml").read_bytes(),
            "unsupported CycloneDX spec version 1.1",
        ),
    ],
)
def test_bad_documents_are_refused_with_a_reason(payload: bytes, message: str) -> None:
    with pytest.raises(BomError, match=message.replace("(", r"\(").replace("'", "'")):
        parse_cyclonedx(payload)


def test_schema_violation_names_the_json_path() -> None:
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "components": [{"type": "library", "name": "ok"}, {"type": "spaceship", "name": "bad"}],
    }
    with pytest.raises(BomError) as err:
        parse_cyclonedx(json.dumps(doc).encode())
    assert "$.components[1].type" in str(err.value)


def test_xml_schema_violation_names_the_line() -> None:
    with pytest.raises(BomError) as err:
        parse_cyclonedx((SBOMS / "cdx-1.5_npm-maven_dependency-track-issue2519.xml").read_bytes())
    # cyclonedx-npm wrote <properties> after <components>, which the 1.5 XSD forbids.
    assert "line 142" in str(err.value)
    assert "properties" in str(err.value)


XXE = b"""<?xml version="1.0"?>
<!DOCTYPE bom [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<bom xmlns="http://cyclonedx.org/schema/bom/1.5" version="1">
  <components><component type="library"><name>&xxe;</name></component></components>
</bom>"""

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<bom xmlns="http://cyclonedx.org/schema/bom/1.5" version="1">
  <components><component type="library"><name>&lol3;</name></component></components>
</bom>"""


@pytest.mark.parametrize("payload", [XXE, BILLION_LAUGHS])
def test_xml_with_a_dtd_or_entities_is_refused(payload: bytes) -> None:
    with pytest.raises(BomError, match="DTD or entities"):
        parse_cyclonedx(payload)


def test_utf16_xml_with_a_dtd_is_refused_too() -> None:
    with pytest.raises(BomError, match="DTD"):
        parse_cyclonedx(
            XXE.replace(b'<?xml version="1.0"?>', b'<?xml version="1.0" encoding="UTF-16"?>')
            .decode()
            .encode("utf-16")
        )


def test_services_and_embedded_vulnerabilities_are_parsed_in_the_same_pass():
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "components": [{"type": "library", "name": "lib", "bom-ref": "lib"}],
        "services": [
            {
                "bom-ref": "api",
                "name": "api",
                "endpoints": ["https://api.example/v1"],
                "authenticated": True,
                "x-trust-boundary": True,
                "services": [{"name": "inner"}],
            }
        ],
        "vulnerabilities": [
            {
                "id": "CVE-2024-0001",
                "affects": [{"ref": "lib"}],
                "analysis": {"state": "not_affected", "justification": "code_not_reachable"},
            }
        ],
    }
    parsed = parse_cyclonedx(orjson.dumps(doc))
    assert [(s.name, s.authenticated, s.trust_boundary) for s in parsed.services] == [
        ("api", True, True),
        ("inner", None, None),
    ]
    (vuln,) = parsed.vulnerabilities
    assert vuln.id == "CVE-2024-0001" and vuln.affects == ("lib",)
    assert vuln.analysis is not None and vuln.analysis.state == "not_affected"
    assert vulnerability_from_json(vulnerability_to_json(vuln)) == vuln

