"""`{% gate_policy_section %}`: the gate policy section of a team settings page."""

from __future__ import annotations

from typing import Any

from django import template

from trustrank.accounts.principal import principal_for_request
from trustrank.gate.models import FailOn
from trustrank.gate.views import gate_policy_rows

register = template.Library()


@register.inclusion_tag("gate/_policy_section.html", takes_context=True)
def gate_policy_section(context: Any) -> dict[str, Any]:
    request = context["request"]
    return {
        "rows": gate_policy_rows(principal_for_request(request)),
        "fail_on_choices": FailOn.choices,
        "next": request.get_full_path(),
        "csrf_token": context.get("csrf_token"),
    }
