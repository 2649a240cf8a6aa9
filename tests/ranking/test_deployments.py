"""Which code runs where: deployments from SBOM uploads, the API and telemetry."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.identity.helpers import run_queued_jobs
from tests.vulns.helpers import bom, load_sbom
from trustrank.runtime.deployment import deployments_from_telemetry
from trustrank.runtime.models import Deployment, Environment, NodeKind, Service

pytestmark = pytest.mark.django_db

BOM = bom([("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")])


def test_an_sbom_upload_that_names_its_service_records_the_deployment(api, team):
    client = api(team, "sbom:write", "read")
    r = client.post(
        "/api/v1/sboms?projectName=shop&projectVersion=2.0&autoCreate=true"
        "&environment=prod&service=storefront&human_impact=high",
        BOM, content_type="application/json",
    )
    assert r.status_code == 202, r.content
    [job] = run_queued_jobs()
    assert job.status == "done", job.error
    d = Deployment.objects.get(environment__team=team)
    assert (d.environment.name, d.service_name, d.human_impact, d.source) == (
        "prod", "storefront", "high", "sbom",
    )
    assert (d.project_version.project.name, d.project_version.version) == ("shop", "2.0")
    got = client.get("/api/v1/environments/prod/services/storefront/deployment").json()
    assert got["source"] == "sbom" and got["version"] == "2.0"


@pytest.mark.parametrize(
    ("query", "field"),
    [("service=storefront", "nvironment"), ("environment=prod&service=s&human_impact=huge",
                                            "human_impact")],
)
def test_bad_deployment_parameters_are_refused_before_anything_is_stored(
    api, team, query, field
):
    r = api(team, "sbom:write").post(
        f"/api/v1/sboms?projectName=shop&projectVersion=2.0&autoCreate=true&{query}",
        BOM, content_type="application/json",
    )
    assert r.status_code == 400 and field in r.json()["detail"]
    assert not Deployment.objects.exists() and not run_queued_jobs()


def test_telemetry_names_exactly_one_project_version(team):
    load_sbom(team, BOM, project="checkout", version="1.2.0")
    load_sbom(team, BOM, project="twin", version="1.0")
    load_sbom(team, BOM, project="twin", version="1.0-rc")
    now = timezone.now()
    env = Environment.objects.create(team=team, name="prod", first_seen=now, last_seen=now)
    for name, version in (("checkout", "1.2.0"), ("twin", "2.0"), ("stranger", "1.0")):
        Service.objects.create(environment=env, kind=NodeKind.SERVICE, name=name,
                               version=version, first_seen=now, last_seen=now)
    assert deployments_from_telemetry(team_id=team.pk) == 1
    d = Deployment.objects.get()
    assert (d.service_name, d.source, d.project_version.version) == ("checkout", "telemetry",
                                                                     "1.2.0")
    # What a person or a pipeline said is never overwritten by telemetry.
    d.human_impact, d.source = "very high", "manual"
    d.save()
    assert deployments_from_telemetry(team_id=team.pk) == 0
    d.refresh_from_db()
    assert (d.source, d.human_impact) == ("manual", "very high")


def test_telemetry_deployments_are_the_team_own_and_recorded_once(team):
    """Another team's project of the same name is not a match; a service already deployed,
    a service of another kind or without a version gets none; a second pass records only
    the services that appeared since."""
    from trustrank.accounts.models import Team

    other = Team.objects.create(name="other team")
    load_sbom(other, BOM, project="cart", version="3.1")
    load_sbom(team, BOM, project="checkout", version="1.2.0")
    now = timezone.now()
    env = Environment.objects.create(team=team, name="prod", first_seen=now, last_seen=now)
    theirs = Environment.objects.create(team=other, name="prod", first_seen=now, last_seen=now)
    for e, kind, name, version, namespace in (
        (env, NodeKind.SERVICE, "cart", "3.1", ""),           # another team's project
        (env, NodeKind.SERVICE, "checkout", "", ""),          # no version
        (env, NodeKind.EXTERNAL, "checkout", "1.2.0", "x"),   # not a service
        (env, NodeKind.SERVICE, "checkout", "1.2.0", "shop"),
        (theirs, NodeKind.SERVICE, "checkout", "1.2.0", ""),  # another team's service
    ):
        Service.objects.create(environment=e, kind=kind, name=name, version=version,
                               namespace=namespace, first_seen=now, last_seen=now)
    assert deployments_from_telemetry(team_id=team.pk) == 1
    d = Deployment.objects.get()
    assert (d.environment_id, d.namespace, d.service_name, d.source, d.human_impact,
            d.set_by) == (env.pk, "shop", "checkout", "telemetry", "medium",
                          "system: service.name and service.version")
    assert d.project_version.project.team_id == team.pk
    assert deployments_from_telemetry(team_id=team.pk) == 0
    Service.objects.create(environment=env, kind=NodeKind.SERVICE, name="checkout",
                           version="1.2.0", namespace="east", first_seen=now, last_seen=now)
    assert deployments_from_telemetry(team_id=team.pk) == 1
    assert sorted(Deployment.objects.values_list("namespace", flat=True)) == ["east", "shop"]
    assert not Deployment.objects.filter(environment=theirs).exists()


def test_a_gather_reads_only_the_sboms_it_has_not_seen(team):
    """The components of a deployed SBOM are read once: the next gather holds the very same
    records for it and reads none. A version whose SBOM is replaced is read again and named
    changed; the others are not."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from trustrank.ranking.inputs import changed_between, ranking_inputs_gather

    now = timezone.now()
    env = Environment.objects.create(team=team, name="prod", first_seen=now, last_seen=now)
    versions = {}
    for name in ("checkout", "cart"):
        pv = load_sbom(team, bom([(f"{name}-lib", "1.0", f"pkg:npm/{name}-lib@1.0")]),
                       project=name, version="1.0")
        Deployment.objects.create(environment=env, service_name=name, project_version=pv,
                                  source="api")
        versions[name] = str(pv.pk)
    first = ranking_inputs_gather(team_id=team.pk)
    assert {c.key for c in first.inputs.components} == {"pkg:npm/checkout-lib", "pkg:npm/cart-lib"}
    with CaptureQueriesContext(connection) as queries:
        again = ranking_inputs_gather(team_id=team.pk, previous=first)
    assert not [q for q in queries.captured_queries if "inventory_component" in q["sql"]]
    assert again.sboms is not None and first.sboms is not None
    assert all(again.sboms[k] is held for k, held in first.sboms.items())
    assert changed_between(first, again) == (set(), set())

    load_sbom(team, bom([("cart-lib", "2.0", "pkg:npm/cart-lib@2.0"),
                         ("cart-extra", "1.0", "pkg:npm/cart-extra@1.0")]),
              project="cart", version="1.0")
    with CaptureQueriesContext(connection) as queries:
        third = ranking_inputs_gather(team_id=team.pk, previous=again)
    [read] = [q["sql"] for q in queries.captured_queries if "inventory_component" in q["sql"]]
    # The replaced SBOM alone.
    from trustrank.inventory.models import ProjectVersion

    new_sbom = ProjectVersion.objects.get(pk=versions["cart"]).current_sbom_id
    assert f"unnest('{{{new_sbom}}}'" in read
    assert {(c.project_version, c.key) for c in third.inputs.components} == {
        (versions["checkout"], "pkg:npm/checkout-lib"), (versions["cart"], "pkg:npm/cart-lib"),
        (versions["cart"], "pkg:npm/cart-extra")}
    versions_changed, _services = changed_between(again, third)
    assert versions_changed == {versions["cart"]}
    # A gather made without the held components compares the versions record by record,
    # to the same answer.
    from dataclasses import replace

    assert changed_between(replace(again, sboms=None), replace(third, sboms=None))[0] == {
        versions["cart"]}


