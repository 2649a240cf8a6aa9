"""A team's revision (`runtime.revisions`) moves on every change of what a ranking run reads
of its services, deployments and project versions, and on nothing else; a gather whose
revision stands reads none of those rows again, and one whose revision moved reads what
changed."""

from __future__ import annotations

import importlib
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.vulns.helpers import bom, load_sbom
from trustrank.accounts.principal import Principal
from trustrank.inventory.models import ProjectVersion
from trustrank.ranking.inputs import ranking_inputs_gather
from trustrank.runtime.models import Deployment, Environment, Service
from trustrank.runtime.revisions import team_revision
from trustrank.runtime.services.ingress import service_ingress_set

pytestmark = pytest.mark.django_db

MIGRATION = importlib.import_module("trustrank.runtime.migrations.0010_ranked_revision")
NOW = timezone.now()

# Columns no ranking run reads: written by every trace batch (first_seen, last_seen), or not
# part of the inputs (the evidence's ingress flag is read from the attributes; who set a
# mark is read by its label; when a deployment was written, and by whom).
SERVICE_UNREAD = {"id", "first_seen", "last_seen", "ingress_candidate", "ingress_set_by_id",
                  "ranked_revision"}
# And a deployment's version, impact and source: read by every run's deployments statement.
DEPLOYMENT_UNREAD = {"id", "set_by", "updated_at", "ranked_revision", "project_version_id",
                     "human_impact", "source"}

# A value unlike the row's, per column.
CHANGED = {
    "kind": "external", "namespace": "shop", "name": "renamed", "version": "9.9",
    "attributes": {"trustrank.ingress": True}, "ingress_override": True,
    "ingress_set_by_label": "alice", "ingress_set_via": "api",
    "ingress_set_at": NOW - timedelta(days=1), "service_name": "renamed",
}


def _columns(model) -> set[str]:
    return {f.column for f in model._meta.concrete_fields}


def test_the_trigger_watches_every_column_but_those_no_run_reads():
    """A column added to either table is one a run reads until said otherwise here: the
    trigger's column lists and these sets together name every column."""
    assert set(MIGRATION._SERVICE_READ) | SERVICE_UNREAD == _columns(Service)
    assert set(MIGRATION._DEPLOYMENT_READ) | DEPLOYMENT_UNREAD == _columns(Deployment)
    assert not set(MIGRATION._SERVICE_READ) & SERVICE_UNREAD
    assert not set(MIGRATION._DEPLOYMENT_READ) & DEPLOYMENT_UNREAD


def _world(team):
    env = Environment.objects.create(team=team, name="prod", first_seen=NOW, last_seen=NOW)
    other_env = Environment.objects.create(team=team, name="staging", first_seen=NOW,
                                           last_seen=NOW)
    pv = load_sbom(team, bom([("lib", "1.0", "pkg:npm/lib@1.0")]), project="shop",
                   version="1.0")
    other_pv = load_sbom(team, bom([("lib", "1.0", "pkg:npm/lib@1.0")]), project="shop",
                         version="2.0")
    svc = Service.objects.create(environment=env, name="checkout", first_seen=NOW,
                                 last_seen=NOW)
    Service.objects.create(environment=env, name="cart", first_seen=NOW, last_seen=NOW)
    dep = Deployment.objects.create(environment=env, service_name="checkout",
                                    project_version=pv, source="api")
    return env, other_env, pv, other_pv, svc, dep


@pytest.mark.parametrize(("model", "column"), [
    *((Service, c) for c in MIGRATION._SERVICE_READ),
    *((Deployment, c) for c in MIGRATION._DEPLOYMENT_READ),
])
def test_a_change_of_any_column_a_run_reads_moves_the_revision(team, model, column):
    _env, other_env, _pv, _other, svc, dep = _world(team)
    row, part = (svc, "services") if model is Service else (dep, "deployments")
    value = other_env.pk if column == "environment_id" else CHANGED[column]
    before = team_revision(team_id=team.pk)
    model.objects.filter(pk=row.pk).update(**{column: value})
    after = team_revision(team_id=team.pk)
    assert getattr(after, part) != getattr(before, part)
    assert [v for k, v in after._asdict().items() if k != part] == [
        v for k, v in before._asdict().items() if k != part]
    # Written again with the same value: the revision stands.
    model.objects.filter(pk=row.pk).update(**{column: value})
    assert team_revision(team_id=team.pk) == after


@pytest.mark.parametrize("key", MIGRATION._ATTRIBUTES_READ)
def test_a_change_of_any_attribute_a_run_reads_moves_the_revision(team, key):
    _env, _other_env, _pv, _other, svc, _dep = _world(team)
    Service.objects.filter(pk=svc.pk).update(attributes={key: "a", "service.instance.id": "1"})
    before = team_revision(team_id=team.pk)
    Service.objects.filter(pk=svc.pk).update(attributes={key: "b", "service.instance.id": "1"})
    assert team_revision(team_id=team.pk).services != before.services


def test_the_trigger_watches_every_attribute_the_services_statement_reads():
    from trustrank.ranking.inputs.graph import _SERVICES_SQL

    read = set(re.findall(r"attributes\s*->>?\s*'([^']+)'", _SERVICES_SQL))
    assert read and read <= set(MIGRATION._ATTRIBUTES_READ)


