"""Submit functions: the checks done before a job exists, then the job (`<kind>_submit`).

Called by the receivers (apis/), the upload pages and the import_* commands. Each checks
cheaply and completely enough to refuse bad input at once (SubmitRefused) with nothing
stored; the worker validates again (the job may be re-run from its stored payload).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from ingest.bodies import decode_body
from ingest.errors import SubmitRefused
from ingest.models import IngestJob, JobKind
from ingest.services import job_create
from trustrank.accounts.models import FEEDS_WRITE, SITE_SCOPES, Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.identity.engine import trust_bundle_warnings
from trustrank.identity.services.environments import (
    InvalidEnvironment,
    environment_validate,
    strength_rules,
)
from trustrank.inventory.services import ProjectNotFound, project_version_resolve
from trustrank.parsers.nvd import NvdError, NvdPage
from trustrank.parsers.sbom import parse_sbom
from trustrank.parsers.trust_bundle import trust_bundle_parse
from trustrank.parsers.vex import VexError, vex_parse
from trustrank.parsers.x509 import CertificateParseError, certificates_count, certificates_parse
from trustrank.runtime.models import HumanImpact
from trustrank.vulns.services.feeds import FEED_KINDS, FeedSourceError

# --- SBOM -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SbomTarget:
    project_name: str = ""
    project_version: str = ""
    project_uuid: str = ""
    auto_create: bool = False
    # Where the project version runs (issue a deployment after the load), when named.
    environment: str = ""
    service: str = ""
    namespace: str = ""
    human_impact: str = ""


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
        raise SubmitRefused(
            SubmitRefused.INVALID, "The uploaded BOM is invalid", "The BOM is empty."
        )
    limit = settings.TRUSTRANK_MAX_UPLOAD_BYTES
    try:
        data = decode_body(body, content_encoding=content_encoding, limit=limit)
    except ValueError as exc:
        reason = SubmitRefused.TOO_LARGE if "limit" in str(exc) else SubmitRefused.INVALID
        raise SubmitRefused(reason, "The upload cannot be read", str(exc)) from exc
    try:
        # CycloneDX or SPDX: `application/spdx+json`, or JSON that is an SPDX document.
        parse_sbom(data, content_type=content_type)
    except ValueError as exc:
        raise SubmitRefused(SubmitRefused.INVALID, "The uploaded BOM is invalid", str(exc)) from exc
    if not target.project_uuid and not target.project_name:
        raise SubmitRefused(
            SubmitRefused.INVALID,
            "Project required",
            "Name the project: projectName (and projectVersion) or project.",
        )
    if target.service and not target.environment:
        raise SubmitRefused(
            SubmitRefused.INVALID, "Environment required",
            "Name the environment the service runs in: environment (with service).",
        )
    if target.human_impact and target.human_impact not in HumanImpact.values:
        raise SubmitRefused(
            SubmitRefused.INVALID, "Invalid field",
            f"human_impact must be one of {', '.join(HumanImpact.values)}.",
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
        except ProjectNotFound as exc:
            raise SubmitRefused(SubmitRefused.NOT_FOUND, "Project not found", str(exc)) from exc
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
            **(
                {
                    "environment": target.environment,
                    "service": target.service,
                    "namespace": target.namespace,
                    "human_impact": target.human_impact,
                }
                if target.service
                else {}
            ),
        },
        priority=priority,
        content_type=content_type,
        filename=filename,
    )


# --- traces -----------------------------------------------------------------------------------


def traces_submit(
    *,
    principal: Principal,
    team: Team,
    body: bytes,
    json_encoded: bool,
    spans: int,
    priority: int | None,
    content_type: str,
) -> IngestJob:
    """Store an OTLP export the receiver has already decoded and counted."""
    return job_create(
        team=team,
        kind=JobKind.TRACES,
        payload=body,
        principal=principal,
        params={"encoding": "json" if json_encoded else "protobuf", "spans": spans},
        priority=priority,
        content_type=content_type,
    )


# --- certificates and trust bundles -----------------------------------------------------------


def _environment(name: str) -> str:
    try:
        return environment_validate(name)
    except InvalidEnvironment as exc:
        raise SubmitRefused(SubmitRefused.INVALID, "Invalid environment", str(exc)) from exc


def certificates_submit(
    *,
    principal: Principal,
    team: Team,
    body: bytes,
    environment: str,
    service: str = "",
    namespace: str = "",
    observed: str = "",
    priority: int | None = None,
    content_type: str = "",
    filename: str = "",
) -> IngestJob:
    """Parse the upload completely (it is small) so bad input is refused at once with nothing
    stored; a private key is refused here, before the payload could reach the job table."""
    if not principal.can(Scope.CERTS_WRITE, team.pk):
        raise SubmitRefused(
            SubmitRefused.FORBIDDEN, "Forbidden", "You may not upload certificates to this team."
        )
    environment = _environment(environment)
    try:
        count = certificates_count(body)
        # A bundle past the threshold is parsed by the worker (the job fails with the
        # parser's message); parsing 20,000 certificates would hold the request for seconds.
        if count <= settings.TRUSTRANK_CERTS_INLINE_PARSE_MAX:
            count = len(certificates_parse(body))
    except CertificateParseError as exc:
        raise SubmitRefused(
            SubmitRefused.INVALID, "The uploaded certificate upload is invalid", str(exc)
        ) from exc
    return job_create(
        team=team,
        kind=JobKind.CERTIFICATES,
        payload=body,
        principal=principal,
        params={
            "environment": environment,
            "service": service.strip()[:200],
            "namespace": namespace.strip()[:200],
            "observed": observed.strip()[:500],
            "certificates": count,
        },
        priority=priority,
        content_type=content_type,
        filename=filename,
    )


def trust_bundle_submit(
    *,
    principal: Principal,
    team: Team,
    body: bytes,
    environment: str,
    trust_domain: str = "",
    priority: int | None = None,
    content_type: str = "",
    filename: str = "",
) -> IngestJob:
    if not principal.can(Scope.CERTS_WRITE, team.pk):
        raise SubmitRefused(
            SubmitRefused.FORBIDDEN, "Forbidden", "You may not upload trust bundles to this team."
        )
    environment = _environment(environment)
    try:
        bundle = trust_bundle_parse(body, trust_domain=trust_domain.strip())
    except CertificateParseError as exc:
        raise SubmitRefused(
            SubmitRefused.INVALID, "The uploaded trust bundle is invalid", str(exc)
        ) from exc
    return job_create(
        team=team,
        kind=JobKind.TRUST_BUNDLE,
        payload=body,
        principal=principal,
        params={
            "environment": environment,
            "trust_domain": trust_domain.strip(),
            "format": bundle.format,
            "anchors": len(bundle.anchors),
            "trust_domains": list(bundle.trust_domains),
            # Accepted, but the uploader should know (said in the answer and on the page).
            "warnings": trust_bundle_warnings(
                trust_domains=bundle.trust_domains, rules=strength_rules()
            ),
        },
        priority=priority,
        content_type=content_type,
        filename=filename,
    )


# --- feeds ------------------------------------------------------------------------------------


def feed_submit(
    *,
    kind: str,
    payload: bytes,
    principal: Principal,
    team: Team,
    filename: str = "",
    content_type: str = "",
    allow_shrink: bool = False,
) -> IngestJob:
    """Queue one feed import (OSV, KEV, EPSS, NVD) as an ingest job. Feeds are shared by every
    team, so this needs the site-wide `feeds:write` scope, which only the command line grants.

    Raises FeedSourceError for an unknown kind or an empty payload, PermissionError without
    the scope (the callers word these differently: a 400/403 problem, a command error)."""
    if kind not in FEED_KINDS:
        raise FeedSourceError(f"unknown feed {kind!r}: use one of {', '.join(FEED_KINDS)}")
    if not principal.can(FEEDS_WRITE, team.pk):
        raise PermissionError(
            f"importing feeds needs the site-wide '{FEEDS_WRITE}' scope (granted by an operator)"
        )
    if not payload:
        raise FeedSourceError("the feed payload is empty")
    if kind == "nvd":
        nvd_page_check(payload, filename=filename)
    return job_create(
        team=team,
        kind=kind,
        payload=payload,
        principal=principal,
        params={"feed": kind, "allow_shrink": allow_shrink},
        content_type=content_type,
        filename=filename,
    )


def nvd_page_check(payload: bytes, *, filename: str = "") -> None:
    """Read the whole page once, streamed, so that a bad one is refused (400, the CVE or
    the part named) before a job exists; the worker reads it again."""
    try:
        for _cve in NvdPage(payload, filename=filename or "payload"):
            pass
    except NvdError as exc:
        raise FeedSourceError(str(exc)) from exc


def feed_scheduled_submit(*, kind: str) -> IngestJob | None:
    """Fetch the configured source of one feed and queue its import; None when unconfigured."""
    from trustrank.accounts.principal import principal_for_system
    from trustrank.vulns.services.feeds import feed_fetch, feeds_team

    source = settings.TRUSTRANK_FEED_SOURCES.get(kind, "")
    if not source:
        return None
    payload, filename = feed_fetch(kind=kind, source=source)
    team = feeds_team()
    principal = principal_for_system(team_id=team.pk, name="schedule", scopes=SITE_SCOPES)
    return feed_submit(
        kind=kind, payload=payload, principal=principal, team=team, filename=filename
    )



# --- VEX --------------------------------------------------------------------------------------


def vex_submit(
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
    """Read the whole document (schema included) and find its project version, so a bad
    document or an unknown project is refused at once with nothing stored; then the job."""
    if not principal.can(Scope.TRIAGE, team.pk):
        raise SubmitRefused(
            SubmitRefused.FORBIDDEN, "Forbidden",
            "Uploading VEX changes triage: it needs the 'triage' scope in this team.",
        )
    if not body:
        raise SubmitRefused(SubmitRefused.INVALID, "The VEX document is invalid",
                            "The VEX document is empty.")
    try:
        data = decode_body(body, content_encoding=content_encoding,
                           limit=settings.TRUSTRANK_MAX_UPLOAD_BYTES)
    except ValueError as exc:
        reason = SubmitRefused.TOO_LARGE if "limit" in str(exc) else SubmitRefused.INVALID
        raise SubmitRefused(reason, "The upload cannot be read", str(exc)) from exc
    try:
        doc = vex_parse(data)
    except VexError as exc:
        raise SubmitRefused(
            SubmitRefused.INVALID, "The VEX document is invalid", str(exc)
        ) from exc
    if not target.project_uuid and not target.project_name:
        raise SubmitRefused(
            SubmitRefused.INVALID, "Project required",
            "Name the project version: projectName and projectVersion, or project (uuid).",
        )
    try:
        project_version_resolve(
            team=team, name=target.project_name, version=target.project_version,
            version_uuid=target.project_uuid, auto_create=False,
        )
    except ProjectNotFound as exc:
        # Without the SBOM upload's hint: a VEX document never creates a project.
        detail = str(exc).split("; create it", 1)[0]
        raise SubmitRefused(SubmitRefused.NOT_FOUND, "Project not found", detail) from exc
    return job_create(
        team=team,
        kind=JobKind.VEX,
        payload=data,
        principal=principal,
        params={
            "projectName": target.project_name,
            "projectVersion": target.project_version,
            "project": target.project_uuid,
            "format": doc.format,
            "document": doc.id[:500],
            "statements": len(doc.statements) + len(doc.skipped),
        },
        priority=priority,
        content_type=content_type,
        filename=filename,
    )
