"""Applying a VEX document to the triage of a project version's findings."""

from __future__ import annotations

from typing import Any

from ingest.errors import IngestRejected
from ingest.models import IngestJob
from ingest.services import ProgressFn
from trustrank.findings.services.audit import Actor
from trustrank.inventory.services import ProjectNotFound, project_version_resolve
from trustrank.parsers.vex import VexError, vex_parse
from trustrank.vulns.services.vex import findings_vex_apply


def vex_load(*, job: IngestJob, payload: bytes, progress: ProgressFn) -> dict[str, Any]:
    """Parse the stored document and apply every statement (in the job's transaction: a
    killed worker leaves nothing, and the job runs again from its payload)."""
    progress(phase="validating and parsing")
    try:
        doc = vex_parse(payload)
    except VexError as exc:
        raise IngestRejected(f"The VEX document is invalid: {exc}") from exc
    params = job.params or {}
    try:
        pv = project_version_resolve(
            team=job.team,
            name=params.get("projectName", ""),
            version=params.get("projectVersion", ""),
            version_uuid=params.get("project", ""),
            auto_create=False,
        )
    except ProjectNotFound as exc:
        raise IngestRejected(str(exc).split("; create it", 1)[0]) from exc
    progress(phase="applying statements", done=0, total=len(doc.statements))
    result = findings_vex_apply(
        project_version=pv,
        doc=doc,
        actor=Actor.of_job(job, what=f"VEX job {job.pk}"),
        ref=str(job.pk),
        label=f"{doc.format} document {doc.id or job.digest[:12]}",
    )
    progress(phase="applied", done=len(doc.statements), total=len(doc.statements))
    summary = result.as_dict()
    return {
        "statements": summary["statements"],
        "applied": summary["applied"],
        "unchanged": summary["unchanged"],
        "unmatched": summary["unmatched"],
        "_result": {
            "format": doc.format,
            "document": doc.id,
            "project_version_uuid": str(pv.uuid),
            "unmatched_statements": summary["unmatched_statements"],
        },
    }
