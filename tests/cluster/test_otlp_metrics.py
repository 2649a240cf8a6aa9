from __future__ import annotations

import contextlib
import math
import random
import time

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tests.cluster.otlp_build import attributes, dcgm_request, number_point, request
from trustrank.parsers.errors import ParserError
from trustrank.parsers.otlp_metrics import otlp_metrics_parse
from trustrank.parsers.otlp_metrics_model import JSON, OtlpLimits, OtlpMetricsError
from trustrank.parsers.series import MetricKind

NOW = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns


def _gauge(name: str, points: list[tuple[int, float | int, dict[str, object]]]) -> metrics_pb2.Metric:
    metric = metrics_pb2.Metric(name=name, unit="%", description="utilisation")
    for time_ns, value, labels in points:
        number_point(metric.gauge.data_points, time_ns=time_ns, value=value, labels=labels)
    return metric


def test_dcgm_shaped_request_is_read_columnar_with_labels_and_resource():
    body = dcgm_request(nodes=3, gpus=2, series=5, time_ns=NOW).SerializeToString()
    parsed = otlp_metrics_parse(body=body, now_ns=NOW)
    assert parsed.total_points == 30 and parsed.accepted_points == 30 and not parsed.message()
    resource = parsed.resources[1]
    assert resource.cluster == "prod"
    assert resource.attributes["k8s.node.name"] == "gpu-node-0001"
    util = resource.metrics[0]
    assert (util.name, util.type, util.kind) == ("DCGM_FI_DEV_GPU_UTIL", "gauge", MetricKind.GAUGE)
    assert util.numbers is not None
    assert list(util.numbers.values) == [7.0, 10.0]
    assert list(util.numbers.time_ns) == [NOW, NOW]
    assert dict(util.numbers.labels[1])["UUID"] == "GPU-00001-01-5f2a-4c1e-9b7d"
    counter = resource.metrics[4]
    assert (counter.type, counter.temporality, counter.monotonic) == ("sum", "cumulative", True)
    assert counter.kind is MetricKind.COUNTER
    assert counter.numbers is not None and counter.numbers.start_ns[0] == NOW - 3_600_000_000_000
    # Later metrics of a resource take the whole-metric path; same columns either way.
    for index, metric in enumerate(resource.metrics):
        assert metric.numbers is not None
        assert list(metric.numbers.values) == [float((7 + 3 * gpu + index) % 100) for gpu in range(2)]
        assert metric.numbers.labels == util.numbers.labels
        assert list(metric.numbers.start_ns) == [NOW - 3_600_000_000_000 if index == 4 else 0] * 2


def test_label_sets_are_interned_across_metrics():
    body = dcgm_request(nodes=1, gpus=2, series=3, time_ns=NOW).SerializeToString()
    metrics = otlp_metrics_parse(body=body, now_ns=NOW).resources[0].metrics
    assert metrics[0].numbers is not None and metrics[2].numbers is not None
    assert metrics[0].numbers.labels[1] is metrics[2].numbers.labels[1]


def test_general_path_gives_the_same_point_as_the_fast_path():
    fast = _gauge("g", [(NOW, 1.5, {"gpu": "0"})])
    slow = _gauge("g", [(NOW, 1.5, {"gpu": "0"})])
    # An exemplar sits between the value and the attributes: not the fast layout.
    exemplar = slow.gauge.data_points[0].exemplars.add()
    exemplar.time_unix_nano = NOW
    exemplar.as_double = 2.0
    for metric in (fast, slow):
        parsed = otlp_metrics_parse(body=request([({}, [metric])]).SerializeToString(), now_ns=NOW)
        numbers = parsed.resources[0].metrics[0].numbers
        assert numbers is not None
        assert (numbers.labels[0], numbers.time_ns[0], numbers.values[0]) == ((("gpu", "0"),), NOW, 1.5)


def test_integer_values_start_times_and_non_string_attributes():
    metric = metrics_pb2.Metric(name="vllm:num_requests_waiting")
    number_point(metric.gauge.data_points, time_ns=NOW, start_ns=NOW - 5, value=7,
                 labels={"model_name": "llama", "replica": 3, "ready": True, "ratio": 0.5})
    parsed = otlp_metrics_parse(body=request([({}, [metric])]).SerializeToString(), now_ns=NOW)
    numbers = parsed.resources[0].metrics[0].numbers
    assert numbers is not None
    assert numbers.values[0] == 7.0 and numbers.start_ns[0] == NOW - 5
    assert dict(numbers.labels[0]) == {"model_name": "llama", "replica": "3", "ready": "true", "ratio": "0.5"}


