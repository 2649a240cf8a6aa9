"""Template filters that show a finding's rank the same way on every page: the findings
list, the priorities queue, a service's page and the finding's own "Why this rank" card."""

from __future__ import annotations

from django import template

from trustrank.findings.models import Finding
from trustrank.ranking.explain import rank_sentence

register = template.Library()


@register.filter
def rank_why(finding: Finding) -> str:
    """The reasons for the finding's rank in one sentence ("Immediate: exploited in the wild
    …"), from the explanation its list query already joined; '' until it is ranked."""
    ranked = finding.ranked_or_none
    if ranked is None:
        return ""
    ctx = ranked.context.data if isinstance(ranked.context.data, dict) else {}
    return rank_sentence(finding=finding, ctx=ctx, decision=ranked.decision)
