"""Which service loads which kind of job.

Each handler is `handler(*, job, payload, progress) -> dict` returning the counts to store on
the job. It raises IngestRejected for bad input. It must be idempotent: a job may run again
after a worker died (the sweep), and the result must be as if it ran once.

`atomic=True` runs the handler and the job's completion in one transaction (nothing partial
is ever visible). Handlers that stream large imports use `atomic=False`, commit in batches of
idempotent upserts and report progress between them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Handler:
    path: str
    atomic: bool = True


HANDLERS: dict[str, Handler] = {
    "sbom": Handler("trustrank.inventory.services.sbom_ingest_job"),
    # OSV commits in batches and re-matches afterwards; KEV and EPSS are all-or-nothing.
    "osv": Handler("trustrank.vulns.services.feeds.osv_import_job", atomic=False),
    "kev": Handler("trustrank.vulns.services.feeds.kev_import_job"),
    "epss": Handler("trustrank.vulns.services.feeds.epss_import_job"),
    "traces": Handler("trustrank.runtime.services.traces_ingest_job"),
    "certificates": Handler("trustrank.identity.services.certificates_ingest_job"),
    "trust_bundle": Handler("trustrank.identity.services.trust_bundle_ingest_job"),
    # Cluster metrics and Kubernetes objects; params["format"] picks the loader.
    "telemetry": Handler("ingest.loaders.cluster.telemetry_load"),
}