@pytest.mark.parametrize(
    ("time_ns", "value", "labels", "problem"),
    [
        (0, 1.0, {"gpu": "0"}, "outside"),
        (NOW - 15 * 86_400 * 10**9, 1.0, {"gpu": "0"}, "outside"),
        (NOW + 11 * 60 * 10**9, 1.0, {"gpu": "0"}, "outside"),
        (NOW, math.nan, {"gpu": "0"}, "not a finite"),
        (NOW, math.inf, {"gpu": "0"}, "not a finite"),
        (NOW, 1.0, {"gpu": "0\x00"}, "NUL"),
        (NOW, 1.0, {"gpu": "x" * 4097}, "longer"),
    ],
)
def test_one_bad_point_is_counted_and_the_rest_kept(time_ns, value, labels, problem):
    metric = _gauge("g", [(NOW, 1.0, {"gpu": "1"}), (time_ns, value, labels), (NOW, 2.0, {"gpu": "2"})])
    parsed = otlp_metrics_parse(body=request([({}, [metric])]).SerializeToString(), now_ns=NOW)
    assert (parsed.total_points, parsed.rejected_points, parsed.accepted_points) == (3, 1, 2)
    assert problem in parsed.message()
    numbers = parsed.resources[0].metrics[0].numbers
    assert numbers is not None and list(numbers.values) == [1.0, 2.0]


def test_the_time_window_edges_are_inclusive():
    limits = OtlpLimits(max_past_s=60, max_future_s=10)
    metric = _gauge("g", [(NOW - 60 * 10**9, 1.0, {}), (NOW + 10 * 10**9, 2.0, {}),
                          (NOW + 10 * 10**9 + 1, 3.0, {})])
    parsed = otlp_metrics_parse(body=request([({}, [metric])]).SerializeToString(), now_ns=NOW,
                                limits=limits)
    assert parsed.rejected_points == 1


@pytest.mark.parametrize("name", ["", "x" * 256, "bad\x00name"])
def test_a_bad_metric_name_rejects_its_points_only(name):
    good = _gauge("good", [(NOW, 1.0, {})])
    bad = _gauge(name, [(NOW, 1.0, {}), (NOW, 2.0, {})])
    parsed = otlp_metrics_parse(body=request([({}, [bad, good])]).SerializeToString(), now_ns=NOW)
    assert (parsed.total_points, parsed.rejected_points) == (3, 2)
    assert [m.name for m in parsed.resources[0].metrics] == ["good"]


def test_no_recorded_value_points_are_stale_not_rejected():
    metric = metrics_pb2.Metric(name="g")
    number_point(metric.gauge.data_points, time_ns=NOW, value=0.0, labels={"a": "b"}, flags=1)
    number_point(metric.gauge.data_points, time_ns=NOW, value=3.0, labels={"a": "c"})
    parsed = otlp_metrics_parse(body=request([({}, [metric])]).SerializeToString(), now_ns=NOW)
    assert (parsed.stale_points, parsed.rejected_points, parsed.accepted_points) == (1, 0, 1)


def _histograms() -> list[metrics_pb2.Metric]:
    histogram = metrics_pb2.Metric(name="vllm:e2e_request_latency_seconds", unit="s")
    histogram.histogram.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
    point = histogram.histogram.data_points.add(
        time_unix_nano=NOW, start_time_unix_nano=NOW - 10**9, count=10, sum=4.5,
        explicit_bounds=[0.1, 0.5, 1.0], bucket_counts=[2, 5, 2, 1], min=0.01, max=3.0,
    )
    attributes(point.attributes, {"model_name": "llama"})
    bad = histogram.histogram.data_points.add(
        time_unix_nano=NOW, count=1, explicit_bounds=[1.0], bucket_counts=[1, 0, 0],
    )
    attributes(bad.attributes, {"model_name": "broken"})
    exponential = metrics_pb2.Metric(name="latency_exp")
    exponential.exponential_histogram.aggregation_temporality = (
        metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
    )
    epoint = exponential.exponential_histogram.data_points.add(
        time_unix_nano=NOW, count=6, sum=12.0, scale=2, zero_count=1, zero_threshold=0.0,
    )
    epoint.positive.offset = -1
    epoint.positive.bucket_counts.extend([2, 3])
    summary = metrics_pb2.Metric(name="rpc_duration")
    spoint = summary.summary.data_points.add(time_unix_nano=NOW, count=3, sum=1.5)
    spoint.quantile_values.add(quantile=0.5, value=0.4)
    return [histogram, exponential, summary]


