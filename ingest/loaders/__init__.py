"""Loaders: one per job kind, `<kind>_load(*, job, payload, progress) -> counts`.

A loader parses the stored payload (trustrank.parsers), calls the domain services with plain
data, and turns domain errors into IngestRejected (the job fails with that message). It must
be idempotent: a job may run again after a worker died (see ingest/handlers.py).
"""
