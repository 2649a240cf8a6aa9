"""Which loader (ingest/loaders/<kind>.py) loads which kind of job.

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
    "sbom": Handler("ingest.loaders.sbom.sbom_load"),
    # OSV commits in batches and re-matches afterwards; KEV and EPSS are all-or-nothing.
    "osv": Handler("ingest.loaders.feeds.osv_load", atomic=False),
    "kev": Handler("ingest.loaders.feeds.kev_load"),
    "epss": Handler("ingest.loaders.feeds.epss_load"),
    # All-or-nothing too, though streamed: the page's CVEs go through COPY in the job's
    # transaction, so a page bad half-way stores nothing.
    "nvd": Handler("ingest.loaders.feeds.nvd_load"),
    "traces": Handler("ingest.loaders.traces.traces_load"),
    "certificates": Handler("ingest.loaders.certificates.certificates_load"),
    "trust_bundle": Handler("ingest.loaders.trust_bundle.trust_bundle_load"),
    # Cluster metrics and Kubernetes objects; params["format"] picks the loader.
    "telemetry": Handler("ingest.loaders.cluster.telemetry_load"),
    # All statements of a document in one transaction: applied together or not at all.
    "vex": Handler("ingest.loaders.vex.vex_load"),
}
