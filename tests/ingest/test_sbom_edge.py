"""SBOM receivers refuse at the edge what the worker could not store or would store wrongly:
wrong JSON types, ids that are not UUIDs, strange content types, NUL characters and values
longer than their columns. Every refusal is a 4xx naming the field, and nothing is stored."""

from __future__ import annotations

import base64
import itertools

import orjson
import pytest

from ingest.models import IngestJob
from tests.conftest import DATA
from trustrank.parsers.bom import BomError
from trustrank.parsers.cyclonedx import parse_cyclonedx

SMALL = (DATA / "sbom" / "cdx-1.6_pypi_torch-nvidia-cuda.json").read_bytes()

pytestmark = pytest.mark.django_db

WRONG_JSON_VALUES = [12345, 1.5, ["a"], {"a": 1}, True]
TEXT_FIELDS = ["projectName", "projectVersion", "project"]


def _put(client, doc):
    return client.put("/api/v1/bom", data=orjson.dumps(doc), content_type="application/json")


def _valid_doc(**overrides):
    doc = {"projectName": "shop", "projectVersion": "1.0", "autoCreate": True,
           "bom": base64.b64encode(SMALL).decode()}
    doc.update(overrides)
    return doc


@pytest.mark.parametrize(
    ("field", "value"), list(itertools.product(TEXT_FIELDS, WRONG_JSON_VALUES))
)
def test_wrong_json_types_on_put_bom_are_refused_by_name(team, api, field, value):
    response = _put(api(team, "sbom:write"), _valid_doc(**{field: value}))
    assert response.status_code == 400, response.content
    assert field in response.json()["detail"]
    assert not IngestJob.objects.exists()


@pytest.mark.parametrize("value", [12345, ["a"], {"a": 1}])
def test_wrong_types_of_auto_create_and_bom_are_refused(team, api, value):
    client = api(team, "sbom:write")
    assert _put(client, _valid_doc(autoCreate=value)).status_code == 400
    assert _put(client, _valid_doc(bom=value)).status_code == 400
    assert not IngestJob.objects.exists()


@pytest.mark.parametrize("project", ["zzz", "1", "00000000-0000-0000-0000", "\u00e9"])
def test_a_project_id_that_is_not_a_uuid_is_refused_on_every_sbom_route(team, api, project):
    client = api(team, "sbom:write")
    response = _put(client, _valid_doc(project=project))
    assert response.status_code == 400 and "UUID" in response.json()["detail"]
    response = client.post(f"/api/v1/sboms?project={project}", data=SMALL,
                           content_type="application/json")
    assert response.status_code == 400 and "UUID" in response.json()["detail"]
    response = client.post("/api/v1/bom", {"project": project, "bom": SMALL.decode()})
    assert response.status_code == 400 and "UUID" in response.json()["detail"]
    assert not IngestJob.objects.exists()


@pytest.mark.parametrize("field", ["projectName", "projectVersion"])
def test_names_longer_than_their_column_are_refused(team, api, field):
    response = _put(api(team, "sbom:write"), _valid_doc(**{field: "x" * 256}))
    assert response.status_code == 400 and field in response.json()["detail"]


@pytest.mark.parametrize("content_type", ["image/png", "text/html", "application/pdf"])
def test_an_sbom_of_another_media_type_gets_415(team, api, content_type):
    client = api(team, "sbom:write")
    response = client.post("/api/v1/sboms?projectName=a&autoCreate=true", data=SMALL,
                           content_type=content_type)
    assert response.status_code == 415
    response = client.put("/api/v1/bom", data=orjson.dumps(_valid_doc()),
                          content_type=content_type)
    assert response.status_code == 415
    response = client.post("/api/v1/bom", data=SMALL, content_type=content_type)
    assert response.status_code == 415
    assert not IngestJob.objects.exists()


def _with_nul_in_every_string(doc, path=()):
    """Yield (path, copy of doc) with a NUL put into one string value at a time."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            for where, changed in _with_nul_in_every_string(value, (*path, key)):
                yield where, {**doc, key: changed}
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            for where, changed in _with_nul_in_every_string(value, (*path, i)):
                yield where, [*doc[:i], changed, *doc[i + 1:]]
    elif isinstance(doc, str):
        yield path, doc + "\x00"


def test_a_nul_anywhere_in_a_bom_is_refused_by_the_parser():
    doc = orjson.loads(SMALL)
    tried = 0
    for _where, changed in itertools.islice(_with_nul_in_every_string(doc), 200):
        with pytest.raises(BomError):
            parse_cyclonedx(orjson.dumps(changed))
        tried += 1
    assert tried > 20
    # An escaped backslash followed by "u0000" is ordinary text.
    doc["metadata"]["component"]["name"] = "a\\u0000"
    parse_cyclonedx(orjson.dumps(doc))


def test_a_bom_with_a_nul_is_refused_at_the_receiver_not_after_202(team, api):
    doc = orjson.loads(SMALL)
    doc["components"][0]["name"] += "\x00"
    response = api(team, "sbom:write").post(
        "/api/v1/sboms?projectName=a&autoCreate=true", data=orjson.dumps(doc),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]
    assert not IngestJob.objects.exists()


@pytest.mark.parametrize("timestamp", ["2030-01-01T00:00:00+18:00", "0001-01-01T00:00:00+01:00",
                                       "9999-12-31T23:59:59-10:00"])
def test_bom_timestamps_that_cannot_be_stored_are_dropped_by_the_parser(timestamp):
    doc = orjson.loads(SMALL)
    doc["metadata"]["timestamp"] = timestamp
    assert parse_cyclonedx(orjson.dumps(doc)).timestamp is None


def test_a_bom_version_beyond_the_column_is_refused():
    doc = orjson.loads(SMALL)
    doc["version"] = 2**31
    with pytest.raises(BomError):
        parse_cyclonedx(orjson.dumps(doc))
