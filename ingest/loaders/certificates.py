"""Loading certificate uploads into the identity app."""

from __future__ import annotations

from typing import Any

from ingest.errors import IngestRejected
from ingest.models import IngestJob
from ingest.services import ProgressFn
from trustrank.identity.services.certificates import certificates_import
from trustrank.parsers.x509 import CertificateParseError, certificates_parse


def certificates_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    params = job.params or {}
    try:
        parsed = certificates_parse(payload)
    except CertificateParseError as exc:
        raise IngestRejected(str(exc)) from exc
    return certificates_import(
        team_id=job.team_id,
        environment=str(params.get("environment") or "default"),
        certificates=parsed,
        service=str(params.get("service") or ""),
        namespace=str(params.get("namespace") or ""),
        observed=str(params.get("observed") or ""),
        job_id=job.pk,
        progress=progress,
    )
