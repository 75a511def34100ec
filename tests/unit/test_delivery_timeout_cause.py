"""A wait that ends before delivery names the last attempt's error (issue 16, item 7).

The README's first Producer example waited 30 s on ``broker-1:9092`` and was told only
"record not delivered within 30 s"; the sender knew why ("Name or service not known").
No servers: the broker address does not resolve.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memq import Producer
from memq.errors import RequestTimeoutError

UNRESOLVABLE = "nonexistent.invalid:9092"


@pytest.fixture
def producer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Producer:
    monkeypatch.setenv("MEMQ_STATE_DIR", str(tmp_path))  # no local stack profile
    monkeypatch.delenv("MEMQ_BOOTSTRAP", raising=False)
    # A delivery timeout well beyond the caller's wait: the block is still being retried.
    return Producer(
        {"bootstrap.servers": UNRESOLVABLE, "delivery.timeout.ms": 30_000, "linger.ms": 1}
    )


def _wait_for_a_failed_attempt(cause: object, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while getattr(cause, "last_error", None) is None and time.monotonic() < end:
        time.sleep(0.02)


def test_a_record_wait_that_times_out_names_the_last_error(producer: Producer) -> None:
    try:
        fut = producer.produce("t", b"x")
        _wait_for_a_failed_attempt(fut._block)
        with pytest.raises(RequestTimeoutError) as info:
            fut.result(timeout=0.2)
        msg = str(info.value)
        assert isinstance(info.value, TimeoutError)  # `except TimeoutError`, as for Future
        assert msg.startswith("record not delivered within 0.2 s (last error: ")
        assert UNRESOLVABLE in msg
        assert "not known" in msg or "resolve" in msg or "nodename" in msg, msg
    finally:
        producer.close(0)


def test_a_batch_wait_that_times_out_names_the_last_error(producer: Producer) -> None:
    try:
        fut = producer.produce_batch("t", [b"a", b"b"])
        _wait_for_a_failed_attempt(fut._parts[0][0])
        with pytest.raises(RequestTimeoutError) as info:
            fut.result(timeout=0.2)
        msg = str(info.value)
        assert msg.startswith("2 records of 't' not delivered within 0.2 s (last error: ")
        assert UNRESOLVABLE in msg
    finally:
        producer.close(0)
