"""Input builders of formulas 13 (node-exporter + cAdvisor → `IoDevice`) and 14 (NIC
counters → `TrafficClassCounters`), from per-minute series as storage returns them."""

from __future__ import annotations

import pytest

from tests.cluster import k8s_build as k8s
from trustrank.parsers.kubernetes import kubernetes_parse
from trustrank.parsers.series import MetricKind, Series
from trustrank.risk.cluster.inputs import counter_increases, io_devices, rdma_counters, series_node
from trustrank.risk.cluster.io import io_throttling_diagnose
from trustrank.risk.cluster.rdma import rdma_diagnose

T0 = 1_700_000_040_000  # a minute boundary + 0 s; samples at each minute's 30th second
NODE = (("device", "nvme0n1"), ("instance", "10.0.0.1:9100"), ("node", "n1"))


def _counter(name: str, labels, values, *, start_minute: int = 0) -> Series:
    stamps = tuple(T0 + (start_minute + i) * 60_000 + 30_000 for i in range(len(values)))
    return Series(name, tuple(sorted(labels)), MetricKind.COUNTER, stamps, tuple(map(float, values)))


def _cumulative(increases, start: float = 1000.0) -> list[float]:
    values, total = [start], start
    for step in increases:
        total += step
        values.append(total)
    return values


def _disk(*, wait_ms, util=None, ops: int = 600, info: bool = True) -> list[Series]:
    """node-exporter disk counters whose per-minute wait and utilisation are given."""
    n = len(wait_ms)
    util = util if util is not None else [10.0] * n
    series = [
        _counter("node_disk_reads_completed_total", NODE, _cumulative([ops / 2] * n)),
        _counter("node_disk_writes_completed_total", NODE, _cumulative([ops / 2] * n)),
        _counter("node_disk_read_time_seconds_total", NODE,
                 _cumulative([w / 1000 * ops / 2 for w in wait_ms])),
        _counter("node_disk_write_time_seconds_total", NODE,
                 _cumulative([w / 1000 * ops / 2 for w in wait_ms])),
        _counter("node_disk_io_time_seconds_total", NODE, _cumulative([u * 0.6 for u in util])),
    ]
    if info:
        series.append(Series("node_disk_info", tuple(sorted(
            (*NODE, ("major", "259"), ("minor", "0")))), MetricKind.GAUGE, (T0,), (1.0,)))
    return series


def _cadvisor(pod: str, *, read_bytes_per_min: float, writes_per_min: float = 0.0, container: str = "") -> list[Series]:
    labels = (("container", container), ("device", "/dev/nvme0n1"), ("namespace", "ml"), ("pod", pod))
    return [
        _counter("container_fs_reads_bytes_total", labels, _cumulative([read_bytes_per_min] * 3)),
        _counter("container_fs_writes_total", labels, _cumulative([writes_per_min] * 3)),
    ]


PODS = kubernetes_parse(body=k8s.listing(
    k8s.node("n1"),
    k8s.pod("infer-0", node="n1", gpus=1, priority=1000, owner=("StatefulSet", "infer")),
    k8s.pod("train-0", node="n1", gpus=2, qos="BestEffort", owner=("Job", "train")),
    k8s.pod("etl-0", node="n1", qos="Burstable", owner=("Job", "etl")),
    k8s.pod("far-0", node="n2", qos="Burstable"),
)).pods


@pytest.mark.parametrize(("values", "expected"), [
    ([10, 20, 35], [10.0, 15.0]),
    ([10, 20, 5, 9], [10.0, 5.0, 4.0]),  # reset: counts from zero, never negative
    ([10, 10], [0.0]),
    ([10], []),
])
def test_counter_increases_survive_resets(values, expected):
    found = counter_increases(zip((T0 + i * 60_000 for i in range(len(values))), values, strict=True))
    assert [increase for _, _, increase, _ in found] == expected
    assert all(seconds == 60.0 for _, _, _, seconds in found)


