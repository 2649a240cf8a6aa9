"""The rows of the findings list's table, written by Python rather than by the template
language: the same HTML, character for character, as the `{% for f in findings %}` loop
`templates/findings/_findings_table.html` had (tests/findings/test_list_rows.py renders that
loop and compares).

A page of 50 findings made ~200,000 template-variable lookups, tag and filter calls: ~70 %
of the web CPU of a list page that is not kept (~90 ms of 130). Here each row is one string
built from the same values through the same functions (autoescaping, localization, and the
filters the template named), minus the template engine's own work."""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.template.defaultfilters import date as date_filter
from django.template.defaultfilters import floatformat, truncatechars
from django.urls import reverse
from django.utils.formats import localize
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe

from trustrank.findings.models import Finding

_NOT_RANKED = '<span class="muted" title="not ranked yet">–</span>'
_DASH = '<span class="muted">–</span>'
_OVERDUE_ROW = ' class="overdue"'
_KEV = '<span class="badge bad">KEV</span>'
_PK_MARK = 987654321


def _value(value: Any) -> str:
    """`{{ value }}` in an autoescaping template (template.base.render_value_in_context)."""
    if type(value) is str:
        return html.escape(value)  # django.utils.html.escape, without its lazy wrapper
    if type(value) is int and not settings.USE_THOUSAND_SEPARATOR:
        return str(value)  # localize's own shortcut (utils.numberformat.format)
    if value is None:
        return "None"
    value = localize(value)
    return conditional_escape(value if isinstance(value, str) else str(value))


def _truncated(value: Any, length: int) -> str:
    """`value|truncatechars:length`: text no longer than that is only NFC-normalized
    (utils.text.Truncator.chars), without walking it character by character."""
    text = str(value)
    if len(text) <= length:
        return unicodedata.normalize("NFC", text)
    return truncatechars(text, length)


def _memo(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A filter applied to the values of one page, each distinct value once (a page's
    baselines and EPSS scores repeat)."""
    seen: dict[tuple[type, str], Any] = {}

    def call(value: Any) -> Any:
        key = (type(value), repr(value))  # -0.0 is not 0.0
        if key not in seen:
            seen[key] = fn(value)
        return seen[key]

    return call


def finding_rows_html(
    findings: Iterable[Finding], *, can_triage: bool, rank_why: Callable[[Finding], Any]
) -> SafeString:
    """The table's rows, each as the template's loop wrote it ('' for none). `rank_why` is
    the ranking's `{% rank_why %}` tag (findings sit below ranking, so the page passes it)."""
    # The finding page's address around its id ({% url 'findings:finding' f.pk %}).
    before, after = (
        conditional_escape(reverse("findings:finding", args=[_PK_MARK])).split(str(_PK_MARK))
    )
    one_place = _memo(lambda v: floatformat(v, 1))
    three_places = _memo(lambda v: floatformat(v, 3))
    two_places = _memo(lambda v: floatformat(v, 2))
    day = _memo(lambda v: conditional_escape(date_filter(v, "Y-m-d")))
    out: list[str] = []
    add = out.append
    for f in findings:
        pk = _value(f.pk)
        overdue = f.overdue
        decision = f.decision
        # The rank counted from the queue key, as the page annotated its rows
        # (serializers.page_rows_for_ids); the stored column may be stale.
        rank = f.rank
        add(f'\n    <tr data-finding="{pk}"{_OVERDUE_ROW if overdue else ""}>\n      ')
        if can_triage:
            add(f'<td><input type="checkbox" name="ids" value="{pk}:{_value(f.version)}" '
                f'form="bulk-form" class="row-select" aria-label="select finding {pk}"></td>')
        add('\n      <td class="num rank">')
        add(_value(rank) if rank is not None else _NOT_RANKED)
        add('</td>\n      <td class="decision">')
        if decision:
            shown = _value(decision)
            add(f'<span class="badge decision-{shown}">{shown}</span>')
        add(f'</td>\n      <td class="num">{_value(one_place(f.baseline_priority))}</td>\n      ')
        why = ""
        if decision:
            reason = rank_why(f)
            # {% include "ranking/_rank_why.html" %}, the file's last newline included.
            why = "<br>" + (
                f'<span class="why muted" data-testid="rank-why" title="{_value(reason)}">'
                f"{_value(_truncated(reason, 170))}</span>" if reason else ""
            ) + "\n"
        title = _value(_truncated(f.display_title, 90))
        if f.kind == "vulnerability":
            vuln_id = f.vuln_id
            aliases = "".join(
                f' <span class="muted">{_value(a)}</span>' for a in f.aliases if a != vuln_id
            )
            add(f'\n      <td><a href="{before}{pk}{after}">{_value(vuln_id)}</a>{aliases}'
                f'<br><span class="title">{title}</span>{why}</td>\n      ')
            unknown = (
                f' <span class="badge warn" title="{_value(f.match_reason)}">unknown</span>'
                if f.match_status == "unknown" else ""
            )
            add(f'<td>{_value(f.component_name)} <span class="mono">'
                f'{_value(f.component_version)}</span>{unknown}</td>\n      ')
            project, version = f.project, f.project_version
            add(f'<td>{"" if project is None else _value(project.name)} <span class="muted">'
                f'{"" if version is None else _value(version.version)}</span></td>\n      ')
        else:
            add(f'\n      <td><span class="badge">{_value(f.get_kind_display())}</span> '
                f'<a href="{before}{pk}{after}">{_value(f.category_display)}</a><br>'
                f'<span class="title">{title}</span>{why}</td>\n      ')
            service = f.service
            if service:
                subject = _value(service.name)
            elif f.spiffe_id:
                subject = f'<span class="mono">{_value(_truncated(f.spiffe_id, 60))}</span>'
            else:
                subject = ""
            add(f"<td>{subject}</td>\n      <td>{_value(f.environment)}</td>\n      ")
        severity = f.severity
        tone = (
            "bad" if severity == "critical" or severity == "high"
            else "warn" if severity == "medium" else ""
        )
        add(f'\n      <td><span class="badge {tone}">{_value(severity)}</span></td>\n      ')
        cvss = f.cvss_score
        add(f'<td class="num">{_value("–" if cvss is None else cvss)}</td>\n      ')
        add(f'<td>{_KEV if f.in_kev else ""}</td>\n      ')
        epss = f.epss
        if epss is not None:
            add(f'<td class="num">{_value(three_places(epss))} <span class="muted">'
                f"p{_value(two_places(f.epss_percentile))}</span></td>\n      ")
        else:
            add('<td class="num">–</td>\n      ')
        state = f.state
        tone = "bad" if state == "exploitable" else "warn" if state == "in_triage" else "ok"
        add(f'<td class="state"><span class="badge {tone}">{_value(f.get_state_display())}'
            "</span></td>\n      ")
        if f.assignee_id:
            assignee = f.assignee
            add(f'<td class="assignee">{_value(assignee.get_username() if assignee else "")}'
                "</td>\n      ")
        else:
            add(f'<td class="assignee">{_DASH}</td>\n      ')
        due = f.due_date
        if due:
            shown = day(due)
            cell = (
                f'<span class="badge bad overdue" title="overdue">{shown} overdue</span>'
                if overdue else shown
            )
        else:
            cell = _DASH
        add(f'<td class="due">{cell}</td>\n    </tr>\n  ')
    return mark_safe("".join(out))  # noqa: S308 - every value above is escaped
