"""Every page sends a Content-Security-Policy without inline script and holds no inline
script; reference URLs are links only for http(s); HSTS once served over HTTPS."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from django.test import Client, override_settings

from tests.conftest import ROOT
from tests.lib.test_edge_input import ROUTES, _concrete
from tests.vulns.helpers import bom, import_osv, load_sbom, osv
from trustrank.accounts.models import Role
from trustrank.findings.models import Finding
from trustrank.lib.templatefilters import http_url

PAGE_ROUTES = [r for r in ROUTES if not r.startswith(("api/", "v1/", "admin/"))]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I)
EVENT_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)

EVIL = [
    "javascript:alert(document.domain)",
    "JavaScript:alert(1)",
    " javascript:alert(1)",
    "java\tscript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "vbscript:msgbox(1)",
    "//evil.example/x",
    "https:evil",
]


@pytest.mark.parametrize("url", EVIL)
def test_only_http_urls_pass_the_filter(url):
    assert http_url(url) == ""


def test_http_urls_pass_unchanged():
    for url in ("https://osv.dev/vulnerability/GHSA-x", "http://example.org/a?b=c#d"):
        assert http_url(url) == url


@pytest.fixture
def finding_with_evil_references(team):
    record = osv("GHSA-aaaa-bbbb-cccc", "npm", "lodash", [{"introduced": "0"}, {"fixed": "5"}])
    record["references"] = [{"type": "WEB", "url": u} for u in EVIL] + [
        {"type": "ADVISORY", "url": "https://example.org/ok"}
    ]
    import_osv(team, [record])
    load_sbom(team, bom([("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")]))
    return Finding.objects.get(team=team)


@pytest.mark.django_db
def test_a_javascript_reference_is_not_a_link_on_the_finding_page(
    team, make_user, finding_with_evil_references
):
    client = Client()
    client.force_login(make_user("reader", team=team, role=Role.VIEWER))
    page = client.get(f"/findings/{finding_with_evil_references.pk}/").content.decode()
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert "https://example.org/ok" in hrefs
    for href in hrefs:
        assert href.startswith(("/", "?", "https://", "http://", "#")), href
    assert "javascript:alert(document.domain)" in page  # shown as text


@pytest.mark.django_db
@pytest.mark.parametrize("route", PAGE_ROUTES)
def test_every_page_sends_a_csp_without_inline_script_and_has_none(
    team, make_user, finding_with_evil_references, route
):
    client = Client()
    client.force_login(make_user("admin-user", team=team, role=Role.ADMIN))
    path = _concrete(route).replace("/1/", f"/{finding_with_evil_references.pk}/")
    response = client.get(path)
    policy = response["Content-Security-Policy"]
    script_src = re.search(r"script-src ([^;]+)", policy)
    assert script_src and "'unsafe-inline'" not in script_src.group(1), policy
    assert "'unsafe-eval'" not in policy
    if response.get("Content-Type", "").startswith("text/html"):
        body = (
            b"".join(response.streaming_content) if response.streaming else response.content
        )
        html = body.decode()
        assert not INLINE_SCRIPT.search(html), (path, INLINE_SCRIPT.search(html))
        assert not EVENT_HANDLER.search(html), (path, EVENT_HANDLER.search(html))


@pytest.mark.django_db
def test_the_api_docs_page_has_no_inline_script(team, make_user):
    client = Client()
    client.force_login(make_user("admin-user", team=team, role=Role.ADMIN))
    response = client.get("/api/docs/")
    assert response.status_code == 200
    assert not INLINE_SCRIPT.search(response.content.decode())


@pytest.mark.django_db
@override_settings(SECURE_HSTS_SECONDS=31_536_000)
def test_hsts_is_sent_over_https(client):
    assert "Strict-Transport-Security" in client.get("/login/", secure=True)
    assert "Strict-Transport-Security" not in client.get("/login/")


def _setting(name: str, **env: str) -> str:
    code = f"import django; django.setup(); from django.conf import settings; print(settings.{name})"
    full = {k: v for k, v in os.environ.items() if k not in ("SECURE_HSTS_SECONDS", "DEBUG")}
    full.update(DJANGO_SETTINGS_MODULE="trustrank.settings", SECRET_KEY="x" * 50, **env)
    full.pop("TRUSTRANK_TESTING", None)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full,
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.strip()


def test_hsts_is_on_by_default_when_cookies_are_secure():
    assert int(_setting("SECURE_HSTS_SECONDS", SESSION_COOKIE_SECURE="true")) >= 31_536_000
    assert _setting("SECURE_HSTS_SECONDS", SESSION_COOKIE_SECURE="false") == "0"
