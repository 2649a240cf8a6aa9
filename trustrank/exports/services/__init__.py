"""Exports of findings: what to export (params), the rows (rows), the file formats, and the
export's life (run: streamed or as a job, digest and audit event)."""
