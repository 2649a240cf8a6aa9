"""Accepting an SBOM upload: the checks done before the job exists, then the job."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from ingest.bodies import decode_body
from ingest.models import IngestJob, JobKind
from ingest.receivers import UploadRefused
from ingest.services import job_create
from trustrank.accounts.models import Team
from trustrank.accounts.principal import Principal
from trustrank.inventory.services import project_version_resolve
from trustrank.parsers.cyclonedx import parse_cyclonedx


@dataclass(frozen=True)
class SbomTarget:
    project_name: str = ""
    project_version: str = ""
    project_uuid: str = ""
    auto_create: bool = False


def parse_bool(raw: object) -> bool:
    """cdxgen sends "autoCreate": "true" as a string; Dependency-Track accepts both."""
    if isinstance(raw, bool):
        return raw
    return str(raw or "").strip().lower() in ("true", "1", "yes", "on")


def sbom_submit(
    *,
    principal: Principal,
    team: Team,
    body: bytes,
    content_encoding: str,
    target: SbomTarget,
    priority: int | None,
    content_type: str = "",
    filename: str = "",
) -> IngestJob:
    """Check the upload cheaply and completely enough to answer 400 at once, then store it.

    Validation runs again in the worker (the job may be re-run from its stored payload); the
    check here is what lets a pipeline see "invalid BOM" in its own build log.
    """
    if not body:
        raise UploadRefused(400, "The uploaded BOM is invalid", "The BOM is empty.")
    limit = settings.TRUSTRANK_MAX_UPLOAD_BYTES
    try:
        data = decode_body(body, content_encoding=content_encoding, limit=limit)
    except ValueError as exc:
        status = 413 if "limit" in str(exc) else 400
        raise UploadRefused(status, "The upload cannot be read", str(exc)) from exc
    try:
        parse_cyclonedx(data)
    except ValueError as exc:
        raise UploadRefused(400, "The uploaded BOM is invalid", str(exc)) from exc
    if not target.project_uuid and not target.project_name:
        raise UploadRefused(
            400,
            "Project required",
            "Name the project: projectName (and projectVersion) or project.",
        )
    if not target.auto_create or target.project_uuid:
        try:
            project_version_resolve(
                team=team,
                name=target.project_name,
                version=target.project_version,
                version_uuid=target.project_uuid,
                auto_create=False,
            )
        except LookupError as exc:
            raise UploadRefused(404, "Project not found", str(exc)) from exc
    return job_create(
        team=team,
        kind=JobKind.SBOM,
        payload=data,
        principal=principal,
        params={
            "projectName": target.project_name,
            "projectVersion": target.project_version,
            "project": target.project_uuid,
            "autoCreate": target.auto_create,
        },
        priority=priority,
        content_type=content_type,
        filename=filename,
    )
