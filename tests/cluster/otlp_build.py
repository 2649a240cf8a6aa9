"""Builds OTLP metric requests with opentelemetry-proto for the parser tests and bench."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2


def attributes(target: object, values: Mapping[str, object]) -> None:
    for key, value in values.items():
        kv: KeyValue = target.add()  # type: ignore[attr-defined]
        kv.key = key
        if isinstance(value, bool):
            kv.value.bool_value = value
        elif isinstance(value, int):
            kv.value.int_value = value
        elif isinstance(value, float):
            kv.value.double_value = value
        else:
            kv.value.string_value = str(value)


def number_point(
    points: object, *, time_ns: int, value: float | int, labels: Mapping[str, object],
    start_ns: int = 0, flags: int = 0,
) -> metrics_pb2.NumberDataPoint:
    point: metrics_pb2.NumberDataPoint = points.add()  # type: ignore[attr-defined]
    point.time_unix_nano = time_ns
    if start_ns:
        point.start_time_unix_nano = start_ns
    if isinstance(value, int):
        point.as_int = value
    else:
        point.as_double = value
    attributes(point.attributes, labels)
    if flags:
        point.flags = flags
    return point


def request(
    resources: Iterable[tuple[Mapping[str, object], Iterable[metrics_pb2.Metric]]],
) -> ExportMetricsServiceRequest:
    message = ExportMetricsServiceRequest()
    for resource_attributes, metrics in resources:
        resource_metrics = message.resource_metrics.add()
        attributes(resource_metrics.resource.attributes, resource_attributes)
        scope = resource_metrics.scope_metrics.add()
        scope.scope.name = "otelcol/prometheusreceiver"
        for metric in metrics:
            scope.metrics.add().CopyFrom(metric)
    return message


def dcgm_request(
    *, nodes: int, gpus: int, series: int, time_ns: int, cluster: str = "prod",
) -> ExportMetricsServiceRequest:
    """Shaped like a Collector's prometheus receiver scraping dcgm-exporter on each node:
    one resource per node, `series` metrics (every fifth a counter), one point per GPU
    with dcgm-exporter's labels."""
    message = ExportMetricsServiceRequest()
    for node in range(nodes):
        resource_metrics = message.resource_metrics.add()
        attributes(resource_metrics.resource.attributes, {
            "service.name": "dcgm-exporter", "service.instance.id": f"10.0.{node // 250}.{node % 250}:9400",
            "k8s.cluster.name": cluster, "k8s.node.name": f"gpu-node-{node:04d}",
        })
        scope = resource_metrics.scope_metrics.add()
        scope.scope.name = "otelcol/prometheusreceiver"
        for index in range(series):
            metric = scope.metrics.add()
            metric.name = f"DCGM_FI_DEV_FIELD_{index}" if index else "DCGM_FI_DEV_GPU_UTIL"
            if index % 5 == 4:
                metric.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                metric.sum.is_monotonic = True
                points = metric.sum.data_points
            else:
                points = metric.gauge.data_points
            for gpu in range(gpus):
                number_point(
                    points, time_ns=time_ns, start_ns=time_ns - 3_600_000_000_000 if index % 5 == 4 else 0,
                    value=float((node * 7 + gpu * 3 + index) % 100),
                    labels={
                        "gpu": str(gpu), "UUID": f"GPU-{node:05d}-{gpu:02d}-5f2a-4c1e-9b7d",
                        "device": f"nvidia{gpu}", "modelName": "NVIDIA H100 80GB HBM3",
                        "Hostname": f"gpu-node-{node:04d}", "DCGM_FI_DRIVER_VERSION": "550.90.07",
                        "pod": f"trainer-{node:04d}-{gpu}", "namespace": "ml", "container": "main",
                    },
                )
    return message
