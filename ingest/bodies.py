"""Reading request bodies safely: size limits that hold after decompression too."""

from __future__ import annotations

from isal import isal_zlib

GZIP_MAGIC = b"\x1f\x8b"


class BodyTooLarge(ValueError):
    pass


class BodyUndecodable(ValueError):
    pass


def gunzip_limited(data: bytes, *, limit: int) -> bytes:
    """Decompress gzip data, refusing to produce more than `limit` bytes (gzip bombs).
    By ISA-L (python-isal, zlib's interface): about two and a half times as fast as zlib's
    inflate, and every gzip OTLP request is inflated by its receiver."""
    decompressor = isal_zlib.decompressobj(16 + isal_zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(data, limit + 1)
    # isal's stub declares `error` as an instance; it is the exception class.
    except isal_zlib.error as exc:  # type: ignore[misc]
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
