"""When the Kafka listener seals a batch before batch.ms: no flow (connection, partition)
writing the topic can add to it (each waits for an answer it cannot pipeline past, or its
connection is at Kafka's in-flight limit), or half the producers' window of requests
waits on this batch, or every flow waits and no request came for a moment ("quiet")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import memq.broker.kafka_listener as kl
from memq.broker.kafka_codec import node_id
from memq.broker.kafka_listener import KafkaListener
from memq.config.broker import KafkaListenerConfig


class Proc:
    """What seal_if_stalled reads of a topic processor, recording the seals."""

    def __init__(self, in_flight: int = 0, ring_size: int = 4) -> None:
        self.in_flight = in_flight
        self.config = SimpleNamespace(ring_size=ring_size,
                                      batch=SimpleNamespace(max_bytes=8 << 20))  # fmt: skip
        self.sealed: list[tuple[Any, str]] = []

    def seal_if_open(self, batch: Any, trigger: str) -> None:
        self.sealed.append((batch, trigger))


class FakeBatch:
    """What the listener reads of a batch (weakly referenced, as a real Batch)."""

    def __init__(self, seq: int, builder: Any) -> None:
        self.seq, self.builder = seq, builder


def answered_flows(listener: KafkaListener, topic: str, conn: int, partitions: int) -> list[Any]:
    """Flows of ``conn`` to ``partitions`` partitions that wrote recently, answered since."""
    flows = []
    for p in range(partitions):
        flow = listener.flow_sent(topic, conn, p, waits=True)
        flow.outstanding = 0
        flows.append(flow)
    return flows


class Timers:
    """The listener's quiet timers, run by hand (``fire``) instead of by an event loop."""

    def __init__(self) -> None:
        self.armed: dict[int, tuple[float, Any, tuple[Any, ...]]] = {}
        self._ids = iter(range(1 << 30))

    def call_later(self, delay: float, fn: Any, *args: Any) -> Any:
        n = next(self._ids)
        self.armed[n] = (delay, fn, args)
        return SimpleNamespace(cancel=lambda: self.armed.pop(n, None))

    def fire(self) -> list[float]:
        """Run every armed timer once; the delays they were armed with."""
        due, self.armed = self.armed, {}
        for _delay, fn, args in due.values():
            fn(*args)
        return [d for d, _, _ in due.values()]


@pytest.fixture
def timers() -> Timers:
    return Timers()


@pytest.fixture
def listener(timers: Timers) -> KafkaListener:
    server = SimpleNamespace(config=SimpleNamespace(kafka_listener=KafkaListenerConfig(port=0)),
                             token_secret=None, draining=False)  # fmt: skip
    out = KafkaListener(server)  # type: ignore[arg-type]
    out._call_later = timers.call_later  # type: ignore[method-assign]
    return out


def test_sealed_once_every_partition_waits(listener: KafkaListener) -> None:
    proc, batch = Proc(), object()
    for p in range(3):
        listener.flow_sent("t", 1, p, waits=True)
        listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
        # p=0 alone is every flow so far: sealed; then flow 0 still waits, so 1 and 2 too
    assert proc.sealed == [(batch, "waiting")] * 3


def test_an_answered_flow_may_send_again_so_the_batch_stays_open(listener: KafkaListener) -> None:
    proc = Proc()
    a = listener.flow_sent("t", 1, 0, waits=True)
    listener.flow_sent("t", 1, 1, waits=True)
    a.outstanding -= 1  # answered: its next request may be on the way
    listener.flow_sent("t", 2, 0, waits=True)
    listener.seal_if_stalled("t", proc, object())  # type: ignore[arg-type]
    assert proc.sealed == []


def test_a_flow_that_pipelines_never_seals_early(listener: KafkaListener) -> None:
    proc, batch = Proc(), FakeBatch(seq=1, builder=SimpleNamespace(size=100))
    listener.flow_sent("t", 1, 0, waits=True)
    flow = listener.flow_sent("t", 1, 0, waits=True)  # a second one before the answer
    assert flow.pipelines and flow.outstanding == 2
    listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
    flow.outstanding = 1
    listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
    assert proc.sealed == []  # (not early: only once no request came for a while, "quiet")
    ack1 = listener.flow_sent("u", 1, 0, waits=False)  # acks 0/1: never waits
    assert ack1.pipelines and ack1.outstanding == 0