def test_writes_no_run_reads_keep_the_revision_and_other_teams_are_apart(team, other_team):
    _env, _other_env, _pv, _other, _svc, dep = _world(team)
    before = team_revision(team_id=team.pk)
    later = timezone.now() + timedelta(minutes=5)
    # What every trace batch writes, in the ingest's own words (an upsert that merges equal
    # attributes and moves last_seen).
    with connection.cursor() as cur:
        cur.execute("UPDATE runtime_service SET last_seen = %s, first_seen = %s, "
                    "ingress_candidate = true, attributes = attributes || %s::jsonb",
                    [later, NOW - timedelta(days=2),
                     '{"service.instance.id": "replica-2", "telemetry.sdk.version": "1.4"}'])
    Deployment.objects.filter(pk=dep.pk).update(set_by="pipeline", updated_at=later,
                                                human_impact="very high")
    # Another team's services, deployments and versions.
    theirs = Environment.objects.create(team=other_team, name="prod", first_seen=NOW,
                                        last_seen=NOW)
    Service.objects.create(environment=theirs, name="checkout", first_seen=NOW, last_seen=NOW)
    their_pv = load_sbom(other_team, bom([("lib", "1.0", "pkg:npm/lib@1.0")]), project="shop",
                         version="1.0")
    Deployment.objects.create(environment=theirs, service_name="checkout",
                              project_version=their_pv, source="api")
    assert team_revision(team_id=team.pk) == before


def test_rows_inserted_or_deleted_environments_renamed_and_versions_added_move_it(team):
    env, other_env, _pv, other_pv, _svc, _dep = _world(team)
    steps = [
        lambda: Service.objects.create(environment=env, name="ads", first_seen=NOW,
                                       last_seen=NOW),
        lambda: Service.objects.filter(name="cart").delete(),
        lambda: Deployment.objects.create(environment=env, service_name="cart",
                                          project_version=other_pv, source="api"),
        lambda: Deployment.objects.filter(service_name="cart").delete(),
        lambda: Environment.objects.filter(pk=other_env.pk).update(name="stage"),
        lambda: load_sbom(team, bom([("lib", "1.0", "pkg:npm/lib@1.0")]), project="shop",
                          version="3.0"),
        lambda: ProjectVersion.objects.filter(version="3.0").delete(),
        # A row deleted and another inserted in one transaction: the count stands, the sums
        # do not.
        lambda: (Service.objects.filter(name="ads").delete(),
                 Service.objects.create(environment=env, name="ads", first_seen=NOW,
                                        last_seen=NOW)),
    ]
    seen = [team_revision(team_id=team.pk)]
    for step in steps:
        step()
        seen.append(team_revision(team_id=team.pk))
        assert seen[-1] != seen[-2], f"step {len(seen) - 1} kept the revision"


def _statements(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries]


def test_a_gather_reads_the_services_and_deployments_again_only_when_the_revision_moved(team):
    env, _other_env, _pv, _other, svc, _dep = _world(team)
    first = ranking_inputs_gather(team_id=team.pk)
    with CaptureQueriesContext(connection) as ctx:
        second = ranking_inputs_gather(team_id=team.pk, previous=first,
                                       changed_since=timezone.now())
    sql = _statements(ctx)
    assert not [s for s in sql if "FROM runtime_service s\n  JOIN runtime_environment" in s]
    assert not [s for s in sql if "INSERT INTO runtime_deployment" in s]
    assert not [s for s in sql if "NOT EXISTS (SELECT 1 FROM runtime_service s" in s]
    assert second.inputs.services is first.inputs.services
    assert second.inputs.deployments is first.inputs.deployments

    # A deployment's impact changes: the services are not read again, the deployment is.
    Deployment.objects.filter(service_name="checkout").update(human_impact="very high")
    with CaptureQueriesContext(connection) as ctx:
        second = ranking_inputs_gather(team_id=team.pk, previous=second,
                                       changed_since=timezone.now())
    assert not [s for s in _statements(ctx)
                if "FROM runtime_service s\n  JOIN runtime_environment" in s]
    assert second.inputs.services is first.inputs.services
    assert [d.human_impact for d in second.inputs.deployments] == ["very high"]

    # The operator marks checkout as ingress, through the page's own service: the next
    # gather reads the services again and sees the mark.
    principal = Principal(scopes_by_team={team.pk: frozenset({"read", "triage"})})
    service_ingress_set(service=svc, principal=principal, value=True)
    with CaptureQueriesContext(connection) as ctx:
        third = ranking_inputs_gather(team_id=team.pk, previous=second,
                                      changed_since=timezone.now())
    assert [s for s in _statements(ctx)
            if "FROM runtime_service s\n  JOIN runtime_environment" in s]
    marked = {s.name: s.ingress_override for s in third.inputs.services}
    assert marked["checkout"] is True
    assert third.inputs.services == ranking_inputs_gather(team_id=team.pk).inputs.services

    # A version named by a traced service's service.name and service.version appears: the
    # deployments from telemetry run again and record it.
    Service.objects.create(environment=env, name="billing", version="1.0", first_seen=NOW,
                           last_seen=NOW)
    load_sbom(team, bom([("lib", "1.0", "pkg:npm/lib@1.0")]), project="billing",
              version="1.0")
    fourth = ranking_inputs_gather(team_id=team.pk, previous=third,
                                   changed_since=timezone.now())
    assert ("billing", "telemetry") in {(d.service, d.source) for d in
                                        fourth.inputs.deployments}
    assert fourth.inputs.deployments == ranking_inputs_gather(team_id=team.pk).inputs.deployments
