"""Strict filtering for the list APIs: a query parameter the list does not know is an error
naming it, never ignored (a misspelt `severty=low` must not widen a list or a bulk change to
everything).

StrictFilterBackend is the API's default filter backend (settings.REST_FRAMEWORK): on any
view with a `filterset_class`, every query parameter must be one of its filters, the
paginator's `page` / `page_size`, DRF's `format`, or a name the view lists in
`extra_query_params`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from typing import Any

import django_filters
from django import forms
from django.db.models import Q
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import exceptions
from rest_framework.settings import api_settings

from trustrank.lib.numbers import int_or_none


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
        filterset = self.filterset_checked(request, queryset, view)
        return queryset if filterset is None else filterset.qs

    def filterset_checked(self, request: Any, queryset: Any, view: Any) -> Any:
        """The view's FilterSet once its parameters are known and valid (ParamRefused
        otherwise), its queryset not yet built: a view that answers from a kept page needs
        the 400s, not the query. None when the view has no FilterSet."""
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return None
        unknown_params_refuse(
            request.query_params.keys(),
            known=set(filterset.filters) | view_query_params(view),
            what="this list",
        )
        if not filterset.is_valid():
            errors = {k: [str(e) for e in v] for k, v in filterset.errors.items()}
            raise ParamRefused(next(iter(errors), ""), errors)
        return filterset


# --- references by id, uuid or name ---

REF_MAX_CHARS = 512


def ref_condition(value: str, *, name_field: str | None = "name",
                  uuid_field: str | None = None) -> Q:
    """Which rows `value` names: the row with that id (ASCII digits), with that uuid, or with
    that name. A name made of digits matches by name as well as by id."""
    cond = Q(pk__in=[])
    if name_field:
        cond |= Q(**{name_field: value})
    number = int_or_none(value, minimum=1)
    if number is not None:
        cond |= Q(pk=number)
    if uuid_field:
        with contextlib.suppress(ValueError):
            cond |= Q(**{uuid_field: uuid.UUID(value)})
    return cond


class RefField(forms.CharField):
    """An id, a uuid or a name: text without NUL, at most REF_MAX_CHARS characters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", REF_MAX_CHARS)
        super().__init__(*args, **kwargs)

    def clean(self, value: Any) -> Any:
        value = super().clean(value)
        if isinstance(value, str) and "\x00" in value:
            raise forms.ValidationError("must not contain a NUL character")
        return value


@extend_schema_field(OpenApiTypes.STR)
class RefFilter(django_filters.Filter):
    """An exact filter on a foreign key that takes the referenced row's id, uuid or name, as
    Dependency-Track clients name projects: `project=12` and `project=shop` alike. The names
    are resolved in a subquery over the referenced table, so the filtered list keeps its
    index on the key; the caller's queryset already limits the rows to the caller's teams,
    so a name another team uses matches nothing here. An unknown name matches nothing, as an
    unknown id does."""

    field_class = RefField

    def __init__(self, *args: Any, name_field: str | None = "name",
                 uuid_field: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name_field, self.uuid_field = name_field, uuid_field

    def filter(self, qs: Any, value: Any) -> Any:
        if value in (None, ""):
            return qs
        value = str(value).strip()
        related = qs.model._meta.get_field(self.field_name).related_model
        refs = related.objects.filter(
            ref_condition(value, name_field=self.name_field, uuid_field=self.uuid_field)
        ).values("pk")
        return qs.filter(**{f"{self.field_name}__in": refs})
