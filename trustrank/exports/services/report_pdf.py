"""The PDF report, drawn by ReportLab: landscape A4, the summary page, then one table row per
finding (its cells wrapped to their columns), the column headings and a footer with
"page N of M" on every page.

Why ReportLab and not an HTML renderer: WeasyPrint laid a finding out in about 4 ms of CPU
(CSS cascade, inline layout, painting: 43 s for 10,000 findings on two processes) and held
about 2.4 MB a page until the end. Here a finding's cells are plain strings, wrapped once by
font metrics and drawn as text (about 0.5 ms of CPU each), and a page is kept only as its
drawing operators until the total is known: 10,000 findings in one process, 5 s of CPU and
about 210 MB at the peak, Django and the rows included (bench/report.py).

The text stays text: an embedded TrueType subset with its Unicode map, so it can be
extracted, searched and copied.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import reportlab
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.lib.utils import simpleSplit
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import (
    BaseDocTemplate,
    Flowable,
    Frame,
    NextPageTemplate,
    PageBreak,
    PageTemplate,
    Paragraph,
    Spacer,
    Table,
    TableStyle,
)

FONT = "TrustRankSans"
BOLD = "TrustRankSans-Bold"
SIZE = 6.5  # pt, the findings' text
LEADING = 7.6
PAGE = landscape(A4)
MARGIN = 10 * mm
BOTTOM = 12 * mm
INK = colors.HexColor("#1d2433")
MUTED = colors.HexColor("#5b6478")
RULE = colors.HexColor("#dde2ea")
OK = colors.HexColor("#1f7a3a")
BAD = colors.HexColor("#b3261e")
# Findings per table: a table is split across pages row by row, which copies what is left of
# it; small tables keep that cheap.
TABLE_ROWS = 50
_PAD = 2.0  # pt, left and right of a cell's text
# A table row cannot break across pages: a cell of more lines (a title of thousands of
# characters) is cut, so that its row still fits on a page; the CSV and JSON carry it whole.
MAX_CELL_LINES = 48
CUT = "… (cut here: the CSV and JSON exports have it whole)"

# Debian's fonts-dejavu-core (Unicode coverage), else Bitstream Vera, which ReportLab ships.
_FONT_DIRS = (
    ("/usr/share/fonts/truetype/dejavu", "DejaVuSans.ttf", "DejaVuSans-Bold.ttf"),
    (str(Path(reportlab.__file__).parent / "fonts"), "Vera.ttf", "VeraBd.ttf"),
)


@functools.cache
def fonts_register() -> str:
    """Register the report's fonts once per process; returns the file used."""
    for folder, regular, bold in _FONT_DIRS:
        path = Path(folder) / regular
        if path.is_file() and (Path(folder) / bold).is_file():
            pdfmetrics.registerFont(TTFont(FONT, str(path)))
            pdfmetrics.registerFont(TTFont(BOLD, str(Path(folder) / bold)))
            return str(path)
    raise RuntimeError("no TrueType font for the PDF report (install fonts-dejavu-core)")


@dataclass(frozen=True)
class Column:
    heading: str  # lines joined by "\n"
    width: float  # pt; the last column takes what is left


COLUMNS = (
    Column("Rank", 22),
    Column("Decision", 44),
    Column("Score", 24),
    Column("Vulnerability #finding\nTitle", 150),
    Column("Component@version\nProject / version", 112),
    Column("Service\nEnvironment", 70),
    Column("KEV · EPSS · CVSS\nStatus\nDue", 78),
    Column("Why (explanation)", 0),
)
_WIDTHS = [c.width for c in COLUMNS[:-1]]
_WIDTHS.append(PAGE[0] - 2 * MARGIN - sum(_WIDTHS))
_HEADER_HEIGHT = 3 * LEADING + 4


def _one_line(value: Any, default: str = "—") -> str:
    text = " ".join(str(value).split()) if value not in (None, "") else ""
    return text or default


def _break_word(word: str, width: float) -> list[str]:
    """A word wider than its column, cut where it reaches the edge (a purl, a digest)."""
    lines, start, used = [], 0, 0.0
    for i, ch in enumerate(word):
        w = pdfmetrics.stringWidth(ch, FONT, SIZE)
        if used + w > width and i > start:
            lines.append(word[start:i])
            start, used = i, 0.0
        used += w
    lines.append(word[start:])
    return lines


