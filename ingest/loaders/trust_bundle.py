"""Loading a trust bundle (PEM CAs or a SPIFFE bundle) into the identity app."""

from __future__ import annotations

from typing import Any

from ingest.errors import IngestRejected
from ingest.models import IngestJob
from ingest.services import ProgressFn
from trustrank.identity.services.certificates import trust_bundle_replace
from trustrank.parsers.trust_bundle import trust_bundle_parse
from trustrank.parsers.x509 import CertificateParseError


def trust_bundle_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    params = job.params or {}
    try:
        parsed = trust_bundle_parse(payload, trust_domain=str(params.get("trust_domain") or ""))
    except CertificateParseError as exc:
        raise IngestRejected(str(exc)) from exc
    return trust_bundle_replace(
        team_id=job.team_id,
        environment=str(params.get("environment") or "default"),
        parsed=parsed,
        digest=job.digest,
        job_id=job.pk,
        progress=progress,
    )
