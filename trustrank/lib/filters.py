"""Strict filtering for the list APIs: a query parameter the list does not know is an error
naming it, never ignored (a misspelt `severty=low` must not widen a list or a bulk change to
everything).

StrictFilterBackend is the API's default filter backend (settings.REST_FRAMEWORK): on any
view with a `filterset_class`, every query parameter must be one of its filters, the
paginator's `page` / `page_size`, DRF's `format`, or a name the view lists in
`extra_query_params`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import exceptions
from rest_framework.settings import api_settings


class ParamRefused(exceptions.ValidationError):
    """A 400 naming the parameter at fault (`param` in the problem document) with the
    field errors (`errors`)."""

    def __init__(self, param: str, errors: dict[str, Any]) -> None:
        super().__init__(errors)
        self.param = param


def unknown_params(names: Iterable[str], *, known: Iterable[str]) -> list[str]:
    allowed = set(known)
    return [n for n in names if n not in allowed]


def unknown_params_refuse(names: Iterable[str], *, known: Iterable[str], what: str) -> None:
    """ParamRefused naming the first of `names` that is not in `known`."""
    known = sorted(set(known))
    unknown = unknown_params(names, known=known)
    if unknown:
        raise ParamRefused(
            unknown[0],
            {
                name: [f"{name!r} is not a parameter of {what} (use one of {', '.join(known)})"]
                for name in unknown
            },
        )


def view_query_params(view: Any) -> set[str]:
    """The non-filter query parameters a view takes: paging, DRF's format, its own extras."""
    accepted = set(getattr(view, "extra_query_params", ()))
    paginator = getattr(view, "paginator", None)
    for attr in ("page_query_param", "page_size_query_param", "cursor_query_param",
                 "limit_query_param", "offset_query_param"):
        name = getattr(paginator, attr, None)
        if name:
            accepted.add(name)
    if api_settings.URL_FORMAT_OVERRIDE:
        accepted.add(api_settings.URL_FORMAT_OVERRIDE)
    return accepted


class StrictFilterBackend(DjangoFilterBackend):
    """DjangoFilterBackend that refuses unknown query parameters and names the parameter at
    fault in every 400."""

    def filter_queryset(self, request: Any, queryset: Any, view: Any) -> Any:
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        unknown_params_refuse(
            request.query_params.keys(),
            known=set(filterset.filters) | view_query_params(view),
            what="this list",
        )
        if not filterset.is_valid():
            errors = {k: [str(e) for e in v] for k, v in filterset.errors.items()}
            raise ParamRefused(next(iter(errors), ""), errors)
        return filterset.qs
