"""`otlp_metrics_check` answers what `otlp_metrics_parse` would (counts, problems,
clusters, errors) for every kind of request, taking the quick path only for requests
whose every point is good."""

from __future__ import annotations

import contextlib
import math
import random

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tests.cluster.otlp_build import dcgm_request, number_point, request
from tests.cluster.test_otlp_metrics import NOW, _gauge, _histograms, _len_field
from trustrank.parsers import otlp_metrics
from trustrank.parsers.errors import ParserError
from trustrank.parsers.otlp_columns import otlp_metrics_raw_columns
from trustrank.parsers.otlp_metrics import otlp_metrics_check, otlp_metrics_parse
from trustrank.parsers.otlp_metrics_model import JSON, OtlpLimits, OtlpMetricsError


def _expected(body: bytes, **kwargs: object) -> tuple[object, ...]:
    parsed = otlp_metrics_parse(body=body, now_ns=NOW, **kwargs)  # type: ignore[arg-type]
    clusters = tuple(dict.fromkeys(r.cluster for r in parsed.resources if r.metrics))
    return (parsed.total_points, parsed.rejected_points, parsed.stale_points,
            parsed.problems, clusters, parsed.message())


def _checked(body: bytes, **kwargs: object) -> tuple[object, ...]:
    checked = otlp_metrics_check(body=body, now_ns=NOW, **kwargs)  # type: ignore[arg-type]
    return (checked.total_points, checked.rejected_points, checked.stale_points,
            checked.problems, checked.clusters, checked.message())


def _stale() -> metrics_pb2.Metric:
    metric = metrics_pb2.Metric(name="g")
    number_point(metric.gauge.data_points, time_ns=NOW, value=0.0, labels={"a": "b"}, flags=1)
    number_point(metric.gauge.data_points, time_ns=NOW, value=3.0, labels={"a": "c"})
    return metric


def _exemplar() -> metrics_pb2.Metric:
    metric = _gauge("g", [(NOW, 1.5, {"gpu": "0"})])
    exemplar = metric.gauge.data_points[0].exemplars.add()
    exemplar.time_unix_nano, exemplar.as_double = NOW, 2.0
    return metric


def _mixed_layouts() -> metrics_pb2.Metric:
    metric = _gauge("g", [(NOW, 1.0, {"gpu": "0"})])
    number_point(metric.gauge.data_points, time_ns=NOW, start_ns=NOW - 10, value=2.0,
                 labels={"gpu": "1"})
    return metric


def _truncated() -> bytes:
    truncated = b"\x11" + bytes(8) + b"\x19" + bytes(8) + b"\x21" + b"\x00\x00\x00"
    metric = _len_field(1, b"g") + _len_field(5, _len_field(1, truncated))
    return _len_field(1, _len_field(2, _len_field(2, metric)))


def _empty_point() -> bytes:
    metric = _len_field(1, b"g") + _len_field(5, _len_field(1, b""))
    return _len_field(1, _len_field(2, _len_field(2, metric)))


def _cluster(name: str) -> dict[str, str]:
    return {"k8s.cluster.name": name}


