"""Hypothesis fuzzing of every parser in ingest/parsers: arbitrary bytes, and real corpus
files from tests/data mutated byte-wise and (for JSON) structurally. A parser may only return
its result or raise its own error; any other exception is a bug (a 500 at a receiver, a
crashed job in a worker).

Examples per parser are bounded (settings below) so the whole suite stays within about two
minutes on two cores; the run prints how many examples ran and how long they took."""

from __future__ import annotations

import contextlib
import io
import json
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import stats
from tests.runtime.helpers import SpanFactory
from trustrank.parsers.bom import BomError
from trustrank.parsers.cyclonedx import parse_cyclonedx
from trustrank.parsers.epss import EpssError, parse_epss
from trustrank.parsers.kev import KevError, parse_kev
from trustrank.parsers.nvd import NvdError, parse_nvd
from trustrank.parsers.osv import OsvError, parse_osv
from trustrank.parsers.otlp import JSON, PROTOBUF, OtlpDecodeError, otlp_decode, otlp_validate
from trustrank.parsers.spdx import SpdxError, parse_spdx
from trustrank.parsers.trust_bundle import trust_bundle_parse
from trustrank.parsers.x509 import CertificateParseError, certificates_parse

DATA = Path(__file__).resolve().parent.parent / "data"
FUZZ = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,  # the same examples in every CI run: a failure is reproducible
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _files(folder: str, pattern: str, *, max_bytes: int = 60_000, skip: str = "") -> list[bytes]:
    found = [
        p.read_bytes() for p in sorted((DATA / folder).rglob(pattern))
        if not skip or skip not in p.relative_to(DATA).parts
    ]
    return [b for b in found if len(b) <= max_bytes]


def _otlp_protobuf() -> bytes:
    from opentelemetry.trace import SpanKind

    f = SpanFactory()
    t = f.trace_id()
    root = f.span(service="web", name="GET /", kind=SpanKind.SERVER, trace_id=t)
    f.span(service="web", name="call", kind=SpanKind.CLIENT, trace_id=t, parent=root,
           attributes={"peer.service": "api"})
    return f.body()


CORPUS: dict[str, list[bytes]] = {
    "cyclonedx": _files("sbom", "*.json", max_bytes=30_000, skip="spdx") + _files("sbom", "*.xml", max_bytes=30_000),
    "spdx": _files("sbom/spdx", "*.json", max_bytes=60_000),
    "osv": _files("advisories/osv", "*.json", max_bytes=20_000),
    "kev": [orjson.dumps({**(doc := orjson.loads((DATA / "advisories/kev/known_exploited_vulnerabilities.json").read_bytes())), "vulnerabilities": doc["vulnerabilities"][:5]})],
    "epss": [b"\n".join((DATA / "advisories/epss/epss_scores_2026-09-29_first200rows.csv").read_bytes().splitlines()[:20])],
    "nvd": _files("nvd", "*.json"),
    "otlp_json": _files("traces", "*.json"),
    "otlp_protobuf": [_otlp_protobuf()],
    "x509": _files("certs", "*.pem") + _files("certs", "*.crt"),
    "spiffe_bundle": _files("certs", "*.json"),
}


# --- mutations --------------------------------------------------------------------------

def _byte_mutation(data: bytes, draw: Callable[[Any], Any]) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "splice", "nul"]))
        at = draw(st.integers(0, max(0, len(out) - 1)))
        if op == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete" and out:
            del out[at : at + draw(st.integers(1, 64))]
        elif op == "truncate":
            del out[at:]
        elif op == "splice" and out:
            start = draw(st.integers(0, len(out) - 1))
            out[at:at] = out[start : start + draw(st.integers(1, 256))]
        elif op == "nul":
            out[at:at] = b"\x00"
    return bytes(out)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.sampled_from(["", "\x00", "9999-12-31T23:59:59+14:00",
                                               "0001-01-01T00:00:00-14:00", "2030-01-01T00:00:00+18:00"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)


def _json_mutation(doc: Any, draw: Callable[[Any], Any]) -> Any:
    """Replace one value somewhere in the document with an arbitrary JSON value."""
    if isinstance(doc, dict) and doc:
        key = draw(st.sampled_from(sorted(doc)))
        if draw(st.booleans()):
            return {**doc, key: draw(JSON_VALUES)}
        return {**doc, key: _json_mutation(doc[key], draw)}
    if isinstance(doc, list) and doc:
        i = draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], _json_mutation(doc[i], draw), *doc[i + 1 :]]
    return draw(JSON_VALUES)