def wrap(texts: Iterable[str], width: float) -> str:
    """The texts, each on lines of its own, wrapped at spaces to `width` (pt)."""
    inner = width - 2 * _PAD
    out: list[str] = []
    for text in texts:
        for line in simpleSplit(text, FONT, SIZE, inner) or [""]:
            # simpleSplit leaves a single word that is too wide on a line of its own.
            if " " not in line and pdfmetrics.stringWidth(line, FONT, SIZE) > inner:
                out.extend(_break_word(line, inner))
            else:
                out.append(line)
    if len(out) > MAX_CELL_LINES:
        out[MAX_CELL_LINES - 1 :] = simpleSplit(CUT, FONT, SIZE, inner)
    return "\n".join(out)


def finding_cells(row: dict[str, Any]) -> list[str]:
    """One finding as the table's cells (report.report_rows shapes `row`)."""
    project = _one_line(row["project"])
    if row["version"]:
        project = f"{project} / {_one_line(row['version'])}"
    status = _one_line(row["state"])
    if row["justification"]:
        status = f"{status} ({_one_line(row['justification'])})"
    due = row["due_date"].isoformat() if row["due_date"] else "—"
    texts = (
        (_one_line(row["rank"]),),
        (_one_line(row["decision"]),),
        (row["score_text"],),
        (f"{_one_line(row['vuln_id'] or row['category'])} #{row['finding_id']}",
         _one_line(row["title"])),
        (_one_line(row["component"]), project),
        (_one_line(row["service"]), _one_line(row["environment"])),
        (row["flags"], status, f"due {due}"),
        (_one_line(row["explanation_text"]),),
    )
    return [wrap(t, w) for t, w in zip(texts, _WIDTHS, strict=True)]


_TABLE_STYLE = TableStyle(
    [
        ("FONT", (0, 0), (-1, -1), FONT, SIZE, LEADING),
        ("TEXTCOLOR", (0, 0), (-1, -1), INK),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("LEFTPADDING", (0, 0), (-1, -1), _PAD),
        ("RIGHTPADDING", (0, 0), (-1, -1), _PAD),
        ("TOPPADDING", (0, 0), (-1, -1), 1),
        ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5),
        ("LINEBELOW", (0, 0), (-1, -1), 0.4, RULE),
    ]
)


class _Progress(Flowable):
    """Takes no room; reports the findings drawn so far when the page reaches it."""

    def __init__(self, done: int, progress: Callable[[int], None]) -> None:
        super().__init__()
        self.done, self.progress = done, progress

    def wrap(self, *_: float) -> tuple[float, float]:
        return 0, 0

    def draw(self) -> None:
        self.progress(self.done)


def _finding_tables(
    rows: Iterator[dict[str, Any]], progress: Callable[[int], None] | None
) -> Iterator[Flowable]:
    done = 0
    while chunk := [finding_cells(r) for r in islice(rows, TABLE_ROWS)]:
        yield Table(chunk, colWidths=_WIDTHS, style=_TABLE_STYLE)
        done += len(chunk)
        if progress is not None:
            yield _Progress(done, progress)


def _styles() -> dict[str, ParagraphStyle]:
    base = ParagraphStyle("body", fontName=FONT, fontSize=8, leading=10.4, textColor=INK)
    return {
        "body": base,
        "h1": ParagraphStyle("h1", base, fontName=BOLD, fontSize=15, leading=19, spaceAfter=4),
        "h2": ParagraphStyle(
            "h2", base, fontName=BOLD, fontSize=10, leading=13, spaceBefore=8, spaceAfter=3
        ),
        "label": ParagraphStyle("label", base, textColor=MUTED),
        "end": ParagraphStyle("end", base, fontSize=7, textColor=MUTED, spaceBefore=4),
    }


def _mark(ok: bool, word: str) -> str:
    return f'<font name="{BOLD}" color="{(OK if ok else BAD).hexval()}">{escape(word)}</font>'


