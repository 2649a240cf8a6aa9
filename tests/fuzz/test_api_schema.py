"""Schemathesis over the whole OpenAPI schema (`/api/schema/`), against the live application
(in process, through WSGI), authenticated with a key holding every scope of a team that has
data. Every answer must be a non-5xx that matches the schema where the schema documents it.

The number of examples per operation is bounded (SCHEMATHESIS_MAX_EXAMPLES) so the suite
stays within the CI budget; the run prints the number of requests and the time taken."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, settings
from opentelemetry.trace import SpanKind

from ingest.submit import certificates_submit, trust_bundle_submit
from tests.fuzz import stats
from tests.identity.helpers import run_queued_jobs
from tests.identity.pki import issue, make_pki
from tests.runtime.helpers import SpanFactory
from tests.vulns.helpers import bom, import_osv, load_sbom, osv
from trustrank.accounts.models import FEEDS_WRITE, Scope
from trustrank.accounts.principal import Principal
from trustrank.parsers.otlp import spans_from_request
from trustrank.runtime.services.aggregation import traces_aggregate_store

MAX_EXAMPLES = 15

# Which operations already have their seed data in this test's transaction.
_SEEDED: set[str] = set()


def _seed_inventory(team: Any) -> None:
    import_osv(team, [osv("GHSA-aaaa-bbbb-cccc", "npm", "lodash",
                          [{"introduced": "0"}, {"fixed": "4.17.19"}])])
    load_sbom(team, bom([("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")]))


def _seed(team: Any) -> None:
    """A project with components and a finding, traced services and calls, certificates and
    identities: answers with real rows, where fields may be null."""
    _seed_inventory(team)
    f = SpanFactory(env="production")
    for i in range(5):
        t = f.trace_id()
        root = f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t)
        call = f.span(service="web", name="GET api", kind=SpanKind.CLIENT, trace_id=t,
                      parent=root, attributes={"peer.service": "api"})
        f.span(service="api", name="GET /items", kind=SpanKind.SERVER, trace_id=t,
               parent=call, error=i == 0)
        f.span(service="api", name="SELECT", kind=SpanKind.CLIENT, trace_id=t, parent=call,
               attributes={"db.system": "postgresql", "server.address": "db.internal"})
    traces_aggregate_store(
        team_id=team.id, batch=spans_from_request(f.request()), received_at=timezone.now()
    )
    pki = make_pki()
    principal = Principal(scopes_by_team={team.pk: frozenset(Scope.values)})
    trust_bundle_submit(principal=principal, team=team, body=pki.root.pem, environment="prod")
    certificates_submit(principal=principal, team=team, environment="prod",
                        body=pki.leaf("/ns/shop/sa/web").pem + pki.intermediate.pem)
    certificates_submit(principal=principal, team=team, environment="prod",
                        body=issue("stray").pem)
    run_queued_jobs()


@pytest.fixture
def api_key(team: Any, make_key: Any) -> str:
    """A key with every scope (site-wide ones included) of a team."""
    return str(make_key(team, *Scope.values, FEEDS_WRITE))


@pytest.fixture
def seeded_api_key(team: Any, api_key: str) -> str:
    """The same key, its team holding data in every area (seeded once per test: the
    generated cases mostly use random ids, the real-rows test uses these)."""
    _seed(team)
    return api_key


def _served_schema() -> dict[str, Any]:
    """What `/api/schema/` serves (the same generator, without a request): loaded at import so
    every operation is its own test item; test_the_fuzzed_schema_is_the_served_one holds
    the two together."""
    return dict(SchemaGenerator().get_schema(request=None, public=True))


# Certificate uploads and the protobuf receivers (/v1/traces, /v1/metrics, /api/v1/write)
# take raw bytes under their own media types: send generated bodies as is.
schemathesis.serializer.alias(
    ["application/x-pem-file", "application/pkix-cert", "application/x-protobuf"],
    "application/octet-stream",
)
schema = schemathesis.openapi.from_dict(orjson.loads(orjson.dumps(_served_schema())))
schema.app = get_wsgi_application()


@pytest.fixture(autouse=True)
def _keep_the_test_connection() -> Iterator[None]:
    # As Django's test client does: a request must not close the test's connection (the
    # data lives in its transaction).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.django_db
def test_the_fuzzed_schema_is_the_served_one(api_key: str) -> None:
    from django.test import Client

    served = Client().get("/api/schema/?format=json", HTTP_X_API_KEY=api_key)
    assert served.status_code == 200
    import yaml

    body = served.content
    document = orjson.loads(body) if body.lstrip().startswith(b"{") else yaml.safe_load(body)
    assert document == orjson.loads(orjson.dumps(_served_schema()))


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_without_5xx_and_as_documented(
    case: Any, team: Any, api_key: str
) -> None:
    if case.operation.label not in _SEEDED:
        # A project, a component and a finding: list answers carry real rows.
        _seed_inventory(team)
        _SEEDED.add(case.operation.label)
    started = time.perf_counter()
    stats.SCHEMATHESIS["requests"] += 1
    stats.SCHEMATHESIS["operations"].add(case.operation.label)
    try:
        response = case.call(headers={"X-Api-Key": api_key})
        case.validate_response(
            response,
            checks=[
                schemathesis.checks.not_a_server_error,
                schemathesis.checks.response_schema_conformance,
            ],
        )
    finally:
        stats.SCHEMATHESIS["seconds"] += time.perf_counter() - started


def _bulk_triage_job(team: Any) -> int:
    from trustrank.findings.records import BulkTriageJob

    return BulkTriageJob.objects.create(
        team_ids=[team.pk], changes={"state": "exploitable"}, reason="fuzz",
        team=team, requested_by_label="system: fuzz", status="done",
    ).pk


# Operations that answer 400 without a query parameter they document as required.
REQUIRED_QUERY: dict[str, dict[str, str]] = {
    "/api/v1/exports": {"format": "csv"},
    # Dependency-Track's lookup: the seeded project (load_sbom's defaults).
    "/api/v1/project/lookup": {"name": "app", "version": "1.0"},
    # The build gate of that same project version.
    "/api/v1/gate": {"project": "app", "version": "1.0"},
}


def _export(team: Any) -> int:
    """A finished export job with its file, so its status and download answer 200."""
    import hashlib
    from pathlib import Path

    from django.conf import settings

    from trustrank.exports.models import Export

    body = b"id,title\n1,fuzz\n"
    folder = Path(settings.TRUSTRANK_EXPORT_DIR) / str(team.pk)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fuzz.csv").write_bytes(body)
    return Export.objects.create(
        team=team, format="csv", status="done", rows=1, size_bytes=len(body),
        sha256=hashlib.sha256(body).hexdigest(), file_path=f"{team.pk}/fuzz.csv",
    ).pk


def _real_path_parameters(team: Any) -> dict[str, Any]:
    from ingest.models import IngestJob
    from trustrank.accounts.principal import Principal
    from trustrank.cluster.models import ReplayRun
    from trustrank.findings.models import Finding
    from trustrank.identity.models import Certificate, Identity
    from trustrank.inventory.models import Project
    from trustrank.ranking.models import RankingRun
    from trustrank.runtime.deployment import DeploymentRequest, deployment_set

    job = IngestJob.objects.filter(team=team).first()
    identity = Identity.objects.filter(team=team).first()
    run = RankingRun.objects.create(team=team, trigger="test")
    replay = ReplayRun.objects.create(team=team, mode="inflation")
    from trustrank.cluster.models import Cluster

    Cluster.objects.get_or_create(team=team, name="gpu-a")
    from trustrank.notify.models import Webhook

    webhook = Webhook.objects.create(team=team, url="https://hooks.example.com/t", secret="s",
                                     events=["finding.immediate"])
    deployment_set(
        team=team, environment="production", service="api",
        request=DeploymentRequest(project="app", version="1.0"), source="api",
        principal=Principal(scopes_by_team={team.pk: frozenset({"sbom:write"})}),
    )
    return {
        "name": "production",
        "service": "api",
        "cluster": "gpu-a",
        "run_id": {"ranking-runs": run.pk, "replay-runs": replay.pk},
        "environment": "prod",
        "finding_id": Finding.objects.filter(team=team).first().pk,  # type: ignore[union-attr]
        "project_id": Project.objects.filter(team=team).first().pk,  # type: ignore[union-attr]
        # An ingest job's id (uuid) or a bulk triage job's (int), by path.
        "job_id": {"bulk-triage": _bulk_triage_job(team), "jobs": str(job.pk) if job else ""},
        "export_id": _export(team),
        "token": str(job.pk) if job else "",
        # A project version's uuid (Dependency-Track's project): the one with a finding.
        "uuid": str(
            Finding.objects.filter(team=team, kind="vulnerability")
            .values_list("project_version__uuid", flat=True).first()
        ),
        "kind": "osv",
        "webhook_id": webhook.pk,
        "id": {
            "certificates": Certificate.objects.filter(team=team).first().pk,  # type: ignore[union-attr]
            "identities": identity.pk if identity else 0,
        },
    }


@pytest.mark.django_db
def test_every_read_with_real_rows_answers_as_documented(team: Any, seeded_api_key: str) -> None:
    """The generated cases mostly miss the seeded rows (random ids); here every GET is called
    once with the real ones, so each documented field is checked against a real value."""
    real = _real_path_parameters(team)
    checked = 0
    problems: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() != "GET" or operation.path.startswith("/api/schema"):
            continue
        params = {}
        for parameter in operation.path_parameters:
            value = real[parameter.name]
            if isinstance(value, dict):
                value = next(v for k, v in value.items() if k in operation.path)
            params[parameter.name] = value
        case = operation.Case(path_parameters=params, query=REQUIRED_QUERY.get(operation.path))
        response = case.call(headers={"X-Api-Key": seeded_api_key})
        if response.status_code != 200:
            problems.append(f"{operation.label}: {response.status_code} {response.text[:300]}")
            continue
        try:
            case.validate_response(
                response,
                checks=[
                    schemathesis.checks.not_a_server_error,
                    schemathesis.checks.response_schema_conformance,
                ],
            )
        except BaseExceptionGroup as exc:  # every operation's problems, not just the first
            problems.append(f"{operation.label}: {str(exc)[:1500]}")
        checked += 1
    assert not problems, "\n\n".join(problems)
    assert checked >= 15
