"""RDMA congestion per traffic class (formula 14).

Input per port and traffic class: counter increases over one interval, as the NIC exposes
them (mlx5 ethtool / RDMA statistics, e.g. `rx_prio<N>_packets`, `rx_prio<N>_discards`,
`np_cnp_sent` / `rp_cnp_handled` for congestion notifications, `rx_ecn_mark` for ECN). Drop
probability = drops / (packets + drops). A class is congested when it saw congestion
notifications (or ECN marks) and its drop probability is above the limit. Drops on a
*metadata* class (control traffic: parameter-server metadata, collectives' handshakes)
are never silent: any drop there is a finding, reported as the retries it causes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trustrank.risk.cluster.findings import Diagnosis, Severity, SubjectKind, evidence
from trustrank.risk.cluster.settings import DEFAULT_THRESHOLDS, ClusterThresholds


@dataclass(frozen=True, slots=True)
class TrafficClassCounters:
    node: str
    port: str  # e.g. mlx5_0/1
    traffic_class: int
    interval_s: float
    packets: float
    drops: float
    cnp: float = 0.0  # congestion notification packets sent or handled
    ecn_marked: float = 0.0
    retransmits: float = 0.0  # transport retries already counted by the NIC, if any


def drop_probability(counters: TrafficClassCounters) -> float:
    total = counters.packets + counters.drops
    return counters.drops / total if total > 0 else 0.0


def rdma_diagnose(
    *, counters: Iterable[TrafficClassCounters],
    thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    found = []
    metadata_classes = set(thresholds.rdma_metadata_traffic_classes)
    for item in counters:
        probability = drop_probability(item)
        subject = f"{item.node}/{item.port}"
        common = evidence(
            traffic_class=item.traffic_class, interval_s=item.interval_s,
            packets=item.packets, drops=item.drops, drop_probability=round(probability, 6),
            cnp=item.cnp, ecn_marked=item.ecn_marked,
            limit=thresholds.rdma_drop_probability,
        )
        if item.traffic_class in metadata_classes and item.drops > 0:
            retries = max(item.drops, item.retransmits)
            found.append(Diagnosis(
                kind="rdma_metadata_retries", subject_kind=SubjectKind.PORT, subject=subject,
                severity=Severity.HIGH if probability > thresholds.rdma_drop_probability
                else Severity.MEDIUM,
                title=(
                    f"{subject} TC{item.traffic_class}: {item.drops:g} metadata packets "
                    f"dropped, at least {retries:g} retries"
                ),
                evidence=(*common, ("retries", retries)),
                discriminator=f"tc{item.traffic_class}",
            ))
            continue
        congested = (item.cnp > 0 or item.ecn_marked > 0)
        if congested and probability > thresholds.rdma_drop_probability:
            found.append(Diagnosis(
                kind="rdma_congestion", subject_kind=SubjectKind.PORT, subject=subject,
                severity=Severity.HIGH if probability >= 0.1 else Severity.MEDIUM,
                title=(
                    f"{subject} TC{item.traffic_class}: congested, drop probability "
                    f"{probability:.1%} with {item.cnp:g} congestion notifications"
                ),
                evidence=common, discriminator=f"tc{item.traffic_class}",
            ))
    return found
