"""KafkaNotificationSink.publish never blocks the broker's event loop (issue 14).

When librdkafka's local queue is full (``produce`` raises BufferError) publish returns
at once: the notification waits in the sink's bounded backlog and the poll thread
enqueues it, in order, once deliveries make room; when the backlog is full publish
fails fast with NotificationError. The Kafka producer is a stub (no Kafka).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import confluent_kafka
import pytest

from memq.config import NotificationConfig
from memq.errors import NotificationError
from memq.formats.notification import Notification, decode_notification
from memq.storage_handlers import kafka_sink
from memq.storage_handlers.kafka_sink import KafkaNotificationSink, NotificationAck

T = "memq.c.t.notifications"


class _Msg:
    def __init__(self, topic: str, offset: int) -> None:
        self._topic, self._offset = topic, offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


class _Producer:
    """A confluent_kafka.Producer stand-in whose queue is full while ``full`` is set;
    ``poll`` delivers what was enqueued (offsets in enqueue order)."""

    def __init__(self, conf: dict[str, Any], logger: Any = None) -> None:
        self.full = False
        self.lock = threading.Lock()
        self.queued: list[tuple[str, bytes, Any]] = []
        self.delivered: list[bytes] = []
        self.producers: set[str] = set()  # threads that called produce

    def produce(self, topic: str, *, value: bytes, key: bytes | None, on_delivery: Any) -> None:
        with self.lock:
            self.producers.add(threading.current_thread().name)
            if self.full:
                raise BufferError("Local: Queue full")
            self.queued.append((topic, value, on_delivery))

    def poll(self, timeout: float) -> int:
        with self.lock:
            batch, self.queued = self.queued, []
        for topic, value, cb in batch:
            cb(None, _Msg(topic, len(self.delivered)))
            self.delivered.append(value)
        if not batch:
            time.sleep(min(timeout, 0.01))
        return len(batch)

    def flush(self, timeout: float = 0) -> int:
        self.poll(0)
        return 0


def _note(i: int) -> Notification:
    return Notification(
        topic="t",
        cluster="c",
        broker="b0",
        storage="memory",
        bucket="bucket",
        key=f"obj-{i}",
        size=1,
        block_count=1,
        record_count=1,
        min_timestamp=1,
        max_timestamp=1,
        checksum=0,
        batch_id=f"obj-{i}",
        created_at=1,
    )


def _publish_now(sink: KafkaNotificationSink, i: int) -> Any:
    """Publish from another thread; fail unless publish returned within a second."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(sink.publish(T, _note(i))), name="loop")
    start = time.monotonic()
    t.start()
    t.join(5)
    assert not t.is_alive(), "publish blocked while the producer's queue was full"
    assert time.monotonic() - start < 1.0
    return out[0]


def _wait(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_full_producer_queue_backlogs_the_notification_and_fails_fast_beyond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(confluent_kafka, "Producer", _Producer)
    monkeypatch.setattr(kafka_sink, "MAX_BACKLOG", 2)
    sink = KafkaNotificationSink(NotificationConfig(bootstrap_servers="kafka.invalid:9092"))
    producer = sink._producer
    assert isinstance(producer, _Producer)
    try:
        producer.full = True
        first = _publish_now(sink, 1)
        second = _publish_now(sink, 2)
        assert not first.done() and not second.done()  # waiting in the backlog

        third = _publish_now(sink, 3)  # the backlog is full: fails at once
        assert third.done()
        with pytest.raises(NotificationError, match="wait for room"):
            third.result(0)

        producer.full = False  # deliveries made room: the poll thread enqueues them
        assert first.result(5) == NotificationAck(T, 0, 0)
        assert second.result(5) == NotificationAck(T, 0, 1)
        assert [decode_notification(v).key for v in producer.delivered] == ["obj-1", "obj-2"]
        assert producer.producers == {"loop", "notify-poll"}  # enqueued by the poll thread
        _wait(lambda: not sink._backlog)

        fourth = _publish_now(sink, 4)  # room again: straight to the producer
        assert fourth.result(5) == NotificationAck(T, 0, 2)
    finally:
        sink.close(timeout=1)
    assert not sink._poller.is_alive()


def test_a_notification_still_in_the_backlog_fails_at_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(confluent_kafka, "Producer", _Producer)
    sink = KafkaNotificationSink(NotificationConfig(bootstrap_servers="kafka.invalid:9092"))
    sink._producer.full = True
    waiting = _publish_now(sink, 1)
    sink.close(timeout=1)
    assert not sink._poller.is_alive()
    with pytest.raises(NotificationError, match="closed before publishing"):
        waiting.result(1)
