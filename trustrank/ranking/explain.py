"""A finding's rank as pages show it: the reasons in one sentence, the factor table, the
path from the internet and the rank history drawn as small inline SVGs.

The drawings are made here, server-side, as plain SVG markup (no script): the pages are to
run under a Content-Security-Policy that forbids inline script, and a few boxes and lines
need no library. Every text that comes from evidence is escaped before it is placed.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from trustrank.findings.choices import FindingKind
from trustrank.findings.models import Finding
from trustrank.ranking.filters import DECISIONS
from trustrank.ranking.models import RankChange, RankingRun, RunStatus
from trustrank.ranking.selectors import rank_history, ranking_run_latest_done, service_result
from trustrank.ranking.serializers import rank_fields
from trustrank.risk.factors import rate_text

DECISION_LABELS = dict(DECISIONS)
# The reachability factor's source reads "<evidence> on env/svc, called <rate (window)>"
# (trustrank.risk.factors.FactorSource.reachability).
_OBSERVED = re.compile(r"^(.+?) on (\S+), called (.+)$")


def _factor(ctx: dict[str, Any], name: str) -> dict[str, Any] | None:
    for f in ctx.get("explanation") or []:
        if f.get("name") == name:
            return dict(f)
    return None


def rank_sentence(*, finding: Finding, ctx: dict[str, Any], decision: str) -> str:
    """The reasons for a rank in one sentence, most telling first, e.g. "Immediate:
    exploited in the wild (CISA KEV since 2021-12-10), reachable from the internet via
    internet → payment-gateway, and log4j-core is exercised (evidence scope
    io.opentelemetry.log4j-context-data-2.17), called 3.2/s (last hour; peak 10.1/s over
    24 h)"."""
    parts: list[str] = []
    is_vuln = finding.kind == FindingKind.VULNERABILITY
    subject = finding.component_name or "the component"
    if is_vuln:
        exploitation = ctx.get("exploitation")
        if exploitation == "active":
            since = f" since {finding.kev_date_added}" if finding.kev_date_added else ""
            parts.append(f"exploited in the wild (CISA KEV{since})")
        elif exploitation == "poc":
            epss = f"EPSS {finding.epss:.2f}" if finding.epss is not None else "EPSS"
            parts.append(f"exploitation is likely ({epss})")
        else:
            parts.append("no known exploitation")
    else:
        parts.append(f"{finding.category_display} ({finding.get_kind_display().lower()} finding)")
    if not ctx.get("deployed"):
        where = (
            "its project version runs on no known service" if is_vuln
            else "it concerns no known service"
        )
        parts.append(f"{where}, so its static order is kept")
    else:
        exposure = ctx.get("exposure")
        path = ctx.get("path") or []
        if exposure == "open":
            via = f" via {' → '.join(path)}" if path else ""
            parts.append(f"reachable from the internet{via}")
        elif exposure == "controlled" and "sends no traces" in str(
                (_factor(ctx, "exposure") or {}).get("source", "")):
            parts.append(
                f"an operator marked {ctx.get('service') or 'it'} not an entry point, and it "
                "sends no traces, so internal callers are possible"
            )
        elif exposure == "controlled":
            parts.append(f"only internal services call {ctx.get('service') or 'it'}")
        elif exposure == "small":
            parts.append(f"nothing calls {ctx.get('service') or 'it'} over the network")
        elif exposure == "unknown":
            parts.append(
                f"exposure unknown: {ctx.get('service') or 'the service'} is declared in "
                f"{ctx.get('environment') or 'its environment'} but sends no traces, so it "
                "counts as reachable from the internet"
            )
        reach = ctx.get("reachability")
        factor = _factor(ctx, "reachability") or {}
        if reach == "observed":
            m = _OBSERVED.match(str(factor.get("source", "")))
            if m:
                parts.append(
                    f"{subject} is exercised (evidence {m.group(1)}), called {m.group(3)}"
                )
            else:
                parts.append(f"{subject} is exercised")
        elif reach == "not observed":
            parts.append(f"{subject} is never seen running in the service's traces")
        elif reach == "unknown" and is_vuln:
            parts.append(f"whether {subject} runs is unknown (no telemetry)")
        impact = ctx.get("human_impact")
        if impact in ("high", "very high"):
            parts.append(f"human impact {impact}")
    label = DECISION_LABELS.get(decision, decision.capitalize() if decision else "Unranked")
    body = ", ".join(parts[:-1]) + ", and " + parts[-1] if len(parts) > 1 else parts[0]
    return f"{label}: {body}."


