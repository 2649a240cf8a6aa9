"""A request read as columns holds exactly the points the full parse gives, and its packed
form (what a receiver stores beside the body) unpacks to the same columns."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.cluster.otlp_build import dcgm_request, number_point, request
from tests.cluster.test_otlp_metrics import NOW, _gauge
from tests.cluster.test_otlp_metrics_check import BODIES
from trustrank.parsers.otlp_columns import (
    RawColumns,
    columns_pack,
    columns_unpack,
    otlp_metrics_raw_columns,
    rest_labels,
)
from trustrank.parsers.otlp_metrics import otlp_metrics_parse


def _parsed_points(body: bytes) -> list[tuple[object, ...]]:
    """The parse's points, each with the kind and unit of its name's first metric (what
    storage keeps of a name)."""
    parsed = otlp_metrics_parse(body=body, now_ns=NOW)
    first: dict[str, tuple[str, str]] = {}
    found = []
    for resource in parsed.resources:
        for metric in resource.metrics:
            kind, unit = first.setdefault(metric.name, (str(metric.kind), metric.unit))
            numbers = metric.numbers
            if numbers is None:
                continue
            for labels, at, value in zip(numbers.labels, numbers.time_ns, numbers.values,
                                         strict=True):
                found.append((tuple(sorted(resource.attributes.items())), metric.name,
                              kind, unit, labels, at, value))
    return sorted(found)


def _column_points(columns: RawColumns) -> list[tuple[object, ...]]:
    found = []
    point_metric = np.repeat(np.arange(len(columns.metric_points)), columns.metric_points)
    for at in range(columns.points):
        metric = int(point_metric[at])
        name = int(columns.metric_name[metric])
        resource = columns.resources[int(columns.metric_resource[metric])]
        found.append((tuple(sorted(resource.items())), columns.names[name],
                      str(columns.kinds[name]), columns.units[name],
                      rest_labels(columns.rests[int(columns.point_labels[at])]),
                      int(columns.time_ns[at]), float(columns.values[at])))
    return sorted(found)


def _random_request(seed: int) -> bytes:
    rng = random.Random(seed)
    resources = []
    for node in range(rng.randint(1, 4)):
        metrics = []
        for index in range(rng.randint(1, 5)):
            metric = _gauge(f"m{index}", [])
            data = metric.gauge
            if rng.random() < 0.4:
                metric.ClearField("gauge")
                data = metric.sum
                data.aggregation_temporality = rng.choice([1, 2])
                data.is_monotonic = rng.random() < 0.5
            for gpu in range(rng.randint(0, 4)):
                number_point(data.data_points, time_ns=NOW - rng.randint(0, 10**12),
                             start_ns=NOW - 10**13 if rng.random() < 0.5 else 0,
                             value=rng.uniform(-1e6, 1e6),
                             labels={"gpu": str(gpu), "node": f"n{node}"} if gpu % 3 else {})
            metrics.append(metric)
        resources.append(({"k8s.cluster.name": "c", "k8s.node.name": f"n{node}"}, metrics))
    return request(resources).SerializeToString()


BODIES_AND_RANDOM = {**BODIES, **{f"random {seed}": _random_request(seed) for seed in range(30)}}


@pytest.mark.parametrize("name", sorted(BODIES_AND_RANDOM))
def test_columns_hold_the_points_of_the_parse(name):
    body = BODIES_AND_RANDOM[name]
    try:
        columns = otlp_metrics_raw_columns(body=body, now_ns=NOW)
    except Exception:
        with pytest.raises(Exception):  # noqa: B017 (the parse raises the same)
            otlp_metrics_parse(body=body, now_ns=NOW)
        return
    if columns is None:
        return
    assert _column_points(columns) == _parsed_points(body)


def test_clean_requests_are_read_as_columns():
    for name in ("dcgm", "no cluster", "mixed layouts", "huge finite values", "random 3"):
        assert otlp_metrics_raw_columns(body=BODIES_AND_RANDOM[name], now_ns=NOW) is not None, name


@pytest.mark.parametrize("name", ["dcgm", "two clusters and one without metrics", "random 7"])
def test_packed_columns_unpack_to_the_same(name):
    raw = otlp_metrics_raw_columns(body=BODIES_AND_RANDOM[name], now_ns=NOW)
    assert raw is not None
    back = columns_unpack(columns_pack(raw))
    assert isinstance(back, RawColumns)
    for field in RawColumns.__slots__:
        left, right = getattr(raw, field), getattr(back, field)
        if isinstance(left, np.ndarray):
            assert np.array_equal(left, right), field
        else:
            assert left == right, field
    assert _column_points(back) == _parsed_points(BODIES_AND_RANDOM[name])


def test_a_large_request_packs_small():
    body = dcgm_request(nodes=25, gpus=8, series=40, time_ns=NOW).SerializeToString()
    raw = otlp_metrics_raw_columns(body=body, now_ns=NOW)
    assert raw is not None and raw.points == 8000
    assert len(columns_pack(raw)) < len(body) / 5


@pytest.mark.parametrize("data", [b"", b"TRc2", b"TRc2garbage", b"XXXX" + bytes(100),
                                  b"TRc1" + bytes(100)])
def test_anything_else_unpacks_to_none(data):
    assert columns_unpack(data) is None
