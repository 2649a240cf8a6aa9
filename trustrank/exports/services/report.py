"""The printable report: a summary page (counts by SSVC decision, KEV, overdue, the audit
chain and its last signed checkpoint, what was asked for), then one compact row per finding
in rank order. Counts cover every matching finding; the rows are the first
TRUSTRANK_EXPORT_REPORT_MAX_ROWS by rank (the CSV and JSON exports carry them all).

The same summary and rows feed two renderers: the HTML page (templates/exports/report.html,
with print CSS, for the browser) and the PDF (services/report_pdf.py, ReportLab).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from itertools import islice
from typing import Any

from django.conf import settings
from django.db.models import CharField, Count, F, Q
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.template.loader import render_to_string
from django.utils import timezone

from trustrank.exports.services.formats import Progress, explanation_text
from trustrank.exports.services.report_pdf import report_pdf
from trustrank.exports.services.rows import ExportSelection, export_rows
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.services.audit_checkpoint import audit_checkpoint_summary
from trustrank.risk.inputs import DECISIONS

# Findings per block of the HTML page.
PART_ROWS = 200
TEMPLATE = "exports/report.html"


def _counts(
    selection: ExportSelection, key: str, expression: Any = None
) -> list[tuple[str, int]]:
    """(value, findings) of a column of the selection, or of `expression` (named `key`)."""
    qs = selection.queryset.order_by()
    grouped = qs.values(**{key: expression}) if expression is not None else qs.values(key)
    rows = grouped.annotate(n=Count("id")).values_list(key, "n")
    return sorted(((k or "—", n) for k, n in rows), key=lambda kv: (-kv[1], kv[0]))


def _state_expression(meta: dict[str, Any]) -> Any:
    if meta.get("as_of"):
        # The selection's rows carry the audit event of that time (`as_of_after`), not its
        # state as a column: a finding no event had triaged then keeps its own state.
        return Coalesce(KT("as_of_after__state"), F("state"), output_field=CharField())
    return F("state")


def _day_of(meta: dict[str, Any]) -> date:
    as_of = meta.get("as_of")
    if as_of:
        return timezone.localdate(datetime.fromisoformat(as_of))
    return timezone.localdate()


def report_summary(selection: ExportSelection, meta: dict[str, Any]) -> dict[str, Any]:
    """What the first page says: counts of every matching finding (not just those listed)."""
    by_state = _counts(selection, "state_then", _state_expression(meta))
    decisions = dict(_counts(selection, "decision_"))
    # SSVC order, most urgent first, then "—" (findings without a rank).
    by_decision: list[tuple[str, int]] = [(d, decisions.pop(d, 0)) for d in reversed(DECISIONS)]
    by_decision += sorted(decisions.items())
    flags = (
        selection.queryset.order_by()
        .annotate(state_then=_state_expression(meta))
        .aggregate(
            kev=Count("id", filter=Q(in_kev=True)),
            overdue=Count(
                "id",
                filter=Q(state_then__in=OPEN_STATES, due__due_date__lt=_day_of(meta)),
            ),
        )
    )
    return {
        "total": sum(n for _, n in by_state),
        "by_state": by_state,
        "by_decision": by_decision,
        "by_severity": _counts(selection, "severity"),
        "kev": flags["kev"],
        "overdue": flags["overdue"],
        "checkpoint": audit_checkpoint_summary(team_id=meta["team"]["id"]),
    }


def _flags(row: dict[str, Any]) -> str:
    epss = row["epss"]
    cvss = row["cvss"]
    return " · ".join(
        (
            "KEV" if row["kev"] else "—",
            f"{epss:.2f}" if epss is not None else "—",
            f"{cvss:.1f}" if cvss is not None else "—",
        )
    )


def report_rows(selection: ExportSelection) -> Iterator[dict[str, Any]]:
    """The listed findings in rank order (unranked last), each shaped for one table row."""
    ordered = ExportSelection(
        queryset=selection.queryset.order_by(
            F("rank_").asc(nulls_last=True), "-baseline_priority", "-id"
        ),
        ranks=selection.ranks,
        notes=selection.notes,
    )
    for row in export_rows(ordered, limit=settings.TRUSTRANK_EXPORT_REPORT_MAX_ROWS):
        name, version = row["_component_name"], row["_component_version"]
        row["component"] = (
            f"{name}@{version}" if name and version else name or row["component_purl"] or "—"
        )
        row["explanation_text"] = explanation_text(row["explanation"])
        row["score_text"] = "—" if row["score"] is None else f"{row['score']:.1f}"
        row["flags"] = _flags(row)
        yield row


def _parts(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    while part := list(islice(rows, PART_ROWS)):
        yield part


def _context(
    meta: dict[str, Any], summary: dict[str, Any], generated_at: datetime
) -> dict[str, Any]:
    return {
        **summary,
        "meta": meta,
        "generated_at": generated_at,
        "as_of_label": meta.get("as_of") or "now",
    }


def _shown(summary: dict[str, Any]) -> dict[str, int]:
    shown = min(summary["total"], settings.TRUSTRANK_EXPORT_REPORT_MAX_ROWS)
    return {"shown": shown, "more": summary["total"] - shown}


def report_html(
    selection: ExportSelection, meta: dict[str, Any], progress: Progress | None = None
) -> str:
    summary = report_summary(selection, meta)
    html = render_to_string(
        TEMPLATE,
        {
            **_context(meta, summary, timezone.now()),
            **_shown(summary),
            "summary": True,
            "parts": list(_parts(report_rows(selection))) or [[]],
            "end": True,
        },
    )
    if progress is not None:
        # The report covers every matching finding (its counts), though it may list fewer.
        progress(summary["total"])
    return html


def report_html_chunks(
    selection: ExportSelection, meta: dict[str, Any], progress: Progress | None = None
) -> Iterator[bytes]:
    yield report_html(selection, meta, progress).encode()


def report_pdf_chunks(
    selection: ExportSelection, meta: dict[str, Any], progress: Progress | None = None
) -> Iterator[bytes]:
    summary = report_summary(selection, meta)
    context = {**_context(meta, summary, timezone.now()), **_shown(summary)}
    rows = report_rows(selection) if context["shown"] else iter(())
    pdf = report_pdf(context, rows, progress)
    if progress is not None:
        # As the HTML: the report covers every matching finding, though it may list fewer.
        progress(summary["total"])
    yield pdf
