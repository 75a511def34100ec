"""A consumer group that churns while records are produced: members (processes) join,
leave gracefully (SIGTERM: close()) and are killed (SIGKILL), on Apache Kafka, under
both group protocols.

Every acknowledged record must be handed out (exact multisets); a record may be handed
out twice only if a killed member handed it out after its last commit (the partition's
next owner reads it again), never because of a graceful leave or a rebalance.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memq import Producer
from memq.devstack import StackState
from memq.devstack.procs import wait_for
from memq.run.broker import BrokerThread
from memq.testing import broker_config
from tests.integration.group_members import Member, account, spawn, stop_all

PARTITIONS = 8
CHUNKS = 120  # acknowledged one after another (an object each), spread over the churn
CHUNK = 150
#: The session after which a killed member's partitions move: short, so the test is
#: quick; long enough that a live member on a loaded machine keeps its session.
SESSION_MS = 4000


@pytest.fixture
def topic(unique_name: Any) -> str:
    return str(unique_name("churn"))


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str, topic: str) -> Iterator[BrokerThread]:
    # Small objects sealed every 100 ms: hundreds of objects over the 8 partitions.
    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=[topic], batch_bytes=64 * 1024,
                        batch_ms=100, partitions=PARTITIONS)  # fmt: skip
    with BrokerThread(cfg) as b:
        yield b


def group_session(kafka: str, group: str, session_ms: int) -> None:
    """The consumer protocol's session and heartbeat are the broker's: set them for this
    group (a group config, Kafka 4.0 up) instead of the local stack's 10 s default."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [
        ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in (("consumer.session.timeout.ms", session_ms),
                     ("consumer.heartbeat.interval.ms", session_ms // 4))
    ]  # fmt: skip
    admin = AdminClient({"bootstrap.servers": kafka})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


class Production:
    """acks=all production in a thread, chunk after chunk; the acknowledged values."""

    def __init__(self, address: str, topic: str) -> None:
        self.acked: set[bytes] = set()
        self.failed = 0
        self.chunks = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(address, topic), daemon=True)

    def _run(self, address: str, topic: str) -> None:
        try:
            with Producer({"bootstrap.servers": address, "linger.ms": 5}) as p:
                for c in range(CHUNKS):
                    values = [b"churn-%03d-%05d-" % (c, i) + b"x" * 64 for i in range(CHUNK)]
                    futures = [p.produce(topic, v) for v in values]
                    assert p.flush(60) == 0
                    for v, f in zip(values, futures, strict=True):
                        if f.exception(0) is None:
                            self.acked.add(v)
                        else:
                            self.failed += 1
                    self.chunks += 1
        except BaseException as e:
            self.error = e

    def start(self) -> None:
        self._thread.start()

    def done(self) -> bool:
        return not self._thread.is_alive()


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_churning_group_hands_out_every_acked_record_and_repeats_only_a_killed_members(
    memq_stack: StackState,
    broker: BrokerThread,
    topic: str,
    tmp_path: Path,
    unique_name: Any,
    protocol: str,
) -> None:
    t0 = time.monotonic()
    group = unique_name("churn")
    if protocol == "consumer":
        group_session(memq_stack.kafka_bootstrap, group, SESSION_MS)
    members: list[Member] = []

    def join() -> Member:
        n = len(members) + 1
        m = spawn(broker.address, topic, group, tmp_path / f"w{n}.jsonl", protocol=protocol,
                  session_ms=SESSION_MS if protocol == "classic" else None, delay=0.0005)  # fmt: skip
        members.append(m)
        return m

    def live() -> list[Member]:
        return [m for m in members if m.ended is None]

    def handed_out() -> int:
        return sum(len(m.records()) for m in members)

    def settled() -> bool | None:
        """Every partition owned by exactly one live member, and each of them owns some."""
        owned = [m.assignment() for m in live()]
        parts = [p for a in owned for p in a]
        ok = all(owned) and sorted(parts) == list(range(PARTITIONS))
        return True if ok else None

    production = Production(broker.address, topic)

    def caught_up() -> bool:
        return production.done() and not account(members, production.acked).missing

    def progress(more: int, what: str, by: Callable[[], int] = handed_out) -> None:
        """Wait until ``more`` records more were handed out (by ``by``), or everything
        was (production ended and the group caught up)."""
        base = by()
        wait_for(
            lambda: True if by() >= base + more or caught_up() else None,
            timeout=60,
            what=what,
        )

    try:
        for _ in range(4):
            join()
        wait_for(settled, timeout=60, what="4 members split the partitions")
        production.start()
        progress(1500, "the group consuming")
        # Churn: each step waits for the group to hand out more (so the next one hits a
        # group at work), and a kill waits for its victim to be in the middle of it:
        # holding records it handed out and has not committed yet.
        script: list[tuple[str, int]] = [
            ("join", 5), ("join", 6), ("term", 1), ("kill", 2), ("join", 7),
            ("term", 3), ("kill", 4), ("join", 8), ("kill", 5),
        ]  # fmt: skip
        for action, n in script:
            if action == "join":
                join()
            else:
                victim = members[n - 1]
                progress(50, f"w{n} handing out", by=lambda v=victim: len(v.records()))
                if action == "kill":
                    wait_for(
                        lambda v=victim: True if v.not_committed() or caught_up() else None,
                        timeout=60,
                        what=f"w{n} holding uncommitted records",
                    )
                if action == "term":
                    victim.terminate()
                else:
                    victim.kill()
            progress(300, f"the group consuming after {action} w{n}")
        wait_for(lambda: True if production.done() else None, timeout=120, what="production")
        assert production.error is None, production.error
        assert production.chunks == CHUNKS and production.failed == 0
        acked = production.acked
        wait_for(
            lambda: True if not account(members, acked).missing else None,
            timeout=90,
            what="every acknowledged record handed out",
        )
        wait_for(settled, timeout=60, what="the group settled")
        for m in live():
            m.terminate()
        got = account(members, acked)
    finally:
        stop_all(members)
    elapsed = time.monotonic() - t0
    killed = [m for m in members if m.ended == "killed"]
    bound = sum(len(set(m.uncommitted)) for m in killed)
    print(
        f"\n{protocol}: {len(acked)} records acked, {sum(got.delivered.values())} handed out "
        f"by {len(members)} members, {sum(got.duplicates.values())} duplicates "
        f"(bound {bound}: {[len(set(m.uncommitted)) for m in killed]} uncommitted by the "
        f"killed), {elapsed:.1f} s"
    )
    assert not got.missing
    assert set(got.delivered) == acked  # nothing else
    assert len(killed) == 3 and sum(m.ended == "closed" for m in members) == 5
    assert bound > 0, "no member was killed holding uncommitted records: nothing to re-read"
    assert not got.unexplained, sorted(got.unexplained.items())[:5]
    assert sum(got.duplicates.values()) <= bound
