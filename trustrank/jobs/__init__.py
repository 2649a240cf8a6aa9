"""The one job system: every long piece of work (ingest, bulk triage, ranking run, replay run,
export, and any new kind) is a row of a `Job` subclass run by one runner (docs/architecture.md).
"""