def test_histograms_exponential_histograms_and_summaries():
    parsed = otlp_metrics_parse(body=request([({}, _histograms())]).SerializeToString(), now_ns=NOW)
    assert (parsed.total_points, parsed.rejected_points) == (4, 1)
    assert "one more entry" in parsed.message()
    histogram, exponential, summary = parsed.resources[0].metrics
    point = histogram.histograms[0]
    assert (point.count, point.sum, point.bounds, point.bucket_counts) == (10, 4.5, (0.1, 0.5, 1.0), (2, 5, 2, 1))
    assert (point.min, point.max, point.labels) == (0.01, 3.0, (("model_name", "llama"),))
    assert histogram.kind is MetricKind.HISTOGRAM
    assert exponential.temporality == "delta"
    epoint = exponential.exponential_histograms[0]
    assert (epoint.scale, epoint.zero_count, epoint.positive_offset, epoint.positive_counts) == (2, 1, -1, (2, 3))
    assert summary.summaries[0].quantiles == ((0.5, 0.4),)


def test_series_flattens_histograms_into_cumulative_buckets_with_resource_labels():
    resource = {"k8s.pod.name": "vllm-0", "k8s.namespace.name": "serving", "host.arch": "amd64"}
    parsed = otlp_metrics_parse(body=request([(resource, _histograms()[:1])]).SerializeToString(), now_ns=NOW)
    series = {(s.name, s.label("le")): s for s in parsed.series()}
    assert series[("vllm:e2e_request_latency_seconds_bucket", "0.5")].values == (7.0,)
    assert series[("vllm:e2e_request_latency_seconds_bucket", "1")].values == (9.0,)
    assert series[("vllm:e2e_request_latency_seconds_bucket", "+Inf")].values == (10.0,)
    assert series[("vllm:e2e_request_latency_seconds_count", "")].values == (10.0,)
    one = series[("vllm:e2e_request_latency_seconds_sum", "")]
    assert one.label("k8s.pod.name") == "vllm-0" and one.label("host.arch") == ""
    assert one.timestamps_ms == (NOW // 1_000_000,)


def test_series_groups_number_points_by_label_set():
    metric = _gauge("g", [(NOW, 1.0, {"gpu": "0"}), (NOW + 10**9, 2.0, {"gpu": "0"}), (NOW, 5.0, {"gpu": "1"})])
    parsed = otlp_metrics_parse(body=request([({}, [metric])]).SerializeToString(), now_ns=NOW)
    series = sorted(parsed.series(), key=lambda s: s.labels)
    assert [(s.labels, s.values) for s in series] == [((("gpu", "0"),), (1.0, 2.0)), ((("gpu", "1"),), (5.0,))]


def test_otlp_json_with_camel_case_string_int64_and_hex_exemplar_ids():
    message = request([({"k8s.cluster.name": "prod"}, [_gauge("g", [(NOW, 2.5, {"gpu": "0"})])])])
    point = message.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0]
    exemplar = point.exemplars.add(time_unix_nano=NOW, as_double=1.0)
    exemplar.trace_id = bytes.fromhex("5b8efff798038103d269b633813fc60c")
    exemplar.span_id = bytes.fromhex("eee19b7ec3c1b174")
    document = json_format.MessageToDict(message)
    body = json_format.MessageToJson(message).encode()
    assert document["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"][0]["timeUnixNano"] == str(NOW)
    # OTLP/JSON spells the ids in hex.
    body = body.replace(b'"W47/95gDgQPSabYzgT/GDA=="', b'"5b8efff798038103d269b633813fc60c"')
    body = body.replace(b'"7uGbfsPBsXQ="', b'"eee19b7ec3c1b174"')
    assert b'"eee19b7ec3c1b174"' in body and b'"5b8efff798038103d269b633813fc60c"' in body
    parsed = otlp_metrics_parse(body=body, encoding=JSON, now_ns=NOW)
    numbers = parsed.resources[0].metrics[0].numbers
    assert parsed.resources[0].cluster == "prod"
    assert numbers is not None and list(numbers.values) == [2.5]


