"""Integers from request values (query parameters, headers, form fields, JSON bodies).

`str.isdigit()` accepts `²` and other Unicode digits that `int()` then refuses, and `int()`
accepts Arabic-Indic digits, `_` separators and spaces; a number past PostgreSQL's bigint
makes the database raise. Every request value that becomes an int goes through here: ASCII
decimal digits only, within a range the column can hold.
"""

from __future__ import annotations

import re
from typing import Any

import django_filters
from django import forms
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

# PostgreSQL's bigint (every id column here is one).
BIGINT_MAX = 2**63 - 1
# PostgreSQL's integer (versions, counters, days).
INT_MAX = 2**31 - 1

_DIGITS = re.compile(r"[0-9]+")


class NumberInvalid(ValueError):
    """A value that is not a whole number in the accepted range; the message says why."""


def int_parse(value: Any, *, minimum: int = 0, maximum: int = BIGINT_MAX) -> int:
    """The int `value` spells in ASCII decimal digits (an int passes as is), within
    [minimum, maximum]; NumberInvalid otherwise. Booleans are not numbers."""
    if isinstance(value, bool):
        raise NumberInvalid("must be a whole number")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        number = int(value.strip())
    else:
        raise NumberInvalid("must be a whole number written with the digits 0-9")
    if not minimum <= number <= maximum:
        raise NumberInvalid(f"must be between {minimum} and {maximum}")
    return number


def int_or_none(value: Any, *, minimum: int = 0, maximum: int = BIGINT_MAX) -> int | None:
    """int_parse, or None for anything it refuses (for values where 'absent' is the answer
    to nonsense, such as a page's `after` cursor)."""
    try:
        return int_parse(value, minimum=minimum, maximum=maximum)
    except NumberInvalid:
        return None


class IdField(forms.Field):
    """A form field for an id: ASCII digits, 1..bigint."""

    def __init__(self, *args: Any, minimum: int = 1, maximum: int = BIGINT_MAX,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.minimum, self.maximum = minimum, maximum

    def to_python(self, value: Any) -> int | None:
        if value in (None, ""):
            return None
        try:
            return int_parse(value, minimum=self.minimum, maximum=self.maximum)
        except NumberInvalid as exc:
            raise forms.ValidationError(f"{value!r} {exc}", code="invalid") from exc


@extend_schema_field(OpenApiTypes.INT)
class IdFilter(django_filters.Filter):
    """An exact-match filter on an id column, strict as IdField."""

    field_class = IdField
