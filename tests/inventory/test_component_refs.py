"""Components that look the same (same name, version and purl, as syft lists one Go module
once per binary) are told apart by their bom-ref on the project page and in the API."""

from __future__ import annotations

import orjson
import pytest

from tests.vulns.helpers import load_sbom

pytestmark = pytest.mark.django_db

PURL = "pkg:golang/github.com/golang/snappy@v0.0.1"
REFS = [f"{PURL}?package-id={suffix}" for suffix in ("ff9536d8", "c2e1b4db", "22bc9d3c")]


def _bom() -> bytes:
    return orjson.dumps({
        "bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
        "components": [
            {"type": "library", "name": "github.com/golang/snappy", "version": "v0.0.1",
             "purl": PURL, "bom-ref": ref}
            for ref in REFS
        ] + [
            {"type": "library", "name": "plain", "version": "1", "purl": "pkg:golang/plain@1",
             "bom-ref": "pkg:golang/plain@1"},
            {"type": "library", "name": "other", "version": "2", "purl": "pkg:golang/other@2",
             "bom-ref": "other-ref-7"},
        ],
    })


def test_project_page_shows_what_tells_identical_rows_apart(team, make_user, client):
    pv = load_sbom(team, _bom(), project="mongo", version="1")
    client.force_login(make_user("alice", team=team))
    html = client.get(f"/projects/{pv.project_id}/?q=snappy").content.decode()
    for suffix in ("ff9536d8", "c2e1b4db", "22bc9d3c"):
        assert f"bom-ref …?package-id={suffix}</div>" in html
    plain = client.get(f"/projects/{pv.project_id}/?q=plain").content.decode()
    # A bom-ref that is just the purl adds nothing; one that differs is shown whole.
    assert 'class="bom-ref' not in plain
    other = client.get(f"/projects/{pv.project_id}/?q=other").content.decode()
    assert "bom-ref other-ref-7</div>" in other


def test_components_api_carries_the_bom_ref(team, api):
    pv = load_sbom(team, _bom(), project="mongo", version="1")
    body = api(team, "read").get(f"/api/v1/projects/{pv.project_id}/components?q=snappy").json()
    rows = body["results"]
    assert sorted(r["bom_ref"] for r in rows) == sorted(REFS)
    assert {r["purl"] for r in rows} == {PURL}
