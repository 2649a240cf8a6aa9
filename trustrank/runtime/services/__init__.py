"""Writes for runtime evidence: fold OTLP export requests into the call graph.

Everything a job writes goes through set-based SQL (INSERT … SELECT FROM unnest: partial
call edge and library rows appended, environments and services upserted; COPY for the
short-lived span index tables), never per-span ORM calls. A job runs in one transaction
(handler atomic=True), so a job that dies half way leaves nothing and runs again from its
stored payload.

One module per aggregate; the public names are re-exported here.
"""

from trustrank.runtime.services.aggregation import span_window, traces_aggregate_store
from trustrank.runtime.services.compaction import call_graph_compact
from trustrank.runtime.services.ingress import (
    IngressChangeDenied,
    declared_of,
    declared_service_ingress_set,
    ingress_mark_holder,
    ingress_override_text,
    service_ingress_set,
)
from trustrank.runtime.services.sweep import traces_sweep

__all__ = [
    "IngressChangeDenied",
    "call_graph_compact",
    "declared_of",
    "declared_service_ingress_set",
    "ingress_mark_holder",
    "ingress_override_text",
    "service_ingress_set",
    "span_window",
    "traces_aggregate_store",
    "traces_sweep",
]