def test_a_gather_keeps_the_deployment_records_of_rows_read_again(team):
    """Deployments read again as the same rows are the previous gather's very records (and
    their versions'), so nothing is compared; a changed impact, a new deployment and a
    removed one each make new records that name what changed."""
    from trustrank.ranking.inputs import changed_between, ranking_inputs_gather

    now = timezone.now()
    env = Environment.objects.create(team=team, name="prod", first_seen=now, last_seen=now)
    pvs = {name: load_sbom(team, bom([(f"{name}-lib", "1.0", f"pkg:npm/{name}-lib@1.0")]),
                           project=name, version="1.0") for name in ("checkout", "cart", "ads")}
    for name in ("checkout", "cart"):
        Deployment.objects.create(environment=env, service_name=name,
                                  project_version=pvs[name], source="api")
    first = ranking_inputs_gather(team_id=team.pk)
    again = ranking_inputs_gather(team_id=team.pk, previous=first)
    assert again.inputs.deployments is first.inputs.deployments
    assert again.inputs.project_versions is first.inputs.project_versions
    assert changed_between(first, again) == (set(), set())

    Deployment.objects.filter(service_name="cart").update(human_impact="very high")
    third = ranking_inputs_gather(team_id=team.pk, previous=again)
    assert third.inputs.deployments is not again.inputs.deployments
    assert {(d.service, d.human_impact) for d in third.inputs.deployments} == {
        ("checkout", "medium"), ("cart", "very high")}
    # The row read again keeps its record; only the changed one is made anew.
    kept = {d.service: d for d in again.inputs.deployments}
    assert [d is kept[d.service] for d in third.inputs.deployments] == [
        d.service == "checkout" for d in third.inputs.deployments]
    # The same versions: their records stand.
    assert third.inputs.project_versions is again.inputs.project_versions
    assert changed_between(again, third) == ({str(pvs["cart"].pk)}, {("prod", "cart")})

    Deployment.objects.create(environment=env, service_name="ads",
                              project_version=pvs["ads"], source="api")
    Deployment.objects.filter(service_name="checkout").delete()
    fourth = ranking_inputs_gather(team_id=team.pk, previous=third)
    assert {p.key for p in fourth.inputs.project_versions} == {
        str(pvs["cart"].pk), str(pvs["ads"].pk)}
    assert changed_between(third, fourth) == (
        {str(pvs["ads"].pk), str(pvs["checkout"].pk)}, {("prod", "ads"), ("prod", "checkout")})