def test_a_gap_of_a_minute_breaks_the_run():
    found = counter_increases([(T0, 1.0), (T0 + 60_000, 2.0), (T0 + 180_000, 9.0)])
    assert [increase for _, _, increase, _ in found] == [1.0]


@pytest.mark.parametrize(("labels", "node"), [
    ((("node", "n1"), ("instance", "x:9100")), "n1"),
    ((("Hostname", "h1"),), "h1"),
    ((("k8s.node.name", "k1"),), "k1"),
    ((("instance", "10.0.0.7:9100"),), "10.0.0.7"),
    ((("instance", "[::1]:9100"),), "[::1]"),
])
def test_series_node(labels, node):
    assert series_node(Series("x", labels, MetricKind.GAUGE, (), ())) == node


def test_iostat_await_and_util_per_minute():
    (device,) = io_devices(series=_disk(wait_ms=[10, 60, 70, 80], util=[50, 95, 100, 20]))
    assert device.device == "259:0" and device.period_s == 60.0
    assert [round(w, 6) for _, w in device.wait_ms] == [10.0, 60.0, 70.0, 80.0]
    assert [round(q, 6) for _, q in device.queue_percent] == [50.0, 95.0, 100.0, 20.0]
    assert device.wait_ms[0][0] == (T0 + 90_000) / 1000  # at the minute's sample time


def test_disk_counter_reset_gives_no_negative_wait_or_queue():
    series = _disk(wait_ms=[10, 20, 30], util=[10, 20, 30])
    # The node rebooted before the last minute: every counter starts again from 0, so its
    # last value is that minute's increase.
    series = [s._replace(values=(*s.values[:-1], s.values[-1] - s.values[-2])) if s.name != "node_disk_info"
              else s for s in series]
    (device,) = io_devices(series=series)
    assert [round(w, 6) for _, w in device.wait_ms] == [10.0, 20.0, 30.0]
    assert [round(q, 6) for _, q in device.queue_percent] == [10.0, 20.0, 30.0]


def test_the_neighbour_is_the_busiest_other_pod_and_the_subject_the_inference_pod():
    series = [*_disk(wait_ms=[60, 70, 80]),
              *_cadvisor("infer-0", read_bytes_per_min=600 * 2**20 * 60),  # the subject: never limited
              *_cadvisor("etl-0", read_bytes_per_min=400 * 2**20 * 60, writes_per_min=3000 * 60),
              *_cadvisor("etl-0", read_bytes_per_min=1, container="main"),  # the pod cgroup already holds it
              *_cadvisor("train-0", read_bytes_per_min=100 * 2**20 * 60),
              *_cadvisor("far-0", read_bytes_per_min=900 * 2**20 * 60)]  # another node
    (device,) = io_devices(series=series, pods=PODS)
    assert (device.subject, device.workload, device.neighbour) == ("ml/infer-0", "ml/StatefulSet/infer", "ml/etl-0")
    assert device.neighbour_rbps == pytest.approx(400 * 2**20) and device.neighbour_wiops == pytest.approx(3000)
    (found,) = io_throttling_diagnose(devices=[device])
    assert found.evidence_dict()["io_max"] == "259:0 rbps=209715200 wbps=max riops=max wiops=1500"


def test_a_trace_marked_workload_is_the_subject_before_an_inference_guess():
    (device,) = io_devices(series=_disk(wait_ms=[1]), pods=PODS,
                           latency_sensitive={"ml/Job/etl": True})
    assert device.subject == "ml/etl-0"


