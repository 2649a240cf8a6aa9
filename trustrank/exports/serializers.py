"""The shape of an export's status, for the API and the page alike."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from trustrank.exports.models import Export, ExportStatus


def export_status_data(export: Export) -> dict[str, Any]:
    done = export.status == ExportStatus.DONE and not export.streamed
    return {
        "id": export.pk,
        "team": export.team_id,
        "format": export.format,
        "filter": export.filter_params,
        "as_of": export.as_of,
        "ranking_run": export.ranking_run_id,
        "streamed": export.streamed,
        "status": export.status,
        "progress_done": export.progress_done,
        "progress_total": export.progress_total,
        "rows": export.rows,
        "size_bytes": export.size_bytes,
        "sha256": export.sha256 or None,
        "requested_by": export.requested_by_label,
        "created_at": export.created_at,
        "started_at": export.started_at,
        "finished_at": export.finished_at,
        "error": export.error or None,
        "metadata": export.metadata,
        "status_url": reverse("api-export", args=[export.pk]),
        "download_url": reverse("api-export-download", args=[export.pk]) if done else None,
    }
