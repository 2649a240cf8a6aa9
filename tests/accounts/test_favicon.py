"""A favicon: linked from every page, and /favicon.ico answers without signing in."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_pages_link_the_svg_favicon(client):
    html = client.get("/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html


def test_favicon_ico_redirects_to_the_svg_without_signing_in(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == "/static/favicon.svg"
    served = client.get(response["Location"])
    assert served.status_code == 200
    assert b"<svg" in b"".join(served.streaming_content)


def test_the_favicon_is_a_small_svg():
    path = finders.find("favicon.svg")
    assert path is not None
    with open(path, "rb") as handle:
        body = handle.read()
    assert body.startswith(b"<svg") and len(body) < 2048
