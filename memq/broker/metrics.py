"""Prometheus metrics of one broker (own registry, so several brokers can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["BrokerMetrics"]

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
_SIZES = tuple(float(1 << n) for n in range(14, 31, 2))  # 16 KiB .. 1 GiB


class BrokerMetrics:
    """Every metric the broker exports on ``/metrics`` (names start with ``memq_``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "memq_requests",
            "Requests answered, by type and status.",
            ["type", "status"],
            registry=r,
        )
        self.bytes_in = Counter(
            "memq_received_bytes", "Producer block bytes accepted.", ["topic"], registry=r
        )
        self.blocks = Counter("memq_blocks", "Producer blocks accepted.", ["topic"], registry=r)
        self.records = Counter("memq_records", "Records accepted.", ["topic"], registry=r)
        self.duplicates = Counter(
            "memq_duplicate_blocks",
            "Retried blocks recognised by producer id/epoch/sequence and not stored twice.",
            ["topic"],
            registry=r,
        )
        self.batches = Counter(
            "memq_batches_sealed",
            "Batches sealed, by trigger (size, age, count, memory, keyed, waiting, shutdown, reassign).",
            ["topic", "trigger"],
            registry=r,
        )
        self.batch_bytes = Histogram(
            "memq_batch_bytes",
            "Size of sealed batch objects.",
            ["topic"],
            buckets=_SIZES,
            registry=r,
        )
        self.upload_seconds = Histogram(
            "memq_upload_seconds",
            "Time to store one batch object (retries included).",
            ["topic", "storage"],
            buckets=_LATENCY,
            registry=r,
        )
        self.notify_seconds = Histogram(
            "memq_notification_seconds",
            "Time for Kafka to acknowledge one notification.",
            ["topic"],
            buckets=_LATENCY,
            registry=r,
        )
        self.ack_seconds = Histogram(
            "memq_ack_seconds",
            "Time from receiving a block to acknowledging it, by ack mode.",
            ["topic", "ack"],
            buckets=_LATENCY,
            registry=r,
        )
        self.uploads_in_flight = Gauge(
            "memq_uploads_in_flight", "Batches being stored or notified.", ["topic"], registry=r
        )
        self.buffers_in_use = Gauge(
            "memq_buffers_in_use",
            "Batch buffers the topic holds from the broker's pool (open batch + uploads).",
            ["topic"],
            registry=r,
        )
        self.pool_limit = Gauge(
            "memq_pool_limit_bytes",
            "memory_limit_bytes: the batch buffer pool's bound.",
            registry=r,
        )
        self.pool_allocated = Gauge(
            "memq_pool_allocated_bytes",
            "Memory of every batch buffer alive (held by topics, or free for reuse).",
            registry=r,
        )
        self.pool_held = Gauge(
            "memq_pool_held_bytes", "Memory of the batch buffers topics hold now.", registry=r
        )
        self.errors = Counter(
            "memq_errors",
            "Errors by kind (storage, notification, corrupt, too_large, unknown_topic, "
            "throttled, protocol, not_writer, shutting_down).",
            ["kind"],
            registry=r,
        )
        self.lost_unacked = Counter(
            "memq_ack1_records_lost",
            "Records acknowledged with ack=1 whose batch then failed to store or notify.",
            ["topic"],
            registry=r,
        )
        self.connections = Gauge("memq_connections", "Open client connections.", registry=r)
        self.throttled_waits = Counter(
            "memq_buffer_waits",
            "Writes that had to wait for a batch buffer from the pool.",
            ["topic"],
            registry=r,
        )
        self.storage_retries = Counter(
            "memq_storage_retries", "Storage operations retried.", ["storage"], registry=r
        )
