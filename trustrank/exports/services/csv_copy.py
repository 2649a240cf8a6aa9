"""The CSV export written by PostgreSQL: the same selection, every cell formatted in SQL, and
`COPY (…) TO STDOUT (FORMAT csv)` streamed through psycopg a block at a time.

Why: building a Python row per finding and formatting it costs ~150 µs; a million findings
took 2.5 minutes. PostgreSQL formats the rows in C, the rank explanations included (a
correlated aggregate over the shared RankContext), and Python only passes the bytes on, so
memory stays flat and a million rows take seconds. Cells are written as the Python writer
(formats.py) writes them: lists joined by `;`, booleans `true`/`false`, times ISO 8601 in UTC,
explanations `name=value (+effect); …`, largest effect first.

CSV injection (OWASP): a spreadsheet runs a cell that begins with `=`, `+`, `-` or `@` as a
formula (and a leading tab or CR can hide one), so a project named `=HYPERLINK(…)` would run
in every auditor's spreadsheet. Every text cell that begins with one of those characters is
written with a `'` before it, and every text cell is quoted (FORCE_QUOTE), as OWASP
advises. The numeric columns (NUMERIC_COLUMNS: ids, ranks, scores, CVSS, EPSS) are typed
numbers in the database and written bare: their only possible leading `-` is a minus sign
of a real number, which a spreadsheet reads as a number, never as a formula.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

from django.db import connection
from django.db.models import Case, F, Func, TextField, Value, When

from trustrank.exports.services.formats import Progress
from trustrank.exports.services.rows import COLUMNS, ExportSelection

_OPEN = "('in_triage', 'exploitable')"

# Columns of SQL numbers: written as they are, unquoted (see the module's docstring).
NUMERIC_COLUMNS = frozenset({"finding_id", "cvss", "epss", "rank", "env_rank", "score"})
# The characters a spreadsheet may read as the start of a formula (OWASP CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Sql(Func):
    output_field = TextField()


def _explanation(context: Any) -> Func:
    return _Sql(
        context,
        template=(
            "(SELECT string_agg((e.f->>'name') || '=' || COALESCE(e.f->>'value', 'null') || ' ('"
            " || to_char(COALESCE((e.f->>'effect')::float8, 0), 'FMSG990.00') || ')', '; '"
            " ORDER BY abs(COALESCE((e.f->>'effect')::float8, 0)) DESC, e.i)"
            " FROM ranking_rankcontext c CROSS JOIN LATERAL"
            " jsonb_array_elements(c.data->'explanation') WITH ORDINALITY AS e(f, i)"
            " WHERE c.digest = %(expressions)s)"
        ),
    )


def _neutralised(value: Any) -> Func:
    """The cell as text, with a `'` before a leading formula character."""
    return _Sql(
        value,
        template=r"regexp_replace((%(expressions)s)::text, '^([=+@\t\r-])', '''\1')",
    )


def _iso(value: Any) -> Func:
    return _Sql(
        value,
        template=(
            "to_char(%(expressions)s AT TIME ZONE 'UTC', "
            "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
        ),
    )


def _joined_json(value: Any) -> Func:
    return _Sql(
        value,
        template=(
            "array_to_string(ARRAY(SELECT jsonb_array_elements_text(%(expressions)s)), ';')"
        ),
    )


def _as_of(key: str) -> Func:
    """The value the audit trail gave `key` at as_of, else the current one."""
    return _Sql(
        F("as_of_after"), F(key), template="COALESCE(%(expressions)s)", arg_joiner=f"->>'{key}', "
    )


def copy_sql(selection: ExportSelection) -> tuple[str, tuple[Any, ...]]:
    as_of = "as_of_after" in selection.queryset.query.annotations
    if as_of:
        state: Any = _as_of("state")
        justification: Any = _as_of("justification")
        detail: Any = _as_of("detail")
        response: Any = _Sql(
            F("as_of_after"),
            F("response"),
            template=(
                "array_to_string(ARRAY(SELECT jsonb_array_elements_text("
                "COALESCE(%(expressions)s))), ';')"
            ),
            arg_joiner="->'response', ",
        )
        resolved: Any = _AsOfResolved(F("as_of_after"), F("state"), _iso(F("as_of_at")))
    else:
        state, justification, detail = F("state"), F("justification"), F("detail")
        response = _joined_json(F("response"))
        resolved = _iso(F("resolved_at"))
    cells: dict[str, Any] = {
        "finding_id": F("id"),
        "kind": F("kind"),
        "category": F("category"),
        "title": F("title"),
        "state": state,
        "justification": justification,
        "response": response,
        "detail": detail,
        "assignee": F("as_of_assignee") if as_of else F("assignee__username"),
        "due_date": F("due__due_date"),
        "severity": F("severity"),
        "cvss": F("cvss_score"),
        "epss": F("epss"),
        "kev": Case(When(in_kev=True, then=Value("true")), default=Value("false")),
        "vuln_id": F("vuln_id"),
        "aliases": _Sql(F("aliases"), template="array_to_string(%(expressions)s, ';')"),
        "cve": F("cve_id"),
        "project": F("project__name"),
        "version": F("project_version__version"),
        "component_purl": F("component_purl"),
        "environment": F("environment_"),
        "service": F("service_"),
        "rank": F("rank_"),
        "env_rank": F("env_rank_"),
        "score": F("score_"),
        "decision": F("decision_"),
        "explanation": _explanation(F("context_")),
        "first_seen": _iso(F("first_seen")),
        "last_seen": _iso(F("last_seen")),
        "resolved_at": resolved,
    }
    cells = {k: v if k in NUMERIC_COLUMNS else _neutralised(v) for k, v in cells.items()}
    qs = selection.queryset.values(**{f"x_{k}": v for k, v in cells.items()})
    compiler = qs.query.get_compiler(using=qs.db)
    sql, params = compiler.as_sql()
    # COPY writes the columns in SELECT order, which must be the header's.
    selected = [alias for _, _, alias in compiler.select]
    if selected != [f"x_{k}" for k in COLUMNS]:
        raise RuntimeError(f"CSV columns out of order: {selected}")
    return sql, tuple(params)


class _AsOfResolved(Func):
    """resolved_at at as_of: the time of the event that closed it, if it was closed then."""

    output_field = TextField()
    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # type: ignore[override]
        after, state, at = self.get_source_expressions()
        after_sql, after_params = compiler.compile(after)
        state_sql, state_params = compiler.compile(state)
        at_sql, at_params = compiler.compile(at)
        sql = (
            f"CASE WHEN COALESCE({after_sql}->>'state', {state_sql}) IN {_OPEN} "
            f"THEN NULL ELSE {at_sql} END"
        )
        return sql, (*after_params, *state_params, *at_params)


def csv_copy_chunks(
    selection: ExportSelection,
    meta: dict[str, Any],
    progress: Progress | None = None,
    *,
    own_connection: bool = False,
) -> Iterator[bytes]:
    """`own_connection`: run the COPY on a connection of its own, so `progress` may write to
    the database while it runs (a connection in COPY answers nothing else). The job does so;
    a streamed export must not (its progress only counts, and in a test transaction a second
    connection would not see the rows)."""
    header = io.StringIO()
    csv.writer(header, lineterminator="\n", quoting=csv.QUOTE_ALL).writerow(
        [neutralise(c) for c in COLUMNS]
    )
    yield header.getvalue().encode()
    sql, params = copy_sql(selection)
    if own_connection:
        raw = connection.get_new_connection(connection.get_connection_params())
        try:
            yield from _copy(raw.cursor(), sql, params, progress)
        finally:
            raw.close()
    else:
        with connection.cursor() as wrapper:
            yield from _copy(wrapper.cursor, sql, params, progress)


_QUOTED = ", ".join(f"x_{c}" for c in COLUMNS if c not in NUMERIC_COLUMNS)


def neutralise(cell: str) -> str:
    """The Python twin of _neutralised, for text written outside COPY (the header)."""
    return "'" + cell if cell.startswith(FORMULA_START) else cell


def _copy(
    cur: Any, sql: str, params: tuple[Any, ...], progress: Progress | None
) -> Iterator[bytes]:
    lines = 0
    since = 0
    with cur:
        with cur.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv, FORCE_QUOTE ({_QUOTED}))",
                      params) as copy:
            for block in copy:
                data = bytes(block)
                yield data
                if progress is not None:
                    # Lines, not rows (a quoted cell may hold a newline): for progress only.
                    n = data.count(b"\n")
                    lines += n
                    since += n
                    if since >= 1000:
                        since = 0
                        progress(lines)
        if progress is not None:
            progress(max(cur.rowcount, 0))