def unranked_reason(*, finding: Finding, latest: RankingRun | None) -> str:
    if not finding.is_open:
        return (f"It is {finding.get_state_display().lower()}: only open findings "
                "(in triage or exploitable) are ranked.")
    if latest is None:
        return ("No ranking run has finished for this team yet: start one from the "
                "priorities page.")
    if finding.first_seen and latest.finished_at and finding.first_seen > latest.finished_at:
        return "It appeared after the latest ranking run; the next run ranks it."
    return "The latest ranking run did not rank it; the next run will."


# --- drawings -----------------------------------------------------------------------------


def _text(value: Any, limit: int = 40) -> str:
    s = str(value)
    return escape(s if len(s) <= limit else s[: limit - 1] + "…")


def _hop_rate(hop: dict[str, Any]) -> str:
    """`3.2/s (last hour; peak 10.1/s over 24 h)` for a call hop of a stored path."""
    return rate_text(
        per_minute=float(hop.get("calls_per_minute") or 0),
        recent=hop.get("recent_calls_per_minute"),
        peak=hop.get("peak_calls_per_minute"),
        window_minutes=float(settings.TRUSTRANK_RANKING_WINDOW_MINUTES),
    )


def _hop_label(hop: dict[str, Any]) -> str:
    if hop.get("via") == "calls":
        share = hop.get("mtls_share")
        tls = "no mTLS" if not share else f"mTLS {share:.0%}"
        # The drawing has room for the rate alone; its window is in the arrow's title.
        return f"{_hop_rate(hop).split(' ', 1)[0]} · {tls}"
    return str(hop.get("via") or "")


def path_svg(*, path: list[str], hops: list[dict[str, Any]]) -> SafeString:
    """The path from the internet, nodes left to right, each hop labelled with its
    evidence (call rate and mTLS share, or why the first service is an entry point)."""
    if not path:
        return mark_safe("")
    by_target = {h.get("target"): h for h in hops}
    box_w, gap, box_h, top = 130, 90, 34, 34
    width = len(path) * box_w + (len(path) - 1) * gap + 20
    height = top + box_h + 30
    out = [
        f'<svg class="path-graph" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape("Path from the internet: " + " → ".join(path))}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#5b6478"/></marker></defs>',
    ]
    for i, name in enumerate(path):
        x = 10 + i * (box_w + gap)
        kind = "internet" if i == 0 and name == "internet" else "service"
        out.append(
            f'<g class="node {kind}"><title>{escape(name)}</title>'
            f'<rect x="{x}" y="{top}" width="{box_w}" height="{box_h}" rx="6"/>'
            f'<text x="{x + box_w / 2}" y="{top + box_h / 2 + 4}" '
            f'text-anchor="middle">{_text(name, 18)}</text></g>'
        )
        if i == 0:
            continue
        hop = by_target.get(name) or {}
        x1, x2 = x - gap, x - 2
        y = top + box_h / 2
        label = _hop_label(hop)
        no_mtls = hop.get("via") == "calls" and not hop.get("mtls_share")
        detail = escape(
            f"called {_hop_rate(hop)}" if hop.get("via") == "calls"
            else " ".join(str(v) for v in (hop.get("via"), hop.get("detail")) if v)
        )
        out.append(
            f'<g class="hop{" plain" if no_mtls else ""}"><title>{detail}</title>'
            f'<line x1="{x1}" y1="{y}" x2="{x2}" y2="{y}" marker-end="url(#arrow)"/>'
            f'<text x="{(x1 + x2) / 2}" y="{top - 8}" text-anchor="middle">'
            f"{_text(label, 26)}</text></g>"
        )
    out.append("</svg>")
    return mark_safe("".join(out))  # noqa: S308 - every evidence text above is escaped


