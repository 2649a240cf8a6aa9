"""Loading SBOM jobs (the worker's service, run in-process here; see test_e2e for a real
worker): what is stored, idempotency, current inventory, and failures that store nothing."""

from __future__ import annotations

import json

import pytest

from ingest.models import IngestJob, JobStatus
from ingest.services import job_create, job_run
from tests.conftest import DATA
from tests.inventory.test_cyclonedx_parser import REAL_SBOMS
from trustrank.accounts.principal import principal_for_key
from trustrank.accounts.services import api_key_issue
from trustrank.inventory.models import Component, ComponentDependency, Project, ProjectVersion, Sbom

pytestmark = pytest.mark.django_db


def submit(team, payload: bytes, *, name="shop", version="1.0", auto_create=True) -> IngestJob:
    key = api_key_issue(team=team, name="t", scopes=["sbom:write"]).api_key
    return job_create(
        team=team,
        kind="sbom",
        payload=payload,
        principal=principal_for_key(key),
        params={"projectName": name, "projectVersion": version, "autoCreate": auto_create},
    )


def run(job: IngestJob) -> IngestJob:
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    return job


@pytest.mark.parametrize(("name", "spec", "count"), REAL_SBOMS)
def test_every_real_sbom_is_stored_with_its_component_count(team, name, spec, count):
    job = run(submit(team, (DATA / "sbom" / name).read_bytes(), name=name))
    assert job.status == JobStatus.DONE, job.error
    assert job.counts["components"] == count
    sbom = Sbom.objects.get(project_version__project__name=name)
    assert sbom.spec_version == spec
    assert Component.objects.filter(sbom=sbom).count() == count
    assert sbom.project_version.current_sbom == sbom
    assert job.started_at and job.finished_at and job.attempts == 1


def test_metadata_and_dependency_graph_are_stored(team):
    data = (DATA / "sbom" / "cdx-1.4_maven_dependency-track-apiserver-4.5.0.json").read_bytes()
    doc = json.loads(data)
    job = run(submit(team, data))
    sbom = Sbom.objects.get()
    assert sbom.serial_number == doc["serialNumber"]
    assert sbom.bom_version == doc["version"]
    assert sbom.bom_timestamp is not None
    assert sbom.tools and sbom.tools[0]["name"]
    assert sbom.described_component["name"] == doc["metadata"]["component"]["name"]
    edges = sum(len(d.get("dependsOn", [])) for d in doc["dependencies"])
    assert (
        ComponentDependency.objects.filter(sbom=sbom).count() == edges == job.counts["dependencies"]
    )
    comp = Component.objects.get(sbom=sbom, name="jackson-databind")
    assert comp.hashes["SHA-1"]
    assert comp.purl.startswith("pkg:maven/")


def test_identical_reupload_is_idempotent(team):
    data = (DATA / "sbom" / "cdx-1.6_pypi_torch-nvidia-cuda.json").read_bytes()
    first, second = run(submit(team, data)), run(submit(team, data))
    assert first.status == second.status == JobStatus.DONE
    assert Sbom.objects.count() == 1
    assert Component.objects.count() == 22
    assert second.result["duplicate"] is True


def test_running_one_job_twice_stores_it_once(team):
    job = run(submit(team, (DATA / "sbom" / "cdx-1.6_pypi_torch-nvidia-cuda.json").read_bytes()))
    # A second delivery of the same message after completion is a no-op.
    job_run(job_id=str(job.pk))
    # And a forced re-run (as after a crash between load and completion) stores nothing new.
    IngestJob.objects.filter(pk=job.pk).update(status=JobStatus.QUEUED)
    job = run(job)
    assert job.status == JobStatus.DONE
    assert Sbom.objects.count() == 1
    assert Component.objects.count() == 22


def test_newer_sbom_becomes_current_and_older_stays_as_history(team):
    old = (DATA / "sbom" / "cdx-1.6_pypi_poetry-project-56deps.json").read_bytes()
    new = (DATA / "sbom" / "cdx-1.6_pypi_torch-nvidia-cuda.json").read_bytes()
    run(submit(team, old))
    run(submit(team, new))
    pv = ProjectVersion.objects.get()
    assert pv.sboms.count() == 2
    assert pv.current_sbom.component_count == 22


def test_older_revision_of_the_same_document_does_not_replace_current(team):
    doc = json.loads((DATA / "sbom" / "cdx-1.6_pypi_torch-nvidia-cuda.json").read_bytes())
    doc["serialNumber"] = "urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79"
    doc["version"] = 5
    run(submit(team, json.dumps(doc).encode()))
    doc["version"] = 2
    doc["components"] = doc["components"][:3]
    run(submit(team, json.dumps(doc).encode()))
    pv = ProjectVersion.objects.get()
    assert pv.sboms.count() == 2
    assert pv.current_sbom.bom_version == 5


def test_invalid_payload_fails_the_job_with_a_reason_and_stores_nothing(team):
    job = run(submit(team, b'{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": 3}'))
    assert job.status == JobStatus.FAILED
    assert "$.components" in job.error
    assert not Project.objects.exists()
    assert not Sbom.objects.exists()


def test_unknown_project_without_autocreate_fails_the_job(team):
    data = (DATA / "sbom" / "cdx-1.6_dt-valid-bom.json").read_bytes()
    job = run(submit(team, data, auto_create=False))
    assert job.status == JobStatus.FAILED
    assert "does not exist" in job.error
    assert not Sbom.objects.exists()


def test_a_failure_midway_leaves_nothing_partial(team, monkeypatch):
    """The load is one transaction: an error after the components are written undoes them."""
    from trustrank.inventory import services

    def explode(**kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(services, "_copy_dependencies", lambda *a, **k: explode())
    job = run(submit(team, (DATA / "sbom" / "cdx-1.4_maven_quarkus-deps.json").read_bytes()))
    assert job.status == JobStatus.FAILED
    assert "Internal error" in job.error
    assert not Sbom.objects.exists()
    assert not Component.objects.exists()
    assert not Project.objects.exists()


def test_other_jobs_go_on_after_a_failure(team):
    bad = run(submit(team, b"not a bom", name="bad"))
    good = run(
        submit(team, (DATA / "sbom" / "cdx-1.6_dt-valid-bom.json").read_bytes(), name="good")
    )
    assert bad.status == JobStatus.FAILED
    assert good.status == JobStatus.DONE
