"""Outbound HTTP to addresses a team configured (webhooks, Jira): the one way TrustRank calls
out, so a URL typed by a user cannot make the server reach its own network.

A URL is refused unless it is http(s) and every address its host resolves to is public
(not private, loopback, link-local, reserved, multicast or unspecified); the setting
`TRUSTRANK_OUTBOUND_ALLOW_PRIVATE` lifts the address check (tests, on-premises Jira).
Redirects are not followed: a public host answering 302 to 169.254.169.254 must not work.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings


class OutboundRefused(ValueError):
    """The URL may not be called: not http(s), no host, or a private address."""


class OutboundError(Exception):
    """The call did not get an HTTP answer: DNS, connection, TLS or timeout."""


@dataclass(frozen=True)
class OutboundResponse:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _private_allowed() -> bool:
    return bool(getattr(settings, "TRUSTRANK_OUTBOUND_ALLOW_PRIVATE", False))


def _address_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def outbound_url_check(url: str) -> None:
    """Raise OutboundRefused when `url` may not be called (see the module's docstring)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise OutboundRefused(f"not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise OutboundRefused("only http and https URLs may be called")
    host = parts.hostname
    if not host:
        raise OutboundRefused("the URL names no host")
    if parts.username or parts.password:
        raise OutboundRefused("the URL may not carry a user or password")
    if _private_allowed():
        return
    try:
        infos = socket.getaddrinfo(host, port or (443 if parts.scheme == "https" else 80))
    except (OSError, UnicodeError) as exc:
        raise OutboundRefused(f"the host {host!r} does not resolve: {exc}") from exc
    for info in infos:
        address = str(info[4][0])
        if not _address_public(address):
            raise OutboundRefused(f"the host {host!r} resolves to a non-public address {address}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def outbound_request(
    method: str,
    url: str,
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> OutboundResponse:
    """Call `url` and return its answer, whatever its status. Raises OutboundRefused for a URL
    that may not be called and OutboundError when no HTTP answer came."""
    outbound_url_check(url)
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        url, data=body or None, headers=dict(headers or {}), method=method.upper()
    )
    try:
        with _opener.open(request, timeout=timeout) as response:
            return OutboundResponse(
                status=response.status, body=response.read(), headers=dict(response.headers)
            )
    except urllib.error.HTTPError as exc:
        return OutboundResponse(
            status=exc.code, body=exc.read() or b"", headers=dict(exc.headers or {})
        )
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OutboundError(f"{method.upper()} {url}: {exc}") from exc