def _summary_lines(ctx: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, paragraph markup) of the summary's table; every value escaped."""
    meta, chain, point = ctx["meta"], ctx["meta"]["audit_chain"], ctx["checkpoint"]
    generated = f"{ctx['generated_at']:%Y-%m-%d %H:%M:%S} UTC"
    if meta.get("requested_by"):
        generated += f" for {meta['requested_by']}"
    if meta.get("export_id"):
        generated += f" · export {meta['export_id']}"
    filters = "; ".join(f"{k}={','.join(map(str, v))}" for k, v in meta["filter"].items())
    if chain["intact"]:
        chain_text = _mark(True, "intact")
    else:
        chain_text = (
            f"{_mark(False, 'broken')} at event {escape(str(chain.get('first_broken_id')))}: "
            f"{escape(str(chain.get('reason')))}"
        )
    chain_text += (
        f" · {chain.get('events')} events · head digest "
        f"{escape(str(chain.get('head_digest') or '—'))}"
    )
    if point:
        checkpoint = (
            _mark(True, "agrees") if point["ok"]
            else f"{_mark(False, 'disagrees')}: {escape(str(point['problem']))}"
        ) + escape(
            f" · checkpoint {point['id']} of {point['created_at']:%Y-%m-%d %H:%M:%S} UTC"
            f" · head event {point.get('head_event_id') or '—'}"
            f" · {point['events'] if point.get('events') is not None else '—'} events"
            f" · key {point['key_fingerprint']}"
            + (f" · {point['note']}" if point.get("note") else "")
        )
    else:
        checkpoint = "none (manage.py audit_checkpoint signs one)"
    listed = str(ctx["total"])
    if ctx["more"]:
        listed += (
            f" (listed: the first {ctx['shown']} by rank; the CSV and JSON exports carry "
            "them all)"
        )
    ranks = (
        f"ranking run {meta['ranking_run']} ({meta.get('ranks')})"
        if meta.get("ranking_run") else "none"
    )
    team = meta["team"]
    lines = [
        ("Team", escape(f"{team['name']} (id {team['id']})")),
        ("As of", escape(ctx["as_of_label"])),
        ("Generated", escape(generated)),
        ("Filters", escape(filters or "none (every finding)")),
        ("Ranks", escape(ranks)),
        ("Audit chain", chain_text),
        ("Last checkpoint", checkpoint),
        ("Findings", escape(listed)),
    ]
    return lines + [("Note", escape(str(note))) for note in meta.get("notes") or []]


def _counts_table(heading: str, counts: list[tuple[str, int]]) -> Table:
    data = [[heading, "Findings"], *[[str(k), str(n)] for k, n in counts]]
    return Table(
        data,
        style=[
            ("FONT", (0, 0), (-1, -1), FONT, 8, 10.4),
            ("FONT", (0, 0), (-1, 0), BOLD, 8, 10.4),
            ("TEXTCOLOR", (0, 0), (-1, -1), INK),
            ("ALIGN", (1, 0), (1, -1), "RIGHT"),
            ("LINEBELOW", (0, 0), (-1, -1), 0.5, RULE),
            ("LEFTPADDING", (0, 0), (-1, -1), 0),
            ("RIGHTPADDING", (0, 0), (-1, -1), 6),
            ("TOPPADDING", (0, 0), (-1, -1), 1),
            ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5),
        ],
    )


