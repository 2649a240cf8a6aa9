from __future__ import annotations

import contextlib
import random
import struct
from pathlib import Path

import cramjam
import pytest

from trustrank.parsers.errors import ParserError
from trustrank.parsers.prometheus_text import (
    OPENMETRICS,
    PrometheusTextError,
    prometheus_text_parse,
)
from trustrank.parsers.remote_write import RemoteWriteError, remote_write_parse
from trustrank.parsers.series import MetricKind

DATA = Path(__file__).resolve().parent.parent / "data" / "telemetry"
STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


# A hand-written encoder with prompb's field numbers, independent of the parser's schema.
def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _field(1, name.encode()) + _field(2, value.encode())


def _sample(value: float, timestamp_ms: int) -> bytes:
    return b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(timestamp_ms)


def _timeseries(labels: dict[str, str], samples: list[tuple[float, int]]) -> bytes:
    body = b"".join(_field(1, _label(k, v)) for k, v in labels.items())
    return body + b"".join(_field(2, _sample(v, t)) for v, t in samples)


def _metadata(kind: int, family: str, help_text: str, unit: str) -> bytes:
    return (b"\x08" + _varint(kind) + _field(2, family.encode()) + _field(4, help_text.encode())
            + _field(5, unit.encode()))


def _write_request(*series: bytes, metadata: tuple[bytes, ...] = ()) -> bytes:
    raw = b"".join(_field(1, s) for s in series) + b"".join(_field(3, m) for m in metadata)
    return bytes(cramjam.snappy.compress_raw(raw))


def test_remote_write_series_labels_samples_and_metadata():
    body = _write_request(
        _timeseries({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "n1", "cluster": "prod"},
                    [(37.0, 1_700_000_000_000), (41.0, 1_700_000_015_000)]),
        _timeseries({"__name__": "vllm:num_preemptions_total", "model_name": "llama"},
                    [(3.0, 1_700_000_000_000)]),
        metadata=(_metadata(2, "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", ""),
                  _metadata(1, "vllm:num_preemptions_total", "preemptions", "")),
    )
    parsed = remote_write_parse(body=body)
    util, preemptions = parsed.series
    assert util.name == "DCGM_FI_DEV_GPU_UTIL"
    assert util.labels == (("Hostname", "n1"), ("cluster", "prod"), ("gpu", "0"))
    assert util.timestamps_ms == (1_700_000_000_000, 1_700_000_015_000)
    assert util.values == (37.0, 41.0)
    assert (util.kind, util.help) == (MetricKind.GAUGE, "GPU utilization (in %).")
    assert preemptions.kind is MetricKind.COUNTER
    assert parsed.total_samples == 3 and parsed.rejected_samples == 0
    assert [m.family for m in parsed.metadata] == ["DCGM_FI_DEV_GPU_UTIL", "vllm:num_preemptions_total"]


def test_remote_write_drops_stale_markers_and_rejects_nan_and_nameless_series():
    body = _write_request(
        _timeseries({"__name__": "up"}, [(1.0, 1), (STALE_NAN, 2), (float("nan"), 3)]),
        _timeseries({"job": "x"}, [(1.0, 1)]),
    )
    parsed = remote_write_parse(body=body)
    assert [s.values for s in parsed.series] == [(1.0,)]
    assert (parsed.total_samples, parsed.stale_samples, parsed.rejected_samples) == (4, 1, 2)
    assert "__name__" in parsed.message()


def test_remote_write_uncompressed_option():
    raw = _field(1, _timeseries({"__name__": "up"}, [(1.0, 5)]))
    assert remote_write_parse(body=raw, compressed=False).series[0].timestamps_ms == (5,)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\xff\xff\xff\xff", "snappy"),
        (b"plain protobuf is not snappy", "snappy"),
        (bytes(cramjam.snappy.compress_raw(b"\x0a\x05\x0a\x03abc\xff")), "WriteRequest"),
        (bytes(cramjam.snappy.compress(b"framed, not block")), "snappy"),
    ],
)
def test_remote_write_bad_bodies_say_what_is_wrong(body, message):
    with pytest.raises(RemoteWriteError, match=message):
        remote_write_parse(body=body)


def test_remote_write_arbitrary_bytes_raise_only_the_parser_error():
    rng = random.Random(5)
    valid = _write_request(_timeseries({"__name__": "up", "a": "b"}, [(1.0, 1)]))
    for _ in range(500):
        body = bytearray(valid)
        body[rng.randrange(len(body))] = rng.randrange(256)
        for candidate in (bytes(body), bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))):
            with contextlib.suppress(ParserError):
                remote_write_parse(body=candidate)


