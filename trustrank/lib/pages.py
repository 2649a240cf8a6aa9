"""Helpers shared by list pages: pagination that keeps the other query parameters."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """The request type of pages, with django-htmx's `request.htmx`."""

    htmx: HtmxDetails


def paginate(
    request: HttpRequest, queryset: QuerySet[Any], *, per_page: int = 50
) -> dict[str, Any]:
    """Context for templates/_pager.html: `page_obj` and the query string minus `page`."""
    paginator = Paginator(queryset, per_page)
    page_obj = paginator.get_page(request.GET.get("page"))
    params = request.GET.copy()
    params.pop("page", None)
    encoded = params.urlencode()
    return {
        "page_obj": page_obj,
        "querystring_without_page": f"{encoded}&" if encoded else "",
    }