def _summary(ctx: dict[str, Any], styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    lines = _summary_lines(ctx)
    meta_table = Table(
        [[Paragraph(label, styles["label"]), Paragraph(value, styles["body"])]
         for label, value in lines],
        colWidths=[34 * mm, PAGE[0] - 2 * MARGIN - 34 * mm],
        style=[
            ("VALIGN", (0, 0), (-1, -1), "TOP"),
            ("LEFTPADDING", (0, 0), (-1, -1), 0),
            ("TOPPADDING", (0, 0), (-1, -1), 1),
            ("BOTTOMPADDING", (0, 0), (-1, -1), 1),
        ],
    )
    counts = Table(
        [[
            _counts_table("SSVC decision", ctx["by_decision"]),
            _counts_table("Flag", [
                ("in CISA KEV", ctx["kev"]), ("overdue (open, past due)", ctx["overdue"])
            ]),
            _counts_table("State", ctx["by_state"]),
            _counts_table("Severity", ctx["by_severity"]),
        ]],
        style=[("VALIGN", (0, 0), (-1, -1), "TOP"), ("LEFTPADDING", (0, 0), (-1, -1), 0),
               ("RIGHTPADDING", (0, 0), (-1, -1), 10 * mm)],
        hAlign="LEFT",
    )
    title = f"Findings report — {ctx['meta']['team']['name']}"
    return [Paragraph(escape(title), styles["h1"]), meta_table,
            Paragraph("Counts", styles["h2"]), counts]


def _numbered_canvas(footer: str) -> type[Canvas]:
    class NumberedCanvas(Canvas):
        """Keeps each page's drawing until the end, when "page N of M" can be written."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._pages: list[dict[str, Any]] = []

        def showPage(self) -> None:
            self._pages.append(dict(self.__dict__))
            self._startPage()

        def save(self) -> None:
            total = len(self._pages)
            for number, state in enumerate(self._pages, start=1):
                self.__dict__.update(state)
                self.setFont(FONT, 7)
                self.setFillColor(MUTED)
                self.drawString(MARGIN, BOTTOM - 7 * mm, footer)
                self.drawRightString(PAGE[0] - MARGIN, BOTTOM - 7 * mm,
                                     f"page {number} of {total}")
                Canvas.showPage(self)
            self._pages = []
            super().save()

    return NumberedCanvas


def _draw_headings(canvas: Canvas, _doc: Any) -> None:
    """The findings' column headings at the top of each of their pages."""
    canvas.saveState()
    canvas.setFont(BOLD, SIZE)
    canvas.setFillColor(INK)
    top = PAGE[1] - MARGIN
    x = MARGIN
    for column, width in zip(COLUMNS, _WIDTHS, strict=True):
        for i, line in enumerate(column.heading.split("\n")):
            canvas.drawString(x + _PAD, top - SIZE - i * LEADING, line)
        x += width
    canvas.setStrokeColor(INK)
    canvas.setLineWidth(0.6)
    canvas.line(MARGIN, top - _HEADER_HEIGHT, PAGE[0] - MARGIN, top - _HEADER_HEIGHT)
    canvas.restoreState()


def report_pdf(
    ctx: dict[str, Any],
    rows: Iterator[dict[str, Any]],
    progress: Callable[[int], None] | None = None,
) -> bytes:
    """The report's PDF. `ctx`: the summary (report.report_summary), meta, generated_at,
    as_of_label, shown, more; `rows`: the listed findings in rank order."""
    fonts_register()
    styles = _styles()
    width, height = PAGE[0] - 2 * MARGIN, PAGE[1] - MARGIN - BOTTOM
    summary_page = PageTemplate(
        id="summary", frames=[Frame(MARGIN, BOTTOM, width, height, 0, 0, 0, 0, id="summary")]
    )
    findings_page = PageTemplate(
        id="findings",
        frames=[Frame(MARGIN, BOTTOM, width, height - _HEADER_HEIGHT - 1, 0, 0, 0, 0,
                      id="findings")],
        onPage=_draw_headings,
    )
    out = io.BytesIO()
    meta = ctx["meta"]
    generated: datetime = ctx["generated_at"]
    doc = BaseDocTemplate(
        out,
        pagesize=PAGE,
        leftMargin=MARGIN, rightMargin=MARGIN, topMargin=MARGIN, bottomMargin=BOTTOM,
        title=f"TrustRank findings report · {meta['team']['name']}",
        author="TrustRank",
        pageTemplates=[summary_page, findings_page],
    )
    story: list[Flowable] = [*_summary(ctx, styles), NextPageTemplate("findings"), PageBreak()]
    before = len(story)
    story.extend(_finding_tables(rows, progress))
    if len(story) == before:
        story.append(Paragraph("No finding matches.", styles["body"]))
    story += [
        Spacer(0, 2),
        Paragraph(
            f"End of the report: {ctx['shown']} of {ctx['total']} findings listed, in rank "
            "order.",
            styles["end"],
        ),
    ]
    footer = (
        f"TrustRank report {meta.get('export_id') or ''} · {meta['team']['name']} · generated "
        f"{generated:%Y-%m-%d %H:%M:%S} UTC · as of {ctx['as_of_label']}"
    )
    doc.build(story, canvasmaker=_numbered_canvas(footer))
    return out.getvalue()