@st.composite
def inputs(draw: Callable[[Any], Any], corpus: list[bytes]) -> bytes:
    kind = draw(st.sampled_from(["bytes", "mutated", "json"]))
    if kind == "bytes" or not corpus:
        return bytes(draw(st.binary(max_size=2048)))
    original = draw(st.sampled_from(corpus))
    doc: Any = None
    if kind == "json" and original.lstrip()[:1] in (b"{", b"["):
        # Some corpus files are broken on purpose (truncated JSON): those get byte mutations.
        with contextlib.suppress(orjson.JSONDecodeError):
            doc = orjson.loads(original)
    if doc is not None:
        for _ in range(draw(st.integers(1, 3))):
            doc = _json_mutation(doc, draw)
        # The standard library writes integers of any size (orjson stops at 64 bits).
        return json.dumps(doc).encode()
    return _byte_mutation(original, draw)


def _run(name: str, parse: Callable[[bytes], Any], error: type[Exception], data: bytes) -> None:
    stats.HYPOTHESIS[name][0] += 1
    with contextlib.suppress(error):
        parse(data)


_UNPARAMETRIZED = {
    "test_an_osv_zip_of_mutated_records_parses_or_fails_cleanly": "osv_zip",
    "test_a_large_protobuf_export_is_split_and_checked_cleanly": "otlp_split",
}


@pytest.fixture(autouse=True)
def _timed(request: pytest.FixtureRequest) -> Any:
    """Wall time of each fuzzing test (generation included), for the summary line."""
    started = time.perf_counter()
    yield
    callspec = getattr(request.node, "callspec", None)
    name = _UNPARAMETRIZED.get(request.node.name) or (
        callspec.params.get("name") if callspec is not None else None
    )
    if name is not None:
        stats.HYPOTHESIS[name][1] += time.perf_counter() - started


def _zip(members: list[bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for i, member in enumerate(members):
            archive.writestr(f"r{i}.json", member)
    return buf.getvalue()


PARSERS: dict[str, tuple[Callable[[bytes], Any], type[Exception], str]] = {
    "cyclonedx": (parse_cyclonedx, BomError, "cyclonedx"),
    "spdx": (parse_spdx, SpdxError, "spdx"),
    "osv": (lambda b: parse_osv(b, filename="records.json"), OsvError, "osv"),
    "kev": (parse_kev, KevError, "kev"),
    "epss": (parse_epss, EpssError, "epss"),
    "nvd": (parse_nvd, NvdError, "nvd"),
    "otlp_json": (lambda b: otlp_decode(b, encoding=JSON), OtlpDecodeError, "otlp_json"),
    "otlp_protobuf": (lambda b: otlp_validate(b, encoding=PROTOBUF), OtlpDecodeError,
                      "otlp_protobuf"),
    "x509": (certificates_parse, CertificateParseError, "x509"),
    "trust_bundle": (trust_bundle_parse, CertificateParseError, "spiffe_bundle"),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_parser_returns_a_result_or_its_own_error(name):
    parse, error, corpus = PARSERS[name]

    @FUZZ
    @given(data=inputs(CORPUS[corpus]))
    def check(data: bytes) -> None:
        _run(name, parse, error, data)

    check()


@FUZZ
@given(members=st.lists(inputs(CORPUS["osv"]), min_size=1, max_size=3))
def test_an_osv_zip_of_mutated_records_parses_or_fails_cleanly(members):
    _run("osv_zip", lambda b: parse_osv(b, filename="all.zip"), OsvError, _zip(members))


@FUZZ
@given(data=inputs(CORPUS["otlp_protobuf"]))
def test_a_large_protobuf_export_is_split_and_checked_cleanly(data):
    # Small parts force the wire-level splitter through every mutated message.
    from trustrank.parsers.otlp import otlp_chunks

    _run("otlp_split", lambda b: list(otlp_chunks(b, encoding=PROTOBUF, max_bytes=64)),
         OtlpDecodeError, data)


@pytest.mark.parametrize(
    "doc",
    [
        {"id": "X-1", "modified": "2024-01-01T00:00:00Z", "affected": [{"ranges": 1}]},
        {"id": "X-2", "modified": "2024-01-01T00:00:00Z", "severity": True},
        {"id": "X-3", "modified": "2024-01-01T00:00:00Z", "references": 5},
        {"id": "X-4", "modified": "2024-01-01T00:00:00+18:00"},
        {"id": "X-5", "modified": "0001-01-01T00:00:00+01:00"},
    ],
)
def test_osv_records_the_fuzzer_broke_the_parser_with_are_refused(doc):
    """Found by the fuzzing above: each raised TypeError or stored what the database refuses."""
    with pytest.raises(OsvError):
        parse_osv(json.dumps(doc).encode())
