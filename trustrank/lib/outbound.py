"""Outbound HTTP to addresses a team admin configured (webhooks), never into our own network.

A URL a team admin typed must not become a way to probe the site's internal network (SSRF):
private, loopback, link-local (cloud metadata at 169.254.169.254), multicast and reserved
addresses are refused unless the operator allows them (TRUSTRANK_OUTBOUND_ALLOW_PRIVATE).

- `outbound_url_check` at configuration time: scheme, host, and every address the host
  resolves to now (a host that does not resolve yet is not refused: it is checked again
  at each send).
- `outbound_request` at send time resolves the host once, checks every address, and connects
  to the checked address itself (Host header and TLS SNI / certificate name stay the
  configured host name), so a DNS answer that changes between the check and the connection
  (DNS rebinding) cannot redirect it. Redirects are never followed.

Connections are pooled per (scheme, address, port, host name), so a worker sending many
deliveries to one endpoint reuses its keep-alive connections; the pools are thread-safe.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import certifi
import urllib3
from django.conf import settings
from urllib3.exceptions import HTTPError as Urllib3Error


class OutboundRefused(ValueError):
    """The URL or the address it resolves to may not be called; the message says why."""


class OutboundError(Exception):
    """A network error (resolution, connection, TLS, timeout) while calling the URL."""


@dataclass
class OutboundResponse:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


_SCHEMES = {"http": 80, "https": 443}
# Pools kept per process; the least recently used beyond this many are closed.
_POOLS_MAX = 256
# Connections kept per pool: as many as a delivery worker's threads.
_POOL_SIZE = 64
# A response body read beyond this is cut (a receiver's answer is only shown, never parsed).
_BODY_MAX = 64 * 1024


def _allow_private() -> bool:
    return bool(getattr(settings, "TRUSTRANK_OUTBOUND_ALLOW_PRIVATE", False))


def _address_refusal(address: str) -> str | None:
    """Why this address may not be called, or None."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified or ip.is_multicast:
        return f"address {ip} is not a unicast address"
    if _allow_private():
        return None
    if ip.is_loopback:
        return f"address {ip} is a loopback address"
    if ip.is_link_local:
        return f"address {ip} is a link-local address (cloud metadata lives there)"
    if ip.is_private or ip.is_reserved or not ip.is_global:
        return f"address {ip} is a private or reserved address"
    return None


@functools.lru_cache(maxsize=1024)
def _split(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path with query) of an http(s) URL, or OutboundRefused."""
    if not isinstance(url, str) or not url:
        raise OutboundRefused("the URL is empty")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise OutboundRefused(f"the URL is malformed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise OutboundRefused("the URL must use http or https")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise OutboundRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise OutboundRefused("the URL must not carry credentials")
    if any(c.isspace() for c in url):
        raise OutboundRefused("the URL contains white space")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return scheme, host, port or _SCHEMES[scheme], path


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


# Answers kept this long per process: a worker sending thousands of deliveries to one host
# asks the resolver once, not each time. The addresses are checked again at every use, and
# the connection goes to the address checked, so a short cache opens no rebinding window.
_RESOLVED_SECONDS = 10.0
_resolved: dict[tuple[str, int], tuple[float, list[str]]] = {}


def _resolve(host: str, port: int) -> list[str]:
    if _is_ip(host):
        return [host]
    now = time.monotonic()
    cached = _resolved.get((host, port))
    if cached is not None and now - cached[0] < _RESOLVED_SECONDS:
        return cached[1]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise OutboundError(f"cannot resolve {host}: {exc}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise OutboundError(f"cannot resolve {host}: no address")
    if len(_resolved) > 1024:
        _resolved.clear()
    _resolved[(host, port)] = (now, addresses)
    return addresses


def _checked_addresses(host: str, port: int) -> list[str]:
    addresses = _resolve(host, port)
    # Every address must pass: a name answering both a public and a private address would
    # otherwise reach the private one on some connection.
    for address in addresses:
        reason = _address_refusal(address)
        if reason:
            raise OutboundRefused(
                reason if host == address else f"{host} resolves to {address}: {reason}"
            )
    return addresses


def outbound_url_check(url: str) -> None:
    """Refuse (OutboundRefused, with the reason) a URL that may not be called: not http(s),
    no host, credentials in it, or a host that is (or resolves to) a refused address."""
    _scheme, host, port, _path = _split(url)
    try:
        _checked_addresses(host, port)
    except OutboundError:
        return  # not resolvable now: checked again, after resolution, at every send


_pools: OrderedDict[tuple[str, str, int, str], Any] = OrderedDict()
_pools_lock = threading.Lock()


def _pool(scheme: str, address: str, port: int, host: str, timeout: float) -> Any:
    key = (scheme, address, port, host)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is not None:
            _pools.move_to_end(key)
            return pool
        common: dict[str, Any] = {
            "maxsize": _POOL_SIZE, "block": False, "retries": False,
            "timeout": urllib3.Timeout(connect=timeout, read=timeout),
        }
        if scheme == "https":
            pool = urllib3.HTTPSConnectionPool(
                address, port, server_hostname=host, assert_hostname=host,
                cert_reqs="CERT_REQUIRED",
                ca_certs=getattr(settings, "TRUSTRANK_OUTBOUND_CA_BUNDLE", "") or certifi.where(),
                **common,
            )
        else:
            pool = urllib3.HTTPConnectionPool(address, port, **common)
        _pools[key] = pool
        while len(_pools) > _POOLS_MAX:
            _old_key, old = _pools.popitem(last=False)
            old.close()
        return pool


def outbound_request(
    method: str,
    url: str,
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> OutboundResponse:
    """Call the URL at an address checked after resolution; no redirect is followed (a 3xx
    is returned as it is). OutboundRefused for a refused URL or address, OutboundError for
    a network error."""
    scheme, host, port, path = _split(url)
    address = _checked_addresses(host, port)[0]
    default_port = _SCHEMES[scheme] == port
    host_header = f"[{host}]" if ":" in host else host
    sent = {"Host": host_header if default_port else f"{host_header}:{port}"}
    sent.update(headers or {})
    pool = _pool(scheme, address, port, host, timeout)
    try:
        response = pool.urlopen(
            method.upper(), path, body=body or None, headers=sent, redirect=False,
            retries=False, preload_content=False, assert_same_host=False,
            timeout=urllib3.Timeout(connect=timeout, read=timeout),
        )
        try:
            data = response.read(_BODY_MAX, decode_content=True)
            # Drain (bounded) so the connection goes back to the pool for the next request.
            response.drain_conn()
        finally:
            response.release_conn()
    except Urllib3Error as exc:
        raise OutboundError(f"{type(exc).__name__}: {exc}") from None
    except OSError as exc:
        raise OutboundError(f"{type(exc).__name__}: {exc}") from None
    return OutboundResponse(
        status=int(response.status), body=bytes(data or b""), headers=dict(response.headers)
    )
