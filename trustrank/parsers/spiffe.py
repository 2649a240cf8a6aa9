"""SPIFFE IDs (SPIFFE-ID spec): text -> `SpiffeId`, or ValueError naming the broken rule."""

from __future__ import annotations

import re
from dataclasses import dataclass

# SPIFFE ID grammar (SPIFFE-ID spec §2): lowercase trust domain, path segments of
# [A-Za-z0-9.-_], no empty, "." or ".." segment, no trailing slash, no query or fragment.
_TRUST_DOMAIN_RE = re.compile(r"^[a-z0-9._-]+$")
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_SPIFFE_MAX_BYTES = 2048


@dataclass(frozen=True)
class SpiffeId:
    trust_domain: str
    path: str

    def __str__(self) -> str:
        return f"spiffe://{self.trust_domain}{self.path}"


def spiffe_id_parse(value: str) -> SpiffeId:
    """Parse a SPIFFE ID or raise ValueError naming the rule it breaks."""
    if len(value.encode()) > _SPIFFE_MAX_BYTES:
        raise ValueError(f"SPIFFE ID longer than {_SPIFFE_MAX_BYTES} bytes")
    if not value.startswith("spiffe://"):
        raise ValueError(f"{value!r} does not start with spiffe://")
    rest = value[len("spiffe://") :]
    if "?" in rest or "#" in rest:
        raise ValueError(f"{value!r} has a query or fragment")
    domain, slash, path = rest.partition("/")
    if not domain:
        raise ValueError(f"{value!r} has an empty trust domain")
    if not _TRUST_DOMAIN_RE.match(domain):
        raise ValueError(
            f"{value!r}: trust domain {domain!r} may only hold lowercase letters, digits, '.', "
            "'-' and '_' (no port or user info)"
        )
    if not slash:
        return SpiffeId(trust_domain=domain, path="")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(f"{value!r} has an empty, '.' or '..' path segment")
        if not _SEGMENT_RE.match(segment):
            raise ValueError(f"{value!r}: path segment {segment!r} has a forbidden character")
    return SpiffeId(trust_domain=domain, path="/" + path)