def test_the_stock_sdk_encoding_parses():
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"k8s.cluster.name": "lab"}))
    meter = provider.get_meter("test")
    meter.create_counter("tokens").add(5, {"model_name": "llama"})
    meter.create_histogram("latency", unit="s").record(0.3, {"model_name": "llama"})
    body = encode_metrics(reader.get_metrics_data()).SerializeToString()
    parsed = otlp_metrics_parse(body=body)
    metrics = {m.name: m for m in parsed.resources[0].metrics}
    assert parsed.rejected_points == 0 and parsed.resources[0].cluster == "lab"
    assert metrics["tokens"].numbers is not None and list(metrics["tokens"].numbers.values) == [5.0]
    assert metrics["latency"].histograms[0].count == 1
    provider.shutdown()


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x05abc", b"\x0a\x02\x12\xff"])
def test_undecodable_protobuf_is_refused(body):
    with pytest.raises(OtlpMetricsError):
        otlp_metrics_parse(body=body, now_ns=NOW)


@pytest.mark.parametrize("body", [
    b"not json", b"[1, 2]", b'{"resourceMetrics": 5}', b'{"resourceMetrics": [5]}',
    b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"histogram": {"dataPoints": 3}}]}]}]}',
])
def test_bad_json_is_refused(body):
    with pytest.raises(OtlpMetricsError):
        otlp_metrics_parse(body=body, encoding=JSON, now_ns=NOW)


def test_unknown_encoding_is_refused():
    with pytest.raises(OtlpMetricsError, match="unsupported"):
        otlp_metrics_parse(body=b"", encoding="text/plain")


def test_arbitrary_bytes_raise_only_the_parser_error():
    rng = random.Random(11)
    valid = dcgm_request(nodes=1, gpus=2, series=3, time_ns=NOW).SerializeToString()
    for _ in range(400):
        body = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            body[rng.randrange(len(body))] = rng.randrange(256)
        for candidate in (bytes(body), bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))):
            with contextlib.suppress(ParserError):
                otlp_metrics_parse(body=candidate, now_ns=NOW)
            with contextlib.suppress(ParserError):
                otlp_metrics_parse(body=candidate, encoding=JSON, now_ns=NOW)


def test_parse_rate_is_reasonable_for_a_dcgm_scrape():
    body = dcgm_request(nodes=50, gpus=8, series=40, time_ns=time.time_ns()).SerializeToString()
    started = time.process_time()
    parsed = otlp_metrics_parse(body=body)
    elapsed = time.process_time() - started
    assert parsed.accepted_points == 16_000
    # A loose floor, far below the bench figure, so a busy CI machine does not flake.
    assert parsed.total_points / elapsed > 50_000


def test_json_points_that_cannot_be_read_are_counted_not_fatal():
    point = {"timeUnixNano": str(NOW), "asDouble": 1.0, "attributes": [{"key": "gpu", "value": {"stringValue": "0"}}]}
    body = orjson.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "g", "gauge": {"dataPoints": [point, {"timeUnixNano": str(NOW), "asDouble": "x"},
                                               {"timeUnixNano": "soon", "asInt": "1"}, {"asInt": "2"},
                                               {"timeUnixNano": str(NOW), "asInt": "3", "attributes": [{"key": 1}]}]}},
        {"name": "s", "sum": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_DELTA", "isMonotonic": True,
                              "data_points": [{"time_unix_nano": NOW, "as_int": "7"}]}},
    ]}]}]})
    parsed = otlp_metrics_parse(body=body, encoding=JSON, now_ns=NOW)
    assert (parsed.total_points, parsed.rejected_points) == (6, 4)
    gauge, delta = parsed.resources[0].metrics
    assert gauge.numbers is not None and list(gauge.numbers.values) == [1.0]
    assert gauge.numbers.labels[0] == (("gpu", "0"),)
    assert (delta.kind, delta.monotonic) == (MetricKind.DELTA, True)
    assert delta.numbers is not None and list(delta.numbers.values) == [7.0]


