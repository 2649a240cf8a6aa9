"""The printable report: one template (templates/exports/report.html, with print CSS) served
as HTML and rendered to PDF by WeasyPrint. Counts cover every matching finding; the table
lists the first TRUSTRANK_EXPORT_REPORT_MAX_ROWS by rank (a PDF of a million rows helps
nobody — the CSV and JSON exports carry them all)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import CharField, Count, F
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.template.loader import render_to_string
from django.utils import timezone

from trustrank.exports.services.formats import Progress, explanation_text
from trustrank.exports.services.rows import ExportSelection, export_rows


def _counts(
    selection: ExportSelection, key: str, expression: Any = None
) -> list[tuple[str, int]]:
    """(value, findings) of a column of the selection, or of `expression` (named `key`)."""
    qs = selection.queryset.order_by()
    grouped = qs.values(**{key: expression}) if expression is not None else qs.values(key)
    rows = grouped.annotate(n=Count("id")).values_list(key, "n")
    return sorted(((k or "—", n) for k, n in rows), key=lambda kv: (-kv[1], kv[0]))


def report_html(
    selection: ExportSelection, meta: dict[str, Any], progress: Progress | None = None
) -> str:
    limit = settings.TRUSTRANK_EXPORT_REPORT_MAX_ROWS
    if meta.get("as_of"):
        # The selection's rows carry the audit event of that time (`as_of_after`), not its
        # state as a column: a finding no event had triaged then keeps its own state.
        by_state = _counts(
            selection, "state_then", Coalesce(
                KT("as_of_after__state"), F("state"), output_field=CharField()
            )
        )
    else:
        by_state = _counts(selection, "state")
    total = sum(n for _, n in by_state)
    ordered = ExportSelection(
        queryset=selection.queryset.order_by(
            F("rank_").asc(nulls_last=True), "-baseline_priority", "-id"
        ),
        ranks=selection.ranks,
        notes=selection.notes,
    )
    rows = []
    for row in export_rows(ordered, limit=limit):
        row["explanation_text"] = explanation_text(row["explanation"])
        rows.append(row)
    if progress is not None:
        # The report covers every matching finding (its counts), though it lists fewer.
        progress(total)
    return render_to_string(
        "exports/report.html",
        {
            "meta": meta,
            "total": total,
            "by_state": by_state,
            "by_decision": _counts(selection, "decision_"),
            "by_severity": _counts(selection, "severity"),
            "rows": rows,
            "shown": len(rows),
            "more": max(0, total - len(rows)),
            "generated_at": timezone.now(),
        },
    )


def report_html_chunks(
    selection: ExportSelection, meta: dict[str, Any], progress: Progress | None = None
) -> Iterator[bytes]:
    yield report_html(selection, meta, progress).encode()


def pdf_renderer_problem() -> str:
    """Why a PDF cannot be made here ('' when it can): WeasyPrint needs Pango, a system
    library (Debian: libpango-1.0-0 libpangoft2-1.0-0; the Docker image has it)."""
    try:
        import weasyprint  # noqa: F401
    except (ImportError, OSError) as exc:
        return (
            "format=pdf needs WeasyPrint and the Pango library on the server "
            f"({exc.__class__.__name__}: {str(exc)[:200]}); format=html gives the same "
            "printable report"
        )
    return ""


def report_pdf_chunks(
    selection: ExportSelection, meta: dict[str, Any], progress: Progress | None = None
) -> Iterator[bytes]:
    # Imported here: WeasyPrint loads Pango through cffi, which only the PDF path needs.
    from weasyprint import HTML

    html = report_html(selection, meta, progress)
    yield HTML(string=html, base_url=str(settings.BASE_DIR)).write_pdf()