@pytest.mark.parametrize(("info", "pods", "subject", "device"), [
    (True, (), "n1", "259:0"),  # no snapshot: the node is the subject
    (False, PODS, "ml/infer-0", "nvme0n1"),  # no node_disk_info: the name stands in
])
def test_missing_pieces_still_give_a_device_with_no_limit_to_copy(info, pods, subject, device):
    (found,) = io_devices(series=_disk(wait_ms=[60, 70, 80], info=info), pods=pods)
    assert (found.subject, found.device, found.neighbour) == (subject, device, "")
    (diagnosis,) = io_throttling_diagnose(devices=[found])
    assert diagnosis.evidence_dict()["io_max"] == f"{device} rbps=max wbps=max riops=max wiops=max"


@pytest.mark.parametrize(("wait", "util", "flagged"), [
    ([10, 60, 70, 80, 20], None, True),  # 3 periods above 50 ms
    ([10, 60, 70, 20, 80], None, False),
    ([10, 10], [10, 95], True),  # one minute's mean ≥ 90 % covers 60 s ≥ 2 s
    ([10, 10], [10, 89], False),
])
def test_formula_13_on_minutes(wait, util, flagged):
    assert bool(io_throttling_diagnose(devices=io_devices(series=_disk(wait_ms=wait, util=util)))) is flagged


PORT = (("device", "mlx5_0"), ("node", "n1"), ("port", "1"))


def _rdma(tc: int, *, packets, drops, cnp=None, style: str = "label") -> list[Series]:
    if style == "ethtool":  # node-exporter's ethtool collector: the priority is in the name
        names = (f"node_ethtool_rx_prio{tc}_packets", f"node_ethtool_rx_prio{tc}_discards")
        labels = PORT
    else:
        names = ("rdma_rx_packets_total", "rdma_rx_discards_total")
        labels = (*PORT, ("priority", str(tc)))
    series = [_counter(names[0], labels, packets), _counter(names[1], labels, drops)]
    if cnp is not None:
        series.append(_counter("rdma_np_cnp_sent_total", PORT, cnp))  # per port, every class
    return series


@pytest.mark.parametrize("style", ["label", "ethtool"])
def test_rdma_increases_over_the_newest_minute_with_both_counters(style):
    series = _rdma(3, packets=[0, 1000, 1850], drops=[0, 10, 160], cnp=[0, 0, 40], style=style)
    (tc3,) = rdma_counters(series=series)
    assert (tc3.node, tc3.port, tc3.traffic_class, tc3.interval_s) == ("n1", "mlx5_0/1", 3, 60.0)
    assert (tc3.packets, tc3.drops, tc3.cnp) == (850.0, 150.0, 40.0)
    assert [d.kind for d in rdma_diagnose(counters=[tc3])] == ["rdma_congestion"]


def test_rdma_minute_where_drops_are_missing_is_skipped_for_the_previous_one():
    series = [_counter("rdma_rx_packets_total", (*PORT, ("priority", "5")), [0, 100, 200, 300]),
              _counter("rdma_rx_discards_total", (*PORT, ("priority", "5")), [0, 2, 3])]
    (tc5,) = rdma_counters(series=series)
    assert (tc5.packets, tc5.drops) == (100.0, 1.0)
    (found,) = rdma_diagnose(counters=[tc5])
    assert found.kind == "rdma_metadata_retries" and found.evidence_dict()["retries"] == 1.0


def test_rdma_counter_reset_and_missing_pieces():
    # Reset between the last two minutes: the new values are the increases.
    (tc0,) = rdma_counters(series=_rdma(0, packets=[5000, 9000, 100], drops=[7, 9, 0]))
    assert (tc0.packets, tc0.drops, tc0.cnp) == (100.0, 0.0, 0.0)
    assert rdma_diagnose(counters=[tc0]) == []
    # Packets without a drops counter, or a single minute: nothing to judge.
    assert rdma_counters(series=_rdma(3, packets=[0, 10], drops=[0])) == []
    assert rdma_counters(series=[_counter("rdma_rx_packets_total", (*PORT, ("priority", "3")), [0, 10])]) == []
    assert rdma_counters(series=[_counter("rdma_np_cnp_sent_total", PORT, [0, 10])]) == []
