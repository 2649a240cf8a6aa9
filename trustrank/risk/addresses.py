"""Classify the caller address of a root server span: local, internal or internet.

A root server span is ingress only when its caller is outside. `client.address` is the
semantic-convention attribute for the original client (it survives proxies that set
X-Forwarded-For); `network.peer.address` is the socket peer. Prefer the first.

Decisions worth knowing:
- absent, empty or unparseable-as-IP addresses that are not `localhost` count as internet:
  a missing attribute must never make a service look safer than it is;
- `localhost` (and `*.localhost`, RFC 6761) counts as local, every other host name as
  internet, for the same reason (we cannot resolve names in a pure function);
- IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) are classified as the IPv4 address;
- shared address space 100.64.0.0/10 (carrier-grade NAT, also used by some cluster
  networks) counts as internal.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from trustrank.risk.inputs import AddressClass

_CGNAT = ipaddress.ip_network("100.64.0.0/10")


@lru_cache(maxsize=65536)
def classify_address(address: str | None) -> AddressClass:
    if not address:
        return "internet"
    text = address.strip().lower()
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        # host:port
        text = text.split(":", 1)[0]
    text = text.split("%", 1)[0]  # IPv6 zone index
    if text == "localhost" or text.endswith(".localhost"):
        return "local"
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return "internet"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "local"
    if ip.is_unspecified:
        # 0.0.0.0 as a peer means the instrumentation did not know: treat like absent.
        return "internet"
    if ip.is_private or ip.is_link_local or (ip.version == 4 and ip in _CGNAT):
        # is_private covers RFC 1918, fc00::/7 (ULA) and the documentation/benchmark
        # ranges; those never appear as real public peers.
        return "internal"
    return "internet"


def client_address(attributes: dict[str, object]) -> str | None:
    """The caller address a span names, `client.address` first."""
    for key in ("client.address", "network.peer.address"):
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None
