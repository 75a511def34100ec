"""NotificationSource's flow control over a stub Kafka consumer (issue 14).

The prefetch queue calls :meth:`NotificationSource.pause` on every fill while it is
full; a rebalance inside a poll may assign partitions meanwhile. Those must be paused
by the next ``pause()`` too (they were not when ``pause()`` did nothing once
something was paused), else notifications are fetched while the consumer is paused.
The stub keeps librdkafka's pause state: a partition is paused from ``pause()`` until
``resume()``, also through its revocation and a later assignment (measured with
librdkafka 2.16 and Apache Kafka 4.1, both group protocols: a partition paused, revoked
and assigned back is never fetched unless resumed). No broker.
"""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import TopicPartition

from memq.consumer.notifications import TP, NotificationSource

T = "t.notifications"


class _Kafka:
    """A confluent_kafka.Consumer stand-in: an assignment, librdkafka's paused set, the
    pause/resume calls made, and rebalances run inside the next ``consume``."""

    def __init__(self, config: dict[str, Any], logger: Any = None) -> None:
        self.incremental = (
            "cooperative" in str(config.get("partition.assignment.strategy"))
            or config.get("group.protocol") == "consumer"
        )
        self.assigned: list[TP] = []
        self.paused: set[TP] = set()
        self.calls: list[tuple[str, list[TP]]] = []
        self.callbacks: Any = None
        self.pending: list[TP] | None = None  # the next rebalance's assignment

    @staticmethod
    def _tps(parts: list[Any]) -> list[TP]:
        return [(p.topic, p.partition) for p in parts]

    def subscribe(self, topics: list[str], *, on_assign: Any, on_revoke: Any, on_lost: Any) -> None:
        self.callbacks = (on_assign, on_revoke, on_lost)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.assigned]

    def assign(self, parts: list[Any]) -> None:
        self.assigned = self._tps(parts)  # (pause flags are kept)

    def unassign(self) -> None:
        self.assigned = []

    def incremental_assign(self, parts: list[Any]) -> None:
        added = self._tps(parts)
        self.assigned += [tp for tp in added if tp not in self.assigned]

    def fetched(self) -> set[TP]:
        return set(self.assigned) - self.paused

    def pause(self, parts: list[Any]) -> None:
        self.calls.append(("pause", self._tps(parts)))
        self.paused.update(tp for tp in self._tps(parts) if tp in self.assigned)

    def resume(self, parts: list[Any]) -> None:
        self.calls.append(("resume", self._tps(parts)))
        self.paused.difference_update(self._tps(parts))

    def _rebalance(self, new: list[TP]) -> None:
        on_assign, on_revoke, _ = self.callbacks
        if self.incremental:  # cooperative: only the added and removed partitions move
            gone = [TopicPartition(t, p) for t, p in self.assigned if (t, p) not in new]
            if gone:
                on_revoke(self, gone)
                self.assigned = [tp for tp in self.assigned if tp in new]
            added = [TopicPartition(t, p) for t, p in new if (t, p) not in self.assigned]
            before = list(self.assigned)
            on_assign(self, added)
            if self.assigned == before:  # the callback did not assign: the client does
                self.incremental_assign(added)
            return
        on_revoke(self, self.assignment())  # eager: everything is revoked, then assigned
        self.assigned = []
        parts = [TopicPartition(t, p) for t, p in new]
        on_assign(self, parts)
        if not self.assigned:  # the callback did not assign: the client does
            self.assign(parts)

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        if self.pending is not None:
            new, self.pending = self.pending, None
            self._rebalance(new)
        return []

    def poll(self, timeout: float) -> Any:
        self.consume(1, timeout)  # rebalances run inside a poll, as in librdkafka
        return None

    def close(self) -> None:
        pass


def _source(monkeypatch: pytest.MonkeyPatch, strategy: str) -> tuple[NotificationSource, _Kafka]:
    monkeypatch.setattr(confluent_kafka, "Consumer", _Kafka)
    conf = (
        {"group.protocol": "consumer"}
        if strategy == "consumer"
        else {"partition.assignment.strategy": strategy}
    )
    src = NotificationSource({"group.id": "g", **conf})
    assert isinstance(src.kafka, _Kafka)
    src.subscribe([T], lambda tps: None, lambda tps: None, lambda tps: None)
    return src, src.kafka


#: Eager (classic, range), cooperative (classic) and the consumer group protocol.
STRATEGIES = ["range", "cooperative-sticky", "consumer"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_partitions_assigned_while_paused_are_paused_by_the_next_pause(
    monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    src, kafka = _source(monkeypatch, strategy)
    kafka.pending = [(T, 0)]
    src.poll(10, 0.0)
    src.pause()
    assert kafka.paused == {(T, 0)} and src.paused

    kafka.pending = [(T, 0), (T, 1), (T, 2)]  # a rebalance while paused
    src.poll(1, 0.0)
    src.pause()  # the prefetch queue is still full
    assert set(kafka.assigned) == {(T, 0), (T, 1), (T, 2)}
    assert kafka.paused == set(kafka.assigned)  # nothing assigned is fetched
    if strategy != "range":  # incremental: (T, 0) stayed paused, only the new ones
        assert kafka.calls[-1] == ("pause", [(T, 1), (T, 2)])

    src.resume()
    assert kafka.paused == set() and not src.paused


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_application_paused_partitions_stay_paused_through_flow_control(
    monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    src, kafka = _source(monkeypatch, strategy)
    kafka.pending = [(T, 0), (T, 1)]
    src.poll(10, 0.0)
    src.pause_partitions([(T, 1)])
    assert kafka.paused == {(T, 1)}
    src.pause()
    kafka.pending = [(T, 0), (T, 1), (T, 2)]
    src.poll(1, 0.0)
    src.pause()
    assert kafka.paused == {(T, 0), (T, 1), (T, 2)}
    src.resume()
    held = set() if strategy == "range" else {(T, 1)}  # eager: revoked, so released (Kafka)
    assert kafka.paused == held
    src.resume_partitions([(T, 1)])
    assert kafka.paused == set()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_partition_revoked_while_paused_is_fetched_when_assigned_back(
    monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    src, kafka = _source(monkeypatch, strategy)
    kafka.pending = [(T, 0), (T, 1)]
    src.poll(10, 0.0)
    src.pause()  # the prefetch queue is full...
    kafka.pending = [(T, 1)]  # ...when (T, 0) goes to another member
    src.poll(1, 0.0)
    src.resume()  # the queue drained
    assert kafka.fetched() == {(T, 1)}
    kafka.pending = [(T, 0), (T, 1)]  # (T, 0) comes back
    src.poll(1, 0.0)
    assert kafka.fetched() == {(T, 0), (T, 1)} and not src.paused


def test_partitions_assigned_again_without_a_group_start_unpaused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src, kafka = _source(monkeypatch, "range")
    src.assign_partitions({(T, 0): 0, (T, 1): 0})
    src.pause()
    src.assign_partitions({(T, 0): 5})
    src.resume()
    assert kafka.fetched() == {(T, 0)} and not src.paused
    src.pause()
    src.unassign()
    src.resume()
    src.assign_partitions({(T, 0): 5, (T, 1): 0})
    assert kafka.fetched() == {(T, 0), (T, 1)}
