"""Prometheus metrics of a broker's cluster membership and of the governor.

Registered in the broker's own registry (the runner passes it), so they appear on the
broker's ``/metrics`` beside its other metrics.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["ClusterMetrics"]


class ClusterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.governor_leader = Gauge(
            "memq_governor_leader", "1 while this broker is the cluster's governor.", registry=r
        )
        self.assignment_version = Gauge(
            "memq_assignment_version", "Version of the assignment this broker follows.", registry=r
        )
        self.shortfall = Gauge(
            "memq_cluster_shortfall_mbps",
            "Expected ingest (MB/s) of a topic the cluster has no capacity to place.",
            ["topic"],
            registry=r,
        )
        self.unplaced = Gauge(
            "memq_cluster_unplaced_writers",
            "Writers a topic needs but no broker can take (capacity or buffer memory).",
            ["topic"],
            registry=r,
        )
        self.zk_registrations = Counter(
            "memq_zk_registrations", "Times this broker registered in ZooKeeper.", registry=r
        )
