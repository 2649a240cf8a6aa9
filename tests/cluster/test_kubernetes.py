from __future__ import annotations

import contextlib
import random
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.cluster.k8s_build import event, listing, node, pod
from trustrank.parsers.errors import ParserError
from trustrank.parsers.kubernetes import KubernetesError, kubernetes_parse
from trustrank.parsers.kubernetes_history import pod_history_diff
from trustrank.parsers.kubernetes_objects import quantity_parse

DATA = Path(__file__).resolve().parent.parent / "data" / "telemetry"


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("16Gi", 16 * 2**30), ("1", 1.0), (2, 2.0), ("1.5", 1.5), ("1e3", 1000.0),
     ("128974848", 128974848.0), ("129M", 129e6), ("100Ki", 102400.0), ("250u", 0.00025), (".5", 0.5)],
)
def test_quantities(text, value):
    assert quantity_parse(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "16GB", "Gi", True, None, [1]])
def test_bad_quantities(text):
    with pytest.raises(ValueError):
        quantity_parse(text)


def test_kube_system_pod_list_from_the_corpus():
    snapshot = kubernetes_parse(body=(DATA / "sonobuoy-kind_kube-system_pods.json").read_bytes())
    pods = {p.name: p for p in snapshot.pods}
    assert len(pods) == 14
    coredns = pods["coredns-74ff55c5b-cpfqs"]
    assert (coredns.namespace, coredns.qos_class, coredns.priority, coredns.priority_class) == (
        "kube-system", "Burstable", 2_000_000_000, "system-cluster-critical")
    assert coredns.owner is not None and (coredns.owner.kind, coredns.owner.name) == ("ReplicaSet", "coredns-74ff55c5b")
    assert coredns.cpu_request == pytest.approx(0.1) and coredns.memory_request == 70 * 2**20
    assert (coredns.node, coredns.phase, coredns.containers) == ("kind-control-plane", "Pending", ("coredns",))
    scheduled = coredns.condition("PodScheduled")
    assert scheduled is not None and scheduled.status == "False"
    etcd = pods["etcd-kind-control-plane"]
    ready = etcd.condition("Ready")
    assert ready is not None and ready.status == "True" and ready.last_transition is not None
    assert not coredns.gpu_request.any


def test_nodes_from_the_corpus():
    snapshot = kubernetes_parse(body=(DATA / "sonobuoy-kind_nodes.json").read_bytes())
    assert next(n.name for n in snapshot.nodes) == "kind-control-plane"
    first = snapshot.nodes[0]
    assert first.allocatable_cpu == 8 and first.allocatable_memory > 2**30 and first.allocatable_gpus == 0


@pytest.mark.parametrize(
    ("name", "qos"), [("k9s_render_p1.json", "Guaranteed"), ("k9s_render_po_sidecar.json", "Burstable")]
)
def test_single_pod_objects_from_the_corpus(name, qos):
    (only,) = kubernetes_parse(body=(DATA / name).read_bytes()).pods
    assert only.qos_class == qos


def test_sonobuoy_namespace_pods_parse():
    snapshot = kubernetes_parse(body=(DATA / "sonobuoy-kind_sonobuoy_pods.json").read_bytes())
    assert {p.qos_class for p in snapshot.pods} == {"BestEffort"}


