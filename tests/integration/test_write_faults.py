"""Faults on the write path: S3 503s and outages, Kafka outages, broker SIGTERM (real servers)."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from memq import Producer
from memq.devstack import StackState
from memq.devstack.faultproxy import FaultProxy
from memq.devstack.kafka import KafkaService
from memq.devstack.procs import free_port, wait_for
from memq.devstack.services import ServiceState
from memq.errors import NotificationError, RequestTimeoutError, StorageError
from memq.run.broker import BrokerThread
from memq.testing import broker_config
from tests.integration.helpers import read_notifications, read_objects


@pytest.fixture
def s3_proxy(memq_stack: StackState) -> Iterator[FaultProxy]:
    host, port = memq_stack.s3_endpoint.removeprefix("http://").rsplit(":", 1)
    with FaultProxy(host, int(port)) as proxy:
        yield proxy


def _metric(broker: BrokerThread, name: str) -> float:
    assert broker.server is not None
    total = 0.0
    for fam in broker.server.metrics.registry.collect():
        for s in fam.samples:
            if s.name == name:
                total += s.value
    return total


def test_s3_503_burst_is_retried_and_nothing_acked_is_lost(
    memq_stack: StackState, s3_bucket: str, s3_proxy: FaultProxy
) -> None:
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=["t"], s3_endpoint=s3_proxy.url, batch_ms=100
    )
    with (
        BrokerThread(cfg) as broker,
        Producer({"bootstrap.servers": broker.address, "linger.ms": 2}) as p,
    ):
        s3_proxy.set_mode("http_503")
        futs = [p.produce("t", b"r%05d" % i) for i in range(3000)]
        wait_for(
            lambda: True if s3_proxy.counts["http_503"] >= 3 else None,
            timeout=20,
            what="503s served",
        )
        s3_proxy.set_mode("pass")
        assert p.flush(60) == 0
        assert all(f.exception(0) is None for f in futs)
        assert _metric(broker, "memq_storage_retries_total") >= 3
    got = Counter(r[2] for o in read_objects(memq_stack.s3_client(), s3_bucket) for r in o.records)
    assert got == Counter(b"r%05d" % i for i in range(3000))


def test_s3_down_past_deadline_fails_producers_and_broker_keeps_serving(
    memq_stack: StackState, s3_bucket: str, s3_proxy: FaultProxy
) -> None:
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=["t"], s3_endpoint=s3_proxy.url, batch_ms=100
    )
    conf = {"linger.ms": 2, "delivery.timeout.ms": 4000, "request.timeout.ms": 3000}
    with BrokerThread(cfg) as broker, Producer({"bootstrap.servers": broker.address, **conf}) as p:
        s3_proxy.set_mode("refuse")
        values = [b"lost-%d" % i for i in range(200)]
        futs = [p.produce("t", v) for v in values]
        p.flush(30)
        errors = {v: f.exception(0) for v, f in zip(values, futs, strict=True)}
        assert all(isinstance(e, StorageError | RequestTimeoutError) for e in errors.values())
        assert all("not stored" in str(e) for e in errors.values())  # the cause is named
        # Every failure names the storage outage: a STORAGE_ERROR status, or a final attempt
        # that ran out of delivery time with the storage errors listed as earlier causes.
        assert all(
            isinstance(e, StorageError) or "StorageError: " in str(e) for e in errors.values()
        ), errors
        s3_proxy.set_mode("pass")
        ok = p.produce("t", b"after-recovery").result(30)
        assert ok.key is not None
    stored = Counter(
        r[2] for o in read_objects(memq_stack.s3_client(), s3_bucket) for r in o.records
    )
    assert stored[b"after-recovery"] == 1
    for v, e in errors.items():
        # STORAGE_ERROR is definitive: nothing was stored. A timeout is ambiguous (the
        # broker's last upload may land once S3 is back): at most once.
        assert stored[v] == 0 if isinstance(e, StorageError) else stored[v] <= 1, v


@pytest.fixture
def kafka_behind_proxy(tmp_path: Path) -> Iterator[tuple[ServiceState, FaultProxy]]:
    """A dedicated Kafka that advertises a proxy port, so every Kafka connection crosses it."""
    proxy_port = free_port()
    svc = KafkaService(advertised_port=proxy_port)
    state = svc.start(tmp_path)
    proxy = FaultProxy("127.0.0.1", state.port, listen_port=proxy_port).start()
    try:
        yield state, proxy
    finally:
        proxy.stop()
        from memq.devstack.procs import stop

        assert state.process is not None
        stop(state.process)


def test_kafka_outage_fails_acks_then_recovers_without_orphans(
    memq_stack: StackState, s3_bucket: str, kafka_behind_proxy: tuple[ServiceState, FaultProxy]
) -> None:
    _, proxy = kafka_behind_proxy
    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=["k"], kafka_bootstrap=proxy.address, batch_ms=100
    )
    conf = {"linger.ms": 2, "delivery.timeout.ms": 8000, "request.timeout.ms": 7000}
    with BrokerThread(cfg) as broker, Producer({"bootstrap.servers": broker.address, **conf}) as p:
        assert p.produce("k", b"before").result(30).key
        proxy.set_mode("refuse")
        values = [b"during-%d" % i for i in range(50)]
        futs = [p.produce("k", v) for v in values]
        p.flush(60)
        errors = {v: f.exception(0) for v, f in zip(values, futs, strict=True)}
        # The broker answers NOTIFICATION_ERROR once Kafka's delivery timeout (5 s) passes;
        # a retry cut by the producer's own deadline is a timeout that still names that cause.
        assert all(isinstance(e, NotificationError | RequestTimeoutError) for e in errors.values())
        assert all("not acknowledged by Kafka" in str(e) for e in errors.values())
        proxy.set_mode("pass")
        assert p.produce("k", b"after").result(60).key
        assert _metric(broker, "memq_errors_total") >= 1
        notify_topic = cfg.topics[0].notification_topic(cfg.cluster)
    objects = read_objects(memq_stack.s3_client(), s3_bucket)
    stored = Counter(r[2] for o in objects for r in o.records)
    assert stored[b"before"] == 1 and stored[b"after"] == 1
    for v, e in errors.items():
        if isinstance(e, NotificationError):
            # Definitive: every batch that held the record failed and was deleted.
            assert stored[v] == 0, v
        else:
            # A client-side timeout is ambiguous (as in Kafka): the last batch may still
            # have been notified once Kafka came back; never more than once.
            assert stored[v] <= 1, v
    notes = read_notifications(proxy.address, notify_topic, expected=len(objects))
    # Objects whose notification failed were deleted: every object has exactly one pointer.
    assert sorted(n.key for n in notes) == sorted(o.key for o in objects)


def test_sigterm_mid_stream_keeps_every_acked_record(
    memq_stack: StackState, s3_bucket: str, tmp_path: Path
) -> None:
    from memq.devstack.brokers import start_broker

    cfg = broker_config(memq_stack, bucket=s3_bucket, topics=["s"], batch_ms=400)
    info = start_broker(
        tmp_path,
        "sig-broker",
        cfg.model_dump(mode="json", by_alias=True, exclude_none=True),
        memq_stack.aws_env(),
    )
    acked: list[bytes] = []
    failed: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def delivered(err: object, md: object, value: bytes) -> None:
        with lock:
            if err is None:
                acked.append(value)
            else:
                failed.append(err)  # type: ignore[arg-type]

    def run() -> None:
        with Producer(
            {
                "bootstrap.servers": info["endpoint"],
                "linger.ms": 5,
                "delivery.timeout.ms": 5000,
                "request.timeout.ms": 4000,
            }
        ) as p:
            i = 0
            while not stop.is_set():
                v = b"sig-%07d" % i
                p.produce("s", v, on_delivery=lambda e, m, v=v: delivered(e, m, v))
                i += 1
                if i % 500 == 0:
                    time.sleep(0.01)  # pacing, not synchronisation
            p.flush(20)

    t = threading.Thread(target=run)
    t.start()
    try:
        wait_for(lambda: True if len(acked) >= 2000 else None, timeout=60, what="2000 acks")
        import os

        os.kill(info["pid"], signal.SIGTERM)
        from memq.devstack.procs import ProcessRef, is_alive

        ref = ProcessRef(info["pid"], info["start_time"])
        wait_for(lambda: True if not is_alive(ref) else None, timeout=60, what="broker exit")
    finally:
        stop.set()
        t.join(60)
    log = Path(info["log"]).read_text()
    assert "stopped" in log and "Traceback" not in log
    stored = Counter(
        r[2] for o in read_objects(memq_stack.s3_client(), s3_bucket) for r in o.records
    )
    missing = [v for v in acked if stored[v] != 1]
    assert not missing, f"{len(missing)} acked records not in S3 exactly once, e.g. {missing[:3]}"
    assert len(acked) >= 2000