def test_json_and_protobuf_give_the_same_result():
    message = dcgm_request(nodes=2, gpus=2, series=5, time_ns=NOW)
    message.resource_metrics[0].scope_metrics[0].metrics.extend(_histograms())
    from_proto = otlp_metrics_parse(body=message.SerializeToString(), now_ns=NOW)
    from_json = otlp_metrics_parse(body=json_format.MessageToJson(message).encode(), encoding=JSON, now_ns=NOW)
    assert from_json == from_proto


def _len_field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_a_truncated_point_in_the_fast_layout_is_rejected_not_raised():
    truncated = b"\x11" + bytes(8) + b"\x19" + bytes(8) + b"\x21" + b"\x00\x00\x00"
    metric = _len_field(1, b"g") + _len_field(5, _len_field(1, truncated))
    body = _len_field(1, _len_field(2, _len_field(2, metric)))
    parsed = otlp_metrics_parse(body=body, now_ns=NOW)
    assert (parsed.total_points, parsed.rejected_points) == (1, 1)


@pytest.mark.parametrize(("time_ns", "value"), [(0, 1.0), (NOW, math.nan), (NOW + 3600 * 10**9, 2.0)])
def test_bad_points_are_caught_on_the_whole_metric_path_too(time_ns, value):
    labels = [{"gpu": "0"}, {"gpu": "1"}]
    first = _gauge("a", [(NOW, 1.0, labels[0]), (NOW, 1.0, labels[1])])
    # Same label sets as the first metric: this one is decoded as a whole.
    second = _gauge("b", [(NOW, 1.0, labels[0]), (time_ns, value, labels[1])])
    parsed = otlp_metrics_parse(body=request([({}, [first, second])]).SerializeToString(), now_ns=NOW)
    assert (parsed.total_points, parsed.rejected_points) == (4, 1)
    numbers = parsed.resources[0].metrics[1].numbers
    assert numbers is not None and numbers.labels == [(("gpu", "0"),)]


def test_series_flattens_exponential_histograms_and_summaries_as_prometheus_would():
    parsed = otlp_metrics_parse(body=request([({}, _histograms()[1:])]).SerializeToString(),
                                now_ns=NOW)
    series = {(s.name, s.label("le"), s.label("quantile")): s for s in parsed.series()}
    # scale 2: base 2^(1/4); positive buckets from offset -1 end at base^0 and base^1.
    upper = repr(2 ** 0.25)
    assert [(le, series[("latency_exp_bucket", le, "")].values) for le in ("0", "1", upper,
                                                                         "+Inf")] == [
        ("0", (1.0,)), ("1", (3.0,)), (upper, (6.0,)), ("+Inf", (6.0,))]
    assert series[("latency_exp_count", "", "")].values == (6.0,)
    assert series[("latency_exp_sum", "", "")].values == (12.0,)
    assert series[("latency_exp_bucket", "1", "")].kind is MetricKind.HISTOGRAM
    assert series[("rpc_duration", "", "0.5")].values == (0.4,)
    assert series[("rpc_duration_count", "", "")].values == (3.0,)
    assert series[("rpc_duration_sum", "", "")].values == (1.5,)
    assert series[("rpc_duration", "", "0.5")].kind is MetricKind.SUMMARY


def test_negative_exponential_buckets_come_first_by_value():
    metric = metrics_pb2.Metric(name="delta_exp")
    point = metric.exponential_histogram.data_points.add(
        time_unix_nano=NOW, count=4, sum=-1.0, scale=0, zero_count=1, zero_threshold=0.5)
    point.negative.offset = 0
    point.negative.bucket_counts.extend([1, 1])  # [-2, -1) and [-4, -2)
    point.positive.offset = 0
    point.positive.bucket_counts.extend([1])  # (1, 2]
    parsed = otlp_metrics_parse(body=request([({}, [metric])]).SerializeToString(), now_ns=NOW)
    buckets = [(s.label("le"), s.values[0]) for s in parsed.series() if s.name.endswith("_bucket")]
    assert buckets == [("-2", 1.0), ("-1", 2.0), ("0.5", 3.0), ("2", 4.0), ("+Inf", 4.0)]
