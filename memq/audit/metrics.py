"""The auditor's Prometheus metrics: the registry ``/metrics`` serves and its gauges.

The ingest loop counts what it applies; the gauges are set from a summary document (see
:meth:`AuditorMetrics.set_figures`), recomputed by the auditor every
``metrics_interval_s`` over ``metrics_window_s``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["AuditorMetrics"]


class AuditorMetrics:
    """Counters of the ingest loop and per topic/group gauges of the figures."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records = Counter("memq_audit_records", "Audit records applied", ["kind"], registry=r)
        self.rejected = Counter(
            "memq_audit_rejected_records", "Audit records that failed to decode", registry=r
        )
        self.ingest_errors = Counter(
            "memq_audit_ingest_errors", "Failed ingest loop iterations", registry=r
        )
        labels = ["topic", "group"]
        self.missing_blocks = Gauge(
            "memq_audit_missing_blocks", "Blocks acked but not consumed past the grace period",
            labels, registry=r,
        )  # fmt: skip
        self.missing_records = Gauge(
            "memq_audit_missing_records", "Records of the missing blocks", labels, registry=r
        )
        self.pending_records = Gauge(
            "memq_audit_pending_records", "Records acked, not consumed yet, within the grace",
            labels, registry=r,
        )  # fmt: skip
        self.duplicate_blocks = Gauge(
            "memq_audit_duplicate_blocks", "Blocks consumed more than once", labels, registry=r
        )
        self.dropped_duplicate_blocks = Gauge(
            "memq_audit_dropped_duplicate_blocks",
            "Block copies the consumer recognised as already handed out and dropped",
            labels, registry=r,
        )  # fmt: skip
        self.dropped_duplicate_records = Gauge(
            "memq_audit_dropped_duplicate_records", "Records of the dropped block copies",
            labels, registry=r,
        )  # fmt: skip
        self.mismatches = Gauge(
            "memq_audit_mismatched_blocks", "Blocks whose consumer content CRC differs",
            labels, registry=r,
        )  # fmt: skip
        self.consumed_records = Gauge(
            "memq_audit_consumed_records", "Records consumed (metrics window)", labels, registry=r
        )
        self.produced_records = Gauge(
            "memq_audit_produced_records", "Records acked (metrics window)", ["topic"], registry=r
        )
        self.latency_p99 = Gauge(
            "memq_audit_latency_p99_seconds", "End-to-end latency p99 (metrics window)",
            labels, registry=r,
        )  # fmt: skip
        self._group_gauges = (
            self.missing_blocks, self.missing_records, self.pending_records,
            self.duplicate_blocks, self.dropped_duplicate_blocks,
            self.dropped_duplicate_records, self.mismatches, self.consumed_records,
            self.latency_p99,
        )  # fmt: skip
        #: The topics and (topic, group) pairs the gauges hold series of.
        self._topics: set[str] = set()
        self._groups: set[tuple[str, str]] = set()
        self.last_ingest = Gauge(
            "memq_audit_last_ingest_timestamp_seconds", "When the ingest loop last ran",
            registry=r,
        )  # fmt: skip

    def set_figures(self, topics: Iterable[Mapping[str, Any]]) -> None:
        """Set the gauges from the ``topics`` of a summary (``TopicFigures.to_dict()``);
        the series of a topic or group it no longer lists (nothing in the window, or
        the topic deleted) are removed, not left at their last value."""
        seen_topics: set[str] = set()
        seen: set[tuple[str, str]] = set()
        for t in topics:
            seen_topics.add(t["topic"])
            self.produced_records.labels(t["topic"]).set(t["produced_records"])
            for g in t["groups"]:
                lab = (t["topic"], g["group"])
                seen.add(lab)
                self.missing_blocks.labels(*lab).set(g["missing_blocks"])
                self.missing_records.labels(*lab).set(g["missing_records"])
                self.pending_records.labels(*lab).set(g["pending_records"])
                self.duplicate_blocks.labels(*lab).set(g["duplicate_blocks"])
                self.dropped_duplicate_blocks.labels(*lab).set(g["dropped_duplicate_blocks"])
                self.dropped_duplicate_records.labels(*lab).set(g["dropped_duplicate_records"])
                self.mismatches.labels(*lab).set(g["mismatches"])
                self.consumed_records.labels(*lab).set(g["consumed_records"])
                p99 = g["latency_p99_ms"]
                self.latency_p99.labels(*lab).set(p99 / 1000 if p99 is not None else 0)
        for topic in self._topics - seen_topics:
            self.produced_records.remove(topic)
        for lab in self._groups - seen:
            for gauge in self._group_gauges:
                gauge.remove(*lab)
        self._topics, self._groups = seen_topics, seen