BODIES = {
    "dcgm": dcgm_request(nodes=3, gpus=2, series=6, time_ns=NOW).SerializeToString(),
    "two clusters and one without metrics": request([
        (_cluster("a"), [_gauge("g", [(NOW, 1.0, {})])]), (_cluster("b"), []),
        (_cluster("c"), [_gauge("g", [(NOW, 1.0, {})])]), (_cluster("a"), [_gauge("h", [])]),
    ]).SerializeToString(),
    "no cluster": request([({}, [_gauge("g", [(NOW, 1.0, {"gpu": "0"})])])]).SerializeToString(),
    "empty": b"",
    "time zero": request([({}, [_gauge("g", [(0, 1.0, {})])])]).SerializeToString(),
    "too old": request([({}, [_gauge("g", [(NOW - 15 * 86_400 * 10**9, 1.0, {})])])])
    .SerializeToString(),
    "too new": request([({}, [_gauge("g", [(NOW + 11 * 60 * 10**9, 1.0, {})])])])
    .SerializeToString(),
    "nan": request([({}, [_gauge("g", [(NOW, 1.0, {}), (NOW, math.nan, {"a": "b"})])])])
    .SerializeToString(),
    "inf": request([({}, [_gauge("g", [(NOW, math.inf, {})])])]).SerializeToString(),
    "huge finite values": request([({}, [_gauge("g", [(NOW, 1e308, {}), (NOW, 1e308, {})])])])
    .SerializeToString(),
    "nul label": request([({}, [_gauge("g", [(NOW, 1.0, {"gpu": "0\x00"})])])])
    .SerializeToString(),
    "long label": request([({}, [_gauge("g", [(NOW, 1.0, {"gpu": "x" * 4097})])])])
    .SerializeToString(),
    "bad name": request([({}, [_gauge("", [(NOW, 1.0, {})]), _gauge("ok", [(NOW, 1.0, {})])])])
    .SerializeToString(),
    "stale": request([({}, [_stale()])]).SerializeToString(),
    "integer value": request([({}, [_gauge("g", [(NOW, 7, {"replica": 3})])])])
    .SerializeToString(),
    "exemplar": request([({}, [_exemplar()])]).SerializeToString(),
    "mixed layouts": request([({}, [_mixed_layouts()])]).SerializeToString(),
    "histograms": request([(_cluster("h"), _histograms())]).SerializeToString(),
    "truncated point": _truncated(),
    "empty point": _empty_point(),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_check_answers_what_the_parse_would(name):
    assert _checked(BODIES[name]) == _expected(BODIES[name])


def test_the_check_honours_the_limits_at_the_window_edges():
    limits = OtlpLimits(max_past_s=60, max_future_s=10)
    for at, rejected in ((NOW - 60 * 10**9, 0), (NOW + 10 * 10**9, 0), (NOW + 10 * 10**9 + 1, 1)):
        body = request([({}, [_gauge("g", [(at, 1.0, {})])])]).SerializeToString()
        assert _checked(body, limits=limits) == _expected(body, limits=limits)
        assert _checked(body, limits=limits)[1] == rejected


def test_only_clean_requests_take_the_quick_path():
    quick = otlp_metrics_raw_columns(body=BODIES["dcgm"], now_ns=NOW)
    assert quick is not None and quick.points == 3 * 2 * 6
    for name in ("nan", "stale", "exemplar", "histograms", "nul label", "empty point"):
        assert otlp_metrics_raw_columns(body=BODIES[name], now_ns=NOW) is None, name


def test_json_is_checked_by_the_parse():
    body = b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "g", "gauge": ' \
        b'{"dataPoints": [{"timeUnixNano": "0", "asDouble": 1}]}}]}]}]}'
    assert _checked(body, encoding=JSON) == _expected(body, encoding=JSON)


@pytest.mark.parametrize("body", [b"\xff\xff", b"\x0a\x05abc"])
def test_undecodable_protobuf_raises_as_the_parse_does(body):
    with pytest.raises(OtlpMetricsError, match="not a protobuf"):
        otlp_metrics_check(body=body)


def test_arbitrary_bytes_give_the_parse_answer_or_its_error():
    rng = random.Random(12)
    valid = dcgm_request(nodes=1, gpus=2, series=3, time_ns=NOW).SerializeToString()
    for _ in range(300):
        body = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            body[rng.randrange(len(body))] = rng.randrange(256)
        expected: object = ParserError
        with contextlib.suppress(ParserError):
            expected = _expected(bytes(body))
        if expected is ParserError:
            with pytest.raises(ParserError):
                _checked(bytes(body))
        else:
            assert _checked(bytes(body)) == expected


def test_label_sets_found_good_are_remembered_and_bad_ones_never():
    otlp_metrics.CLEAN_RESTS.clear()
    for _ in range(2):
        assert _checked(BODIES["dcgm"]) == _expected(BODIES["dcgm"])
        assert _checked(BODIES["nul label"]) == _expected(BODIES["nul label"])
    assert len(otlp_metrics.CLEAN_RESTS[OtlpLimits()]) == 3 * 2  # one per GPU (3 nodes)
    # Another limit is another verdict: a label set good under one may be too long here.
    tight = OtlpLimits(max_label_length=4)
    assert _checked(BODIES["dcgm"], limits=tight) == _expected(BODIES["dcgm"], limits=tight)
    assert _checked(BODIES["dcgm"], limits=tight)[1] > 0
