"""Bad input at the edge: every route, every parameter the API schema or a FilterSet knows,
and every URL path segment, sent with values no view can use. The answer is a 4xx naming
the parameter, never a 500. New routes and parameters are covered without editing this file."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import django_filters
import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from trustrank.accounts.models import Role, Scope

NUL = "a\x00b"


def _routes(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            if str(entry.pattern).startswith("admin/"):
                continue
            yield from _routes(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern)


def _concrete(route: str, *, text: str = "x") -> str:
    route = re.sub(r"<int:[^>]+>", "1", route)
    route = re.sub(r"<uuid:[^>]+>", "00000000-0000-0000-0000-000000000000", route)
    route = re.sub(r"<(str:|slug:|path:)?[^>]+>", text, route)
    return "/" + route.lstrip("^").rstrip("$")


ROUTES = sorted(set(_routes(get_resolver().url_patterns)))


def _filterset_params() -> set[str]:
    names: set[str] = set()
    pending = list(django_filters.FilterSet.__subclasses__())
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        names |= set(cls.base_filters)
    return names


def _schema() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


def _schema_params() -> set[str]:
    names: set[str] = set()
    for operations in _schema()["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query":
                    names.add(parameter["name"])
    return names


# The parameters the receivers read by hand, besides those the schema and FilterSets name.
PARAMS = sorted(
    _filterset_params()
    | _schema_params()
    | {"projectName", "projectVersion", "project", "service", "namespace", "environment",
       "team", "page", "page_size", "window", "after", "q"}
)


@pytest.fixture
def clients(db: None, team: Any, make_user: Any, make_key: Any) -> list[APIClient]:
    person = APIClient()
    person.force_login(make_user("edge-admin", team=team, role=Role.ADMIN))
    keyed = APIClient()
    keyed.credentials(HTTP_X_API_KEY=make_key(team, *Scope.values))
    return [person, keyed]


def _assert_refused(response: Any, *, name: str, where: str) -> None:
    assert response.status_code == 400, (where, response.status_code)
    body = response.content.decode(errors="replace")
    assert name in body, (where, body[:300])
    if where.startswith(("/api/", "/v1/")):
        assert response["Content-Type"].startswith("application/problem+json"), where


def test_the_sweep_knows_the_parameters_of_the_issue():
    for name in ("projectName", "projectVersion", "project", "expires_before", "page", "q"):
        assert name in PARAMS


@pytest.mark.parametrize("route", ROUTES)
def test_a_nul_byte_in_any_query_parameter_is_refused_by_name(clients, route):
    path = _concrete(route)
    for client in clients:
        for name in PARAMS:
            for method in ("get", "post"):
                response = getattr(client, method)(f"{path}?{name}=a%00b")
                _assert_refused(response, name=name, where=f"{path} {method} {name}")


@pytest.mark.parametrize("route", [r for r in ROUTES if re.search(r"<(str:|slug:|path:)?\w+>", r)])
def test_a_nul_byte_in_any_url_path_segment_is_refused(clients, route):
    path = _concrete(route, text="x%00y")
    for client in clients:
        response = client.get(path)
        _assert_refused(response, name="URL path", where=path)


@pytest.mark.parametrize("route", ROUTES)
def test_a_nul_byte_in_a_form_field_is_refused_by_name(clients, route):
    path = _concrete(route)
    person = clients[0]
    for name in ("projectName", "projectVersion", "environment", "q"):
        response = person.post(path, {name: NUL, "bom": "x"})
        _assert_refused(response, name=name, where=f"{path} form {name}")


@pytest.mark.parametrize(
    "value",
    ["2030-01-01T00:00:00+18:00", "2030-01-01T00:00:00-15:30", "9999-12-31T23:00:00-13:00"],
)
def test_date_times_beyond_any_time_zone_are_refused_on_every_route(clients, value):
    keyed = clients[1]
    for route in ROUTES:
        path = _concrete(route)
        for name in ("expires_before", "expires_after", "since", "until"):
            response = keyed.get(path, {name: value})
            assert response.status_code < 500, (path, name, response.status_code)
    response = keyed.get("/api/v1/certificates", {"expires_before": value})
    _assert_refused(response, name="expires_before", where="/api/v1/certificates")


def test_a_real_offset_still_filters(clients):
    response = clients[1].get(
        "/api/v1/certificates", {"expires_before": "2030-01-01T00:00:00+14:00"}
    )
    assert response.status_code == 200


GARBAGE = ["zzz", "-1", "99999999999999999999999", "1e400", "NaN", "2030-13-45", "[]", "%", "\u00e9"]


@pytest.mark.parametrize("route", ROUTES)
def test_garbage_in_the_parameters_is_never_a_server_error(clients, route):
    """Every known parameter at once, with each garbage value (a 500 from any of them shows)."""
    path = _concrete(route)
    for client in clients:
        for value in GARBAGE:
            response = client.get(path, dict.fromkeys(PARAMS, value))
            assert response.status_code < 500, (path, value, response.status_code)
