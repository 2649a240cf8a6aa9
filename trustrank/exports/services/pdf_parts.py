"""The PDF report's parts: HTML in, PDF out, then joined and numbered.

WeasyPrint lays out a whole document before writing any of it, so its memory grows with the
pages (about 2.4 MB a page: 10,000 findings in one document took 2.4 GB), and it costs about
4 ms of CPU per finding. So the report is rendered in parts of a few hundred findings, each
laid out, written and dropped, on up to TRUSTRANK_EXPORT_PDF_PROCESSES processes side by
side (fresh interpreters that import WeasyPrint only: no Django, no database connection).
pypdf joins the parts; the page numbers ("page 3 of 412") are stamped on afterwards, as only
then is the count known.

No Django at import: the worker processes import this module by name.
"""

from __future__ import annotations

import io
import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

# Helvetica's advance widths (1/1000 em) of the characters a page number uses: the stamp is
# right-aligned with the PDF's base-14 font, which every reader has (nothing to embed).
_HELVETICA = {" ": 278, "a": 556, "e": 556, "f": 278, "g": 556, "o": 556, "p": 556}
_FONT = "/TRPageNo"
_FONT_SIZE = 7.0
_MARGIN_PT = 10 / 25.4 * 72  # the template's @page margin: 10 mm at the sides
_BOTTOM_PT = 5 / 25.4 * 72  # below the footer line WeasyPrint writes


def part_render(html: str, base_url: str) -> bytes:
    """One part's PDF."""
    from weasyprint import HTML

    return bytes(HTML(string=html, base_url=base_url).write_pdf())


class PartRenderer:
    """Renders parts in order, on a pool of `processes` (1: in this process). A pool that
    cannot be started (no process creation here) falls back to this process."""

    def __init__(self, *, processes: int, base_url: str) -> None:
        self.processes = processes
        self.base_url = base_url
        self.pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> PartRenderer:
        if self.processes > 1:
            try:
                # Spawned, not forked: a fork of a process with threads (a Celery worker) and
                # open database connections is unsafe.
                self.pool = ProcessPoolExecutor(
                    max_workers=self.processes, mp_context=multiprocessing.get_context("spawn")
                )
            except (OSError, AssertionError, ValueError):
                self.pool = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def render(self, htmls: Iterable[str]) -> Iterator[bytes]:
        """The PDFs of `htmls`, in order; at most two parts a process in flight, so the HTML
        of a big report is never all held at once."""
        if self.pool is None:
            for html in htmls:
                yield part_render(html, self.base_url)
            return
        pending: deque[Future[bytes]] = deque()
        for html in htmls:
            pending.append(self.pool.submit(part_render, html, self.base_url))
            if len(pending) >= 2 * self.processes:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _width(text: str) -> float:
    return sum(_HELVETICA.get(ch, 556) for ch in text) * _FONT_SIZE / 1000


def pdf_join(parts: Iterable[bytes]) -> tuple[bytes, int]:
    """The parts as one PDF, each page stamped "page N of M" at its bottom right; and M."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import DictionaryObject, NameObject

    writer = PdfWriter()
    for part in parts:
        writer.append(PdfReader(io.BytesIO(part)))
    total = len(writer.pages)
    # pypdf has no public call that adds a new indirect object.
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
                NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
            }
        )
    )
    for number, page in enumerate(writer.pages, start=1):
        label = f"page {number} of {total}"
        x = float(page.mediabox.right) - _MARGIN_PT - _width(label)
        resources: Any = page.setdefault(NameObject("/Resources"), DictionaryObject())
        resources = resources.get_object()
        fonts: Any = resources.setdefault(NameObject("/Font"), DictionaryObject())
        fonts.get_object()[NameObject(_FONT)] = font
        contents = page.get_contents()
        if contents is None:
            continue
        # The page's own drawing kept in q/Q: whatever transformation it leaves set must not
        # move the stamp.
        contents.set_data(
            b"q\n" + contents.get_data() + b"\nQ\n"
            + (
                f"BT {_FONT} {_FONT_SIZE:g} Tf 0.357 0.392 0.471 rg "
                f"{x:.2f} {_BOTTOM_PT:.2f} Td ({label}) Tj ET\n"
            ).encode("ascii")
        )
        page.replace_contents(contents)
        page.compress_content_streams()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue(), total