def test_a_list_of_all_four_kinds_with_gpu_requests_and_sharing():
    body = listing(
        pod("trainer-0", node="n1", gpus=4, priority=1000, priority_class="batch",
            owner=("PyTorchJob", "llama-ft"), qos=None),
        pod("shared", node="n1", gpus=None, extra_resources={"nvidia.com/gpu.shared": 1}, qos="Burstable"),
        pod("mig", node="n1", gpus=None, extra_resources={"nvidia.com/mig-3g.40gb": 2}),
        pod("frac", node="n1", gpus=None, annotations={"gpu-fraction": "0.5"}),
        pod("hami", node="n1", gpus=1, extra_resources={"nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "30"}),
        pod("aliyun", node="n1", gpus=None, extra_resources={"aliyun.com/gpu-mem": "8"}),
        node("n1"),
        event("Preempted", name="trainer-0", message="Preempted by ml/server-0 on node n1"),
        {"kind": "PriorityClass", "apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": "batch"},
         "value": 1000, "preemptionPolicy": "Never"},
        {"kind": "Deployment", "metadata": {"name": "x"}},
    )
    snapshot = kubernetes_parse(body=body)
    pods = {p.name: p for p in snapshot.pods}
    trainer = pods["trainer-0"]
    assert trainer.gpu_request.whole == 4 and trainer.gpu_request.gpus == 4
    assert trainer.qos_class == "Guaranteed"  # derived: requests equal limits
    assert pods["shared"].gpu_request.shared == 1 and pods["shared"].gpu_request.gpus == 0
    assert pods["mig"].gpu_request.gpus == pytest.approx(6 / 7)
    assert pods["frac"].gpu_request.fraction == 0.5 and pods["frac"].gpu_request.gpus == 0.5
    assert pods["hami"].gpu_request.gpus == pytest.approx(1.3) and pods["hami"].gpu_request.memory_mib == 20000
    assert pods["aliyun"].gpu_request.memory_mib == 8 * 1024 and pods["aliyun"].gpu_request.any
    (n1,) = snapshot.nodes
    assert (n1.allocatable_gpus, n1.gpu_product, n1.gpu_memory_mib) == (8, "NVIDIA-H100-80GB-HBM3", 81559)
    (preempted,) = snapshot.events
    assert (preempted.reason, preempted.object_name, preempted.count) == ("Preempted", "trainer-0", 1)
    assert preempted.first_seen == datetime(2026, 11, 30, 10, 5, tzinfo=UTC)
    (batch,) = snapshot.priority_classes
    assert (batch.value, batch.preemption_policy) == (1000, "Never")
    assert snapshot.ignored == {"Deployment": 1}


def test_typed_lists_give_their_items_a_kind():
    items = [pod("a"), pod("b")]
    for item in items:
        del item["kind"]
    snapshot = kubernetes_parse(body=orjson.dumps({"kind": "PodList", "items": items}))
    assert [p.name for p in snapshot.pods] == ["a", "b"]


def test_events_k8s_io_shape_is_read():
    body = orjson.dumps({"kind": "Event", "apiVersion": "events.k8s.io/v1",
                         "metadata": {"name": "e", "namespace": "ml"}, "reason": "FailedScheduling",
                         "note": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                         "regarding": {"kind": "Pod", "name": "p", "namespace": "ml"},
                         "eventTime": "2026-11-30T10:00:00.000000Z", "series": {"count": 4}})
    (item,) = kubernetes_parse(body=body).events
    assert (item.object_name, item.count, item.reason) == ("p", 4, "FailedScheduling")
    assert "Insufficient" in item.message and item.last_seen is not None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (listing(pod("bad", cpu="lots")), "Pod ml/bad container main: bad quantity 'lots' for cpu"),
        (listing(node("gpu-1", gpus="eight")), "Node gpu-1"),  # type: ignore[arg-type]
        (listing(pod("t", created="yesterday")), "Pod ml/t: bad time"),
        (listing(pod("f", annotations={"gpu-fraction": "1.5"})), "gpu-fraction"),
        (orjson.dumps({"kind": "PriorityClass", "metadata": {"name": "p"}}), "PriorityClass p"),
        (b"{", "not JSON"),
        (b"[]", "JSON object"),
        (b"{}", "no kind"),
        (orjson.dumps({"kind": "List", "items": [{"metadata": {}}]}), "has no kind"),
        (orjson.dumps({"kind": "Pod", "metadata": {"name": 5}}), "expected a string"),
    ],
)
def test_unusable_objects_are_named(body, message):
    with pytest.raises(KubernetesError, match=message.replace("(", r"\(")):
        kubernetes_parse(body=body)


def test_arbitrary_json_raises_only_the_parser_error():
    rng = random.Random(7)
    base = orjson.loads(listing(pod("a", node="n", gpus=1, owner=("Job", "j")), node("n"), event("Evicted", name="a")))
    values = [None, 1, -1, 1.5, "", "x", "500m", [], {}, True, "2026-01-01T00:00:00Z", [{}], {"a": 1}]

    def mutate(value, depth=0):
        if isinstance(value, dict):
            return {k: (rng.choice(values) if rng.random() < 0.08 else mutate(v, depth + 1)) for k, v in value.items()}
        if isinstance(value, list):
            return [mutate(v, depth + 1) for v in value]
        return value

    for _ in range(400):
        with contextlib.suppress(ParserError):
            kubernetes_parse(body=orjson.dumps(mutate(base)))


def test_history_diff_created_phase_node_deleted():
    before = kubernetes_parse(body=listing(pod("a", phase="Pending"), pod("b", node="n1"), pod("c", node="n1"))).pods
    after = kubernetes_parse(body=listing(pod("a", node="n2", phase="Running"), pod("b", node="n1"),
                                          pod("d", created="2026-11-30T11:00:00Z"))).pods
    at = datetime(2026, 11, 30, 12, tzinfo=UTC)
    changes = [(c.name, c.change, c.before, c.after) for c in pod_history_diff(before=before, after=after, at=at)]
    assert changes == [
        ("a", "node", "", "n2"), ("a", "phase", "Pending", "Running"),
        ("c", "deleted", "Running", ""), ("d", "created", "", "Running"),
    ]
    created = pod_history_diff(before=before, after=after, at=at)[-1]
    assert created.at == datetime(2026, 11, 30, 11, tzinfo=UTC)
