"""Every route refuses an anonymous visitor: pages redirect to the login, the API answers
401, receivers refuse without a key. A new route that forgets its guard fails here."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

OPEN = {"login/", "logout/", "", "favicon.ico"}


def _routes(patterns: list, prefix: str = "") -> list[str]:
    found = []
    for entry in patterns:
        if isinstance(entry, URLResolver):
            if str(entry.pattern).startswith("admin/"):
                continue
            found += _routes(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            found.append(prefix + str(entry.pattern))
    return found


def _concrete(route: str) -> str:
    route = re.sub(r"<int:[^>]+>", "1", route)
    route = re.sub(r"<uuid:[^>]+>", "00000000-0000-0000-0000-000000000000", route)
    route = re.sub(r"<(str:|slug:|path:)?[^>]+>", "x", route)
    return "/" + route.lstrip("^").rstrip("$")


ROUTES = sorted({_concrete(r) for r in _routes(get_resolver().url_patterns) if r not in OPEN})


def test_the_sweep_sees_the_routes_of_every_area():
    joined = " ".join(ROUTES)
    for expected in ("/api/v1/sboms", "/v1/traces", "/api/v1/findings", "/api/v1/certificates",
                     "/api/v1/environments", "/projects/", "/jobs/", "/services/", "/identities/"):
        assert expected in joined


@pytest.mark.django_db
@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_requests_are_refused(client, path, method):
    response = getattr(client, method)(path)
    if response.status_code in (301, 302):
        assert response["Location"].startswith("/login/"), (path, response["Location"])
    else:
        assert response.status_code in (401, 403, 405), (path, response.status_code)
