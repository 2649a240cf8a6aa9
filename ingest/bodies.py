"""Reading request bodies safely: size limits that hold after decompression too."""

from __future__ import annotations

import zlib

GZIP_MAGIC = b"\x1f\x8b"


class BodyTooLarge(ValueError):
    pass


class BodyUndecodable(ValueError):
    pass


def gunzip_limited(data: bytes, *, limit: int) -> bytes:
    """Decompress gzip data, refusing to produce more than `limit` bytes (gzip bombs)."""
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(data, limit + 1)
    except zlib.error as exc:
        raise BodyUndecodable(f"the gzip data is corrupt: {exc}") from exc
    if len(out) > limit or decompressor.unconsumed_tail:
        raise BodyTooLarge(
            f"the body decompresses to more than the configured limit of {limit} bytes"
        )
    if not decompressor.eof:
        raise BodyUndecodable("the gzip data is truncated")
    return out


def decode_body(data: bytes, *, content_encoding: str, limit: int) -> bytes:
    """Undo `Content-Encoding` (gzip or identity) and, for uploaded files, a gzip wrapper."""
    encoding = content_encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        return gunzip_limited(data, limit=limit)
    if encoding not in ("", "identity"):
        raise BodyUndecodable(f"unsupported Content-Encoding {content_encoding!r}; use gzip")
    if data[:2] == GZIP_MAGIC:
        return gunzip_limited(data, limit=limit)
    return data