def history_svg(*, changes: list[RankChange]) -> SafeString:
    """Rank (left axis, 1 at the top) and score (right axis, 0-100) over time."""
    points = [c for c in changes if c.rank is not None]
    if not points:
        return mark_safe("")
    w, h, left, right, top, bottom = 640, 180, 44, 44, 14, 30
    pw, ph = w - left - right, h - top - bottom
    t0, t1 = points[0].at.timestamp(), points[-1].at.timestamp()
    worst = max(max(c.rank or 1 for c in points), 2)

    def x(i: int, c: RankChange) -> float:
        if t1 > t0:
            return left + pw * (c.at.timestamp() - t0) / (t1 - t0)
        return left + (pw * i / (len(points) - 1) if len(points) > 1 else pw / 2)

    def y_rank(r: int) -> float:
        return top + ph * (r - 1) / (worst - 1)

    def y_score(s: float) -> float:
        return top + ph * (1 - max(0.0, min(100.0, s)) / 100)

    out = [
        f'<svg class="history-chart" xmlns="http://www.w3.org/2000/svg" width="{w}" '
        f'height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="Rank and score over time">',
        f'<rect class="frame" x="{left}" y="{top}" width="{pw}" height="{ph}"/>',
        f'<text class="axis rank" x="{left - 6}" y="{top + 4}" text-anchor="end">#1</text>',
        f'<text class="axis rank" x="{left - 6}" y="{top + ph}" text-anchor="end">#{worst}</text>',
        f'<text class="axis score" x="{w - right + 6}" y="{top + 4}">100</text>',
        f'<text class="axis score" x="{w - right + 6}" y="{top + ph}">0</text>',
        f'<text class="axis" x="{left}" y="{h - 10}">{points[0].at:%Y-%m-%d %H:%M}</text>',
    ]
    if len(points) > 1:
        out.append(
            f'<text class="axis" x="{w - right}" y="{h - 10}" text-anchor="end">'
            f"{points[-1].at:%Y-%m-%d %H:%M}</text>"
        )
    rank_pts = " ".join(f"{x(i, c):.1f},{y_rank(c.rank or 1):.1f}" for i, c in enumerate(points))
    score_pts = " ".join(
        f"{x(i, c):.1f},{y_score(c.score or 0.0):.1f}" for i, c in enumerate(points)
    )
    out.append(f'<polyline class="line score" points="{score_pts}"/>')
    out.append(f'<polyline class="line rank" points="{rank_pts}"/>')
    for i, c in enumerate(points):
        tip = escape(f"{c.at:%Y-%m-%d %H:%M}: rank {c.rank}, score {c.score:.1f}, {c.decision}")
        out.append(
            f'<circle class="dot rank" cx="{x(i, c):.1f}" cy="{y_rank(c.rank or 1):.1f}" r="3">'
            f"<title>{tip}</title></circle>"
        )
        out.append(
            f'<circle class="dot score" cx="{x(i, c):.1f}" cy="{y_score(c.score or 0.0):.1f}" '
            f'r="2.5"><title>{tip}</title></circle>'
        )
    out.append("</svg>")
    return mark_safe("".join(out))  # noqa: S308 - the only texts are escaped dates/numbers


# --- the finding page's card --------------------------------------------------------------


def finding_rank_explain(*, finding: Finding) -> dict[str, Any]:
    """Everything the finding page's "Why this rank" card shows."""
    history = rank_history(finding=finding)
    out: dict[str, Any] = {
        "ranked": finding.rank is not None,
        "history": history,
        "history_svg": history_svg(changes=history),
    }
    if finding.rank is None:
        latest = ranking_run_latest_done(team_id=finding.team_id)
        out["reason"] = unranked_reason(finding=finding, latest=latest)
        out["run_pending"] = (
            latest is None
            and finding.team_id is not None
            and RankingRun.objects.filter(
                team_id=finding.team_id, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]
            ).exists()
        )
        return out
    fields = rank_fields(finding)
    ctx = finding.rank_context.data if finding.rank_context else {}
    hops: list[dict[str, Any]] = []
    if fields["path"] and fields["environment"] and fields["service"]:
        svc = service_result(
            team_id=finding.team_id, environment=fields["environment"], service=fields["service"]
        ) or {}
        hops = list(svc.get("hops") or [])
    impact = _factor({"explanation": fields["explanation"]}, "human_impact") or {}
    out.update(
        fields=fields,
        # "deployment prod/payment-gateway → payment-gateway@2.3.1 (source: sbom upload)"
        deployment=str(impact.get("source") or "") if fields.get("service") else "",
        sentence=rank_sentence(finding=finding, ctx=ctx, decision=finding.decision),
        factors=fields["explanation"],
        path_svg=path_svg(path=list(fields["path"]), hops=hops),
        hops=hops,
    )
    return out
