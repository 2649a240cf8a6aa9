"""Cutting a protobuf ExportTraceServiceRequest into smaller valid ones on the wire format,
without decoding it (see `protobuf_split`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trustrank.parsers.otlp_checks import OtlpDecodeError


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise OtlpDecodeError("the protobuf body is truncated or malformed (varint)")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, int, int]]:
    """Top-level fields of a protobuf message: (field number, wire type, start, end) where
    [start, end) is the whole field (tag included)."""
    pos = 0
    end = len(buf)
    while pos < end:
        start = pos
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise OtlpDecodeError(f"the protobuf body uses an unsupported wire type {wire}")
        if pos > end or number == 0:
            raise OtlpDecodeError("the protobuf body is truncated or malformed")
        yield number, wire, start, pos


def _payload(buf: bytes, start: int) -> bytes:
    """The value bytes of a length-delimited field starting at `start`."""
    _, pos = _varint(buf, start)
    length, pos = _varint(buf, pos)
    return buf[pos:pos + length]


def _field_bytes(number: int, value: bytes) -> bytes:
    out = bytearray()
    for part in ((number << 3) | 2, len(value)):
        while True:
            byte = part & 0x7F
            part >>= 7
            if part:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                break
    return bytes(out) + value


def _split_message(buf: bytes, *, repeated: int, max_bytes: int, nested: Any) -> Iterator[bytes]:
    """Split a message whose field `repeated` is a list, keeping every other field in each
    part. `nested(value)` splits one oversized list element further (or yields it whole)."""
    header = bytearray()
    items: list[tuple[int, int]] = []
    for number, wire, start, end in _fields(buf):
        if number == repeated and wire == 2:
            items.append((start, end))
        else:
            header += buf[start:end]
    part = bytearray(header)
    filled = False
    for start, end in items:
        if end - start > max_bytes:
            if filled:
                yield bytes(part)
                part, filled = bytearray(header), False
            for piece in nested(_payload(buf, start)):
                yield bytes(header) + _field_bytes(repeated, piece)
            continue
        if filled and len(part) + (end - start) > max_bytes:
            yield bytes(part)
            part, filled = bytearray(header), False
        part += buf[start:end]
        filled = True
    if filled or not items:
        yield bytes(part)


def protobuf_split(body: bytes, *, max_bytes: int) -> Iterator[bytes]:
    """Cut an ExportTraceServiceRequest into smaller valid ExportTraceServiceRequests of at
    most about `max_bytes` each, on the wire format, without decoding it: a ResourceSpans too
    large is cut between its ScopeSpans, a ScopeSpans too large between its spans (each part
    keeps its resource and scope). Decoding a whole request costs ~4x its size in memory;
    decoding it part by part keeps a million-span request within a few hundred megabytes."""

    def scope_parts(scope_spans: bytes) -> Iterator[bytes]:
        yield from _split_message(
            scope_spans, repeated=2, max_bytes=max_bytes, nested=lambda span: iter([span])
        )

    def resource_parts(resource_spans: bytes) -> Iterator[bytes]:
        yield from _split_message(
            resource_spans, repeated=2, max_bytes=max_bytes, nested=scope_parts
        )

    yield from _split_message(body, repeated=1, max_bytes=max_bytes, nested=resource_parts)