def test_idle_flows_expire_and_a_full_ring_keeps_the_batch(
    listener: KafkaListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(kl.time, "monotonic", lambda: now[0])
    listener.flow_sent("t", 1, 0, waits=False)  # an acks=1 flow, then silence
    listener.flow_sent("t", 2, 0, waits=True)
    proc = Proc()
    listener.seal_if_stalled("t", proc, "b1")  # type: ignore[arg-type]
    assert proc.sealed == []
    now[0] += kl._FLOW_IDLE_S + 0.1
    listener.seal_if_stalled("t", proc, "b1")  # type: ignore[arg-type]
    assert proc.sealed == [("b1", "waiting")]
    full = Proc(in_flight=3, ring_size=4)  # the last buffer is the open batch's
    listener.seal_if_stalled("t", full, "b2")  # type: ignore[arg-type]
    assert full.sealed == []


def test_a_closed_connection_forgets_its_flows(listener: KafkaListener) -> None:
    listener.flow_sent("t", 1, 0, waits=False)
    listener.flow_sent("t", 2, 0, waits=True)
    listener.forget_flows(1)
    proc = Proc()
    listener.seal_if_stalled("t", proc, "b")  # type: ignore[arg-type]
    assert proc.sealed == [("b", "waiting")]


def test_a_blocked_connection_cannot_add_so_its_answered_flows_do_not_hold_the_batch(
    listener: KafkaListener,
) -> None:
    proc = Proc()
    a = listener.flow_sent("t", 1, 0, waits=True)
    a.outstanding -= 1  # answered: connection 1 may send to partition 0 again...
    listener.flow_sent("t", 1, 1, waits=True)
    listener.flow_sent("t", 2, 0, waits=True)
    listener.seal_if_stalled("t", proc, "b1")  # type: ignore[arg-type]
    assert proc.sealed == []
    listener.connection_blocked(1, True, True)  # ...unless it is at its in-flight limit
    listener.seal_if_stalled("t", proc, "b1")  # type: ignore[arg-type]
    assert proc.sealed == [("b1", "waiting")]
    listener.connection_blocked(1, False, True)  # an answer came: it may send again
    listener.seal_if_stalled("t", proc, "b2")  # type: ignore[arg-type]
    listener.connection_blocked(1, True, True)
    listener.forget_flows(1)  # closed: forgotten, blocked or not
    listener.flow_sent("t", 1, 0, waits=False)  # (a new connection with the same id)
    listener.seal_if_stalled("t", proc, "b3")  # type: ignore[arg-type]
    assert proc.sealed == [("b1", "waiting")]


def test_half_the_window_waiting_seals_so_the_other_half_fills_the_next_batch(
    listener: KafkaListener,
) -> None:
    """An idempotent connection writing 16 partitions has 5 requests in flight at most:
    the batch is sealed once 3 wait on it, and the next one once the last 2 do (the
    connection is then at its limit), so one batch uploads while the next fills."""
    proc = Proc()
    mb = SimpleNamespace(size=1 << 20)  # a batch holding 1 MiB of 8
    b1, b2 = FakeBatch(seq=1, builder=mb), FakeBatch(seq=2, builder=mb)
    flows = answered_flows(listener, "t", 1, 16)
    listener.connection_blocked(1, False, True)
    for p in range(3):
        flows[p].outstanding += 1
        listener.hold("t", 1, b1)  # type: ignore[arg-type]
        listener.seal_if_stalled("t", proc, b1)  # type: ignore[arg-type]
        assert proc.sealed == ([(b1, "waiting")] if p == 2 else [])
    for p in range(3, 5):
        flows[p].outstanding += 1
        listener.hold("t", 1, b2)  # type: ignore[arg-type]
        listener.connection_blocked(1, p == 4, True)
        listener.seal_if_stalled("t", proc, b2)  # type: ignore[arg-type]
    assert proc.sealed == [(b1, "waiting"), (b2, "waiting")]
    # Not idempotent: no in-flight limit, so the window is every flow (16): half is 8.
    other = Proc()
    listener.forget_flows(1)
    others = answered_flows(listener, "u", 2, 16)
    for p in range(8):
        others[p].outstanding = 1
        listener.hold("u", 2, b1)  # type: ignore[arg-type]
        listener.seal_if_stalled("u", other, b1)  # type: ignore[arg-type]
        assert other.sealed == ([(b1, "waiting")] if p == 7 else [])
    # Under 1/8 of batch.bytes, half the window is not enough: the batch waits for more.
    small = Proc()
    b3 = FakeBatch(seq=3, builder=SimpleNamespace(size=(1 << 20) - 1))
    for _ in range(8):  # half the window of 16
        listener.hold("u", 2, b3)  # type: ignore[arg-type]
    listener.seal_if_stalled("u", small, b3)  # type: ignore[arg-type]
    assert small.sealed == []


def test_an_acks_1_flow_keeps_the_batch_open_whatever_waits_on_it(
    listener: KafkaListener,
) -> None:
    """A flow that may send more (acks 0/1, or one that pipelined) could add to the
    batch: neither rule seals it early, however much of the window waits."""
    proc, batch = Proc(), FakeBatch(seq=1, builder=SimpleNamespace(size=4 << 20))
    listener.flow_sent("t", 1, 0, waits=False)  # acks=1: never outstanding
    listener.flow_sent("t", 2, 0, waits=True)
    listener.hold("t", 2, batch)  # type: ignore[arg-type]
    listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
    assert proc.sealed == []


def test_holds_belong_to_one_batch_object_and_a_closed_connection_holds_nothing(
    listener: KafkaListener,
) -> None:
    proc = Proc()
    mb = SimpleNamespace(size=1 << 20)
    answered_flows(listener, "t", 1, 4)
    answered_flows(listener, "t", 2, 1)
    old = FakeBatch(seq=1, builder=mb)
    for _ in range(3):
        listener.hold("t", 1, old)  # type: ignore[arg-type]
    new = FakeBatch(seq=1, builder=mb)  # the same seq: a topic re-created
    listener.hold("t", 2, new)  # type: ignore[arg-type]
    listener.seal_if_stalled("t", proc, new)  # type: ignore[arg-type]
    assert proc.sealed == []  # 1 of a window of 5 waits on it, not 4
    for _ in range(2):
        listener.hold("t", 1, new)  # type: ignore[arg-type]
    listener.forget_flows(1)  # closed: its flows and what it held are gone
    answered_flows(listener, "t", 3, 2)
    listener.seal_if_stalled("t", proc, new)  # type: ignore[arg-type]
    assert proc.sealed == []  # 1 (connection 2) of a window of 3
    listener.hold("t", 3, new)  # type: ignore[arg-type]
    listener.seal_if_stalled("t", proc, new)  # type: ignore[arg-type]
    assert proc.sealed == [(new, "waiting")]


def test_node_ids_are_stable_distinct_and_non_negative() -> None:
    assert node_id("b-1") == node_id("b-1")
    ids = {node_id(f"b-{i}") for i in range(2000)}
    assert len(ids) == 2000 and all(0 <= i < 1 << 31 for i in ids)


def test_a_flow_is_idle_from_its_last_answer_not_its_last_send(
    listener: KafkaListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request answered after a slow upload (longer than the idle time) leaves its flow
    recent: it may send again at once, so the next batch is not sealed on each request
    of the connection's other flows (seen on a slow machine: 4 seals instead of 1)."""
    import memq.broker.kafka_connection as kc

    now = [1000.0]
    monkeypatch.setattr(kl.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(kc.time, "monotonic", lambda: now[0])
    flow = listener.flow_sent("t", 1, 0, waits=True)
    now[0] += kl._FLOW_IDLE_S + 0.5  # (the batch's upload and notification took this long)
    kc._answered(flow, None)
    listener.flow_sent("t", 1, 1, waits=True)
    proc = Proc()
    listener.seal_if_stalled("t", proc, "b")  # type: ignore[arg-type]
    assert proc.sealed == []  # (partition 0's flow, answered just now, may send more)
    now[0] += kl._FLOW_IDLE_S + 0.1
    listener.seal_if_stalled("t", proc, "b")  # type: ignore[arg-type]
    assert proc.sealed == [("b", "waiting")]  # (idle now: every recent flow waits)


def test_a_connection_that_pipelines_seals_once_it_is_at_its_in_flight_limit(
    listener: KafkaListener,
) -> None:
    """Kafka's Java producer (idempotent, its default) pipelines: it sends a partition's
    next request before the last one is answered. With 5 unanswered it can send nothing
    more, so the batch is sealed then ("waiting"), not at batch.ms (it was: the Java
    client's first benchmark ran at 4 MB/s, one ack round per batch.ms)."""
    proc = Proc()
    b0, b1, b2 = (FakeBatch(seq=i, builder=SimpleNamespace(size=64 << 10)) for i in range(3))
    for i in range(5):  # five requests, each with partitions 0-3
        for p in range(4):
            listener.flow_sent("t", 1, p, waits=True)
        listener.connection_blocked(1, i == 4, True)  # the fifth unanswered: at the limit
        listener.seal_if_stalled("t", proc, b0 if i == 0 else b1)  # type: ignore[arg-type]
        # (the first request alone: every flow waits and none pipelined yet)
        assert proc.sealed == [(b0, "waiting")] + ([(b1, "waiting")] if i == 4 else [])
    # Without idempotence there is no limit of 5: it may send more, so the batch waits.
    other = Proc()
    for _ in range(6):
        listener.flow_sent("u", 2, 0, waits=True)
        listener.connection_blocked(2, False, False)
        listener.seal_if_stalled("u", other, b2)  # type: ignore[arg-type]
    assert other.sealed == [(b2, "waiting")]  # (only the first request, alone)


def test_the_first_request_alone_seals_at_once_as_before(listener: KafkaListener) -> None:
    proc = Proc()
    listener.flow_sent("t", 1, 0, waits=True)
    listener.seal_if_stalled("t", proc, "b")  # type: ignore[arg-type]
    assert proc.sealed == [("b", "waiting")]


def test_every_flow_waiting_and_no_request_for_a_moment_seals_the_batch_quiet(
    listener: KafkaListener, timers: Timers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer that pipelines but has nothing more to send (its last records, or a
    low rate), every request waiting for this batch: sealed ("quiet") once no request
    came for _QUIET_S, instead of at batch.ms."""
    now = [1000.0]
    monkeypatch.setattr(kl.time, "monotonic", lambda: now[0])
    proc, batch = Proc(), FakeBatch(seq=1, builder=SimpleNamespace(size=100))
    listener.flow_sent("t", 1, 0, waits=True)
    listener.flow_sent("t", 1, 0, waits=True)  # pipelined: it may send more
    listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
    assert proc.sealed == [] and len(timers.armed) == 1
    now[0] += kl._QUIET_S / 2
    listener.flow_sent("t", 1, 0, waits=True)  # another request: the quiet starts again
    listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
    assert len(timers.armed) == 1  # (re-armed, not a second timer)
    now[0] += kl._QUIET_S
    assert timers.fire() == [kl._QUIET_S]
    assert proc.sealed == [(batch, "quiet")]


def test_the_quiet_timer_seals_nothing_a_producer_may_still_add_to(
    listener: KafkaListener, timers: Timers, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(kl.time, "monotonic", lambda: now[0])
    proc, batch = Proc(), FakeBatch(seq=1, builder=SimpleNamespace(size=100))
    flow = listener.flow_sent("t", 1, 0, waits=True)
    listener.flow_sent("t", 1, 0, waits=True)
    listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
    flow.outstanding = 0  # answered: the producer may send again at once
    listener.flow_sent("t", 2, 0, waits=False)  # (and an acks=1 flow: it never waits)
    now[0] += kl._QUIET_S
    timers.fire()
    assert proc.sealed == [] and timers.armed == {}
    # A request meanwhile that did not arm the timer (an acks=1 one): the quiet is
    # counted from it.
    listener.forget_flows(2)
    flow.outstanding = 1
    listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
    now[0] += kl._QUIET_S / 2
    listener._last_sent["t"] = now[0]
    now[0] += kl._QUIET_S / 2
    assert timers.fire() == [kl._QUIET_S]
    assert proc.sealed == [] and len(timers.armed) == 1  # re-armed for the rest
    now[0] += kl._QUIET_S / 2
    listener.server.draining = True  # type: ignore[misc]  # shutting down: left to the drain
    timers.fire()
    assert proc.sealed == []
    listener.server.draining = False  # type: ignore[misc]
    listener.seal_if_stalled("t", Proc(in_flight=3, ring_size=4), batch)  # type: ignore[arg-type]
    assert timers.armed == {}  # a full ring: nothing sealed early, no timer either


def test_a_flow_that_wrote_with_acks_1_never_looks_quiet(
    listener: KafkaListener, timers: Timers
) -> None:
    """A connection that wrote a partition with acks=1 does not wait for answers: it may
    send more at any time, so its acks=-1 request waits for batch.ms."""
    proc, batch = Proc(), FakeBatch(seq=1, builder=SimpleNamespace(size=100))
    listener.flow_sent("t", 1, 0, waits=False)
    listener.flow_sent("t", 1, 0, waits=True)
    listener.seal_if_stalled("t", proc, batch)  # type: ignore[arg-type]
    assert proc.sealed == [] and timers.armed == {}
