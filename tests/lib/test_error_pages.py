"""An unknown API route answers a JSON problem document, a site page Django's 404 page."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_unknown_api_route_is_a_problem_document(client):
    response = client.get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == 404
    assert "/api/v1/no-such-thing" in body["detail"]


def test_unknown_receiver_route_is_a_problem_document(client):
    response = client.post("/v1/logs", data=b"{}", content_type="application/json")
    assert response.status_code == 404
    assert response.json()["title"] == "Not found"


def test_unknown_site_page_is_html(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_api_server_error_is_a_problem_document(rf):
    from trustrank.lib.error_pages import server_error

    response = server_error(rf.get("/api/v1/findings"))
    assert response.status_code == 500
    assert response["Content-Type"] == "application/problem+json"
