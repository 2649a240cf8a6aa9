"""The plain-Django receivers are in the OpenAPI schema, with their request media types."""

from __future__ import annotations

import pytest
from drf_spectacular.validation import validate_schema

pytestmark = pytest.mark.django_db


@pytest.fixture
def document(team, api):
    response = api(team, "read").get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize("route", ["/v1/traces", "/v1/metrics"])
def test_otlp_receivers_are_documented_with_both_encodings(document, route):
    operation = document["paths"][route]["post"]
    media = operation["requestBody"]["content"]
    assert set(media) == {"application/x-protobuf", "application/json"}
    assert media["application/x-protobuf"]["schema"]["format"] == "binary"
    assert "Export" in media["application/json"]["schema"]["description"]
    assert {"200", "400", "401", "403", "413", "415", "429"} <= set(operation["responses"])
    assert operation["security"] == [{"ApiKey": []}]
    assert "Content-Encoding" in {p["name"] for p in operation["parameters"]}


def test_remote_write_is_documented_as_snappy_protobuf(document):
    operation = document["paths"]["/api/v1/write"]["post"]
    assert set(operation["requestBody"]["content"]) == {"application/x-protobuf"}
    encoding = next(p for p in operation["parameters"] if p["name"] == "Content-Encoding")
    assert encoding["schema"]["enum"] == ["snappy"] and encoding["required"] is True
    assert "204" in operation["responses"]


def test_the_schema_with_the_receivers_is_valid_openapi(document):
    validate_schema(document)
    assert len({op["post"]["operationId"] for op in (
        document["paths"]["/v1/traces"], document["paths"]["/v1/metrics"],
        document["paths"]["/api/v1/write"],
    )}) == 3
