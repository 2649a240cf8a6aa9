"""Reads for exports, scoped to the teams the principal may export from."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.exports.models import Export
from trustrank.exports.services.params import export_teams


def export_list(*, principal: Principal) -> QuerySet[Export]:
    return (
        Export.objects.filter(team_id__in=export_teams(principal))
        .select_related("team")
        .order_by("-created_at", "-id")
    )


def export_get_for_principal(*, principal: Principal, export_id: Any) -> Export:
    try:
        pk = int(export_id)
    except (TypeError, ValueError) as exc:
        raise Http404("no such export") from exc
    export = export_list(principal=principal).filter(pk=pk).first()
    if export is None:
        raise Http404("no such export")
    return export
