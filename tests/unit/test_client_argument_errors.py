"""Wrong arguments to the Python clients are one clear error at the call, typed, before
anything is queued or sent (nothing here reaches a server: the bootstrap address is
closed). Found by probing the API as a Kafka user would (2026-11-24)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from memq import Consumer, Producer
from memq.errors import ClientClosedError, ConfigError, MemqError

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}


@pytest.fixture
def producer() -> Any:
    p = Producer(NOWHERE)
    yield p
    p.close(1)


PRODUCE_CASES: list[tuple[Callable[[Any], object], type[Exception], str]] = [
    # an out-of-range timestamp failed its whole block (every good record in it) at encode
    (lambda p: p.produce("t", b"x", timestamp=2**64), ConfigError, "does not fit an int64"),
    (lambda p: p.produce("t", b"x", timestamp=2**63), ConfigError, "does not fit an int64"),
    (lambda p: p.produce("t", b"x", timestamp="abc"), TypeError, "must be an int"),
    # time.time() (seconds, a float) was truncated to milliseconds of January 1970
    (lambda p: p.produce("t", b"x", timestamp=1795579721.5), TypeError, "not float"),
    (lambda p: p.produce_batch("t", [b"x"], timestamp=1.0), TypeError, "not float"),
    (lambda p: p.produce_batch(["t"], [b"x"]), TypeError, "topic must be a str, not list"),
    (lambda p: p.produce_batch("t", [b"x"], timestamp=-(2**63) - 1), ConfigError, "int64"),
    (lambda p: p.produce("t", b"x", headers="abc"), TypeError, r"\(name, value\) pairs"),
    (lambda p: p.produce("t", b"x", headers=["a"]), TypeError, r"\(name, value\) pairs"),
    (lambda p: p.produce(None, b"x"), TypeError, "topic must be a str"),
    # a bad topic name failed only at result(), as the broker's InvalidRequestError
    (lambda p: p.produce("", b"x"), ConfigError, "invalid topic name ''"),
    (lambda p: p.produce("bad topic/\u540d", b"x"), ConfigError, "invalid topic name"),
    (lambda p: p.produce_batch("a b", [b"x"]), ConfigError, "invalid topic name 'a b'"),
    # a str was taken as its characters: three records b"a", b"b", b"c"
    (lambda p: p.produce_batch("t", "abc"), TypeError, "values must be a list of bytes"),
    (lambda p: p.produce_batch("t", b"abc"), TypeError, "values must be a list of bytes"),
    (lambda p: p.produce_batch("t", None), TypeError, "values must be a list of bytes"),
    # a non-callable callback was taken; it failed on the I/O thread after the send, logged
    (lambda p: p.produce("t", b"x", on_delivery="cb"), TypeError, "must be a callable"),
    # flush(-1) (Kafka's "no limit") returned at once with everything still pending
    (lambda p: p.flush(-1), ConfigError, "None to wait without limit"),
    (lambda p: p.flush("5"), ConfigError, "timeout must be seconds"),
]


@pytest.mark.parametrize(("call", "kind", "says"), PRODUCE_CASES)
def test_producer_argument_errors(
    producer: Any, call: Callable[[Any], object], kind: type[Exception], says: str
) -> None:
    with pytest.raises(kind, match=says):
        call(producer)
    assert len(producer) == 0  # nothing was queued


def test_a_negative_wait_for_a_future_is_a_config_error(producer: Any) -> None:
    fut = producer.produce("t", b"x")  # (it said "not delivered within -1 s")
    with pytest.raises(ConfigError, match="None to wait without limit"):
        fut.result(-1)
    with pytest.raises(ConfigError, match="None to wait without limit"):
        producer.produce_batch("t", [b"x"]).exception(-1)


def test_timestamps_that_fit_are_taken() -> None:
    p = Producer({**NOWHERE, "linger.ms": 60_000})
    try:
        for ts in (0, -(2**63), 2**63 - 1, 1_700_000_000_000):
            p.produce("t", b"x", timestamp=ts)
        assert len(p) == 4
    finally:
        p.close(0.1)  # (nothing can be delivered: they fail at close, as documented)


CONSUMER_CASES: list[tuple[Callable[[Any], object], type[Exception], str]] = [
    (lambda c: c.consume(0, 0.1), ConfigError, "num_messages >= 1"),  # returned []
    (lambda c: c.consume(-1, 0.1), ConfigError, "num_messages >= 1"),
    (lambda c: c.consume(5, -1), ConfigError, "None to wait without limit"),
    (lambda c: c.consume(5, "1"), ConfigError, "timeout must be seconds"),
    # a group consumer stopped delivering some partitions for good (None) or crashed the
    # process with a non-exception KafkaError (-5)
    (lambda c: c.seek_to_time(None), ConfigError, "epoch milliseconds >= 0"),
    (lambda c: c.seek_to_time(-5), ConfigError, "epoch milliseconds >= 0"),
    (lambda c: c.seek_to_time("abc"), ConfigError, "epoch milliseconds >= 0"),
    # int(time.time()): seconds, which as milliseconds sought to January 1970 (all data)
    (lambda c: c.seek_to_time(1_795_579_721), ConfigError, "looks like epoch seconds"),
    (lambda c: c.offsets_for_times([("t", 0, 1_795_579_721)]), ConfigError, "epoch seconds"),
    (lambda c: c.offsets_for_times([("t", 0, "x")]), ConfigError, "epoch milliseconds"),
    (lambda c: c.subscribe([]), ConfigError, "a topic name or a list"),  # AssertionError
    (lambda c: c.subscribe(None), ConfigError, "a topic name or a list"),
    (lambda c: c.assign("t1"), ConfigError, r"\(topic, partition\)"),  # IndexError
    (lambda c: c.assign([("t1", "x")]), ConfigError, "an int partition"),
    (lambda c: c.seek(5), TypeError, "MessageId"),  # AttributeError
    # confluent's commit(msg): the message was taken as asynchronous=True and everything
    # handed out was committed (records read ahead of it lost on a crash)
    (lambda c: c.commit(object()), TypeError, "positional argument"),
    # confluent's committed([(topic, partition)]): the list was taken as the timeout
    (lambda c: c.committed("t"), ConfigError, r"takes \[\(topic, partition\)\]"),
    (lambda c: c.committed(5.0), ConfigError, r"takes \[\(topic, partition\)\]"),
    (lambda c: c.committed([("t", "x")]), ConfigError, r"takes \[\(topic, partition\)\]"),
    (lambda c: c.committed(timeout=-1), ConfigError, "None to wait without limit"),
    (lambda c: c.assign([("t", 1, 0), ("t", 1, 5)]), ConfigError, "partition 1 of 't' twice"),
    (lambda c: c.seek("0:0:0:0"), MemqError, "before seeking"),  # "several topics"
]


@pytest.mark.parametrize(("call", "kind", "says"), CONSUMER_CASES)
def test_consumer_argument_errors(
    call: Callable[[Any], object], kind: type[Exception], says: str
) -> None:
    c = Consumer({**NOWHERE, "group.id": "g"})
    try:
        with pytest.raises(kind, match=says):
            call(c)
    finally:
        c.close()


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.position(),
        lambda c: c.assignment(),
        lambda c: c.seek_to_end(),
        lambda c: c.seek_to_beginning(),
        lambda c: c.seek_to_time(0),
        lambda c: c.seek("0:0:0:0", "t"),
        lambda c: c.pause([("t", 0)]),
        lambda c: c.resume([("t", 0)]),
        lambda c: c.lag(),
        lambda c: c.committed(),
    ],
)
def test_a_closed_consumer_says_so(call: Callable[[Any], object]) -> None:
    """(these raised confluent-kafka's RuntimeError, or answered as if open)"""
    c = Consumer({**NOWHERE, "group.id": "g"})
    c.close()
    with pytest.raises(ClientClosedError, match="consumer is closed"):
        call(c)


def test_empty_headers_stay_empty_not_none(producer: Any) -> None:
    """headers=[] was stored as no headers (readers saw null, not {})."""
    from memq.producer.producer import _headers

    assert _headers([]) == () and _headers({}) == ()
    producer.produce("t", b"x", headers=[])
    (acc,) = producer._local.blocks.values()
    assert acc.headers[-1] == ()


@pytest.mark.parametrize(
    ("given", "meant"),
    [("smallest", "earliest"), ("beginning", "earliest"), ("largest", "latest"), ("end", "latest"),
     ("Earliest", "earliest")],
)  # fmt: skip
def test_librdkafka_names_of_auto_offset_reset_are_taken(given: str, meant: str) -> None:
    from memq.consumer.config import ConsumerConfig

    cfg = ConsumerConfig.model_validate({"auto.offset.reset": given, "group.id": "g"})
    assert cfg.auto_offset_reset == meant


def test_auto_offset_reset_none_is_refused_naming_what_is_supported() -> None:
    from memq.consumer.config import ConsumerConfig

    with pytest.raises(ValueError, match="earliest"):
        ConsumerConfig.model_validate({"auto.offset.reset": "none", "group.id": "g"})


def test_confluent_kafka_habits_on_produce(producer: Any) -> None:
    """Code written for confluent-kafka: callback= works as on_delivery=, poll() is
    harmless, a partition or a tombstone is a one-line error saying why."""
    seen: list[Any] = []
    fut = producer.produce("t", b"v", callback=lambda err, md: seen.append(err))
    assert fut is not None and producer.poll(0) == 0 and producer.poll() == 0
    with pytest.raises(ConfigError, match="not partitioned"):
        producer.produce("t", b"v", partition=3)
    with pytest.raises(TypeError, match="no tombstones"):
        producer.produce("t", None)
    with pytest.raises(TypeError, match="not both"):
        producer.produce("t", b"v", on_delivery=print, callback=print)