def test_dcgm_exporter_text_from_the_corpus():
    scrape = prometheus_text_parse(
        body=(DATA / "datadog-integrations-core_dcgm_metrics.txt").read_bytes(), scraped_at_ms=1_000,
    )
    by_name = {}
    for series in scrape.series:
        by_name.setdefault(series.name, []).append(series)
    util = by_name["DCGM_FI_DEV_GPU_UTIL"][0]
    assert util.kind is MetricKind.GAUGE and util.timestamps_ms == (1_000,)
    assert util.label("modelName") == "Tesla T4" and util.label("gpu") == "0"
    assert by_name["DCGM_FI_DEV_FB_FREE"][0].values == (15109.0,)
    energy = by_name["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0]
    assert energy.kind is MetricKind.COUNTER
    k8s = by_name["DCGM_FI_PROF_DRAM_ACTIVE"][0]
    assert (k8s.label("pod"), k8s.label("namespace"), k8s.label("container")) == ("ray-1111111", "ray-llm", "ray-worker")
    assert scrape.families == len(by_name)


VLLM_TEXT = b"""# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="llama"} 2.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="llama"} 5.0
vllm:e2e_request_latency_seconds_count{model_name="llama"} 5.0
vllm:e2e_request_latency_seconds_sum{model_name="llama"} 4.25
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama"} 3.0 1700000000123
vllm:gpu_cache_usage_perc{model_name="llama"} NaN
"""


def test_vllm_text_with_histogram_own_timestamp_and_nan():
    scrape = prometheus_text_parse(body=VLLM_TEXT, scraped_at_ms=42)
    names = [(s.name, s.label("le")) for s in scrape.series]
    assert ("vllm:e2e_request_latency_seconds_bucket", "+Inf") in names
    waiting = next(s for s in scrape.series if s.name == "vllm:num_requests_waiting")
    assert waiting.timestamps_ms == (1_700_000_000_123,)
    assert scrape.nan_samples == 1
    bucket = next(s for s in scrape.series if s.name.endswith("_bucket"))
    assert bucket.kind is MetricKind.HISTOGRAM


def test_openmetrics_is_parsed_by_the_openmetrics_parser():
    body = (b"# TYPE gen_tokens counter\n# UNIT gen_tokens tokens\n"
            b"gen_tokens_total{model_name=\"llama\"} 17 1700000000.5\n# EOF\n")
    scrape = prometheus_text_parse(body=body, scraped_at_ms=1, media_type=OPENMETRICS + "; version=1.0.0")
    (series,) = scrape.series
    assert (series.name, series.kind, series.timestamps_ms, series.unit) == (
        "gen_tokens_total", MetricKind.COUNTER, (1_700_000_000_500,), "tokens")
    with pytest.raises(PrometheusTextError, match="OpenMetrics"):
        prometheus_text_parse(body=body.replace(b"# EOF\n", b""), scraped_at_ms=1, media_type=OPENMETRICS)


@pytest.mark.parametrize("body", [b"\xff\xfe", b"metric{a=\"b} 1\n", b"m abc\n", b"m{a=\"b\"}\n"])
def test_bad_text_is_refused(body):
    with pytest.raises(PrometheusTextError):
        prometheus_text_parse(body=body, scraped_at_ms=1)


def test_text_arbitrary_bytes_raise_only_the_parser_error():
    rng = random.Random(3)
    for _ in range(300):
        body = bytearray(VLLM_TEXT)
        for _ in range(3):
            body[rng.randrange(len(body))] = rng.choice(b"{}\",= \n#a1\xff")
        for media in ("text/plain", OPENMETRICS):
            with contextlib.suppress(ParserError):
                prometheus_text_parse(body=bytes(body), scraped_at_ms=1, media_type=media)


def test_remote_write_rejects_a_series_with_a_nul_in_a_label():
    body = _write_request(
        _timeseries({"__name__": "up", "job": "a\x00b"}, [(1.0, 1), (2.0, 2)]),
        _timeseries({"__name__": "up", "job": "ok"}, [(1.0, 1)]),
    )
    parsed = remote_write_parse(body=body)
    assert [s.label("job") for s in parsed.series] == ["ok"]
    assert parsed.rejected_samples == 2 and "NUL" in parsed.message()
