"""Shared pieces of the Spark tests: one SparkSession per test session, a topic writer.

Import the fixtures into a test module with
``from tests.integration.spark_fixtures import memq_source_fixture, spark_session_fixture``
(they register as ``memq_source`` and ``spark_session``).
Data is written with the real writer path: ``encode_block`` -> ``encode_batch`` ->
``S3Writer.store`` into the stack's moto S3.
"""

from __future__ import annotations

import os
import random
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from memq.devstack import StackState
from memq.formats import Compression, batch_id, encode_batch, encode_block
from memq.formats.block import Record
from memq.storage_handlers.base import StoredObject
from memq.storage_handlers.s3 import S3Config, S3Writer

__all__ = [
    "HOUR_MS",
    "T0",
    "TopicWriter",
    "as_tuples",
    "compare_view",
    "expected_row",
    "memq_source_fixture",
    "plan_now",
    "row_multiset",
    "spark_rows",
    "spark_session_fixture",
]

T0 = 1_763_776_800_000  # 2025-11-22T02:00:00Z, the start of an hour
HOUR_MS = 3_600_000


@pytest.fixture(scope="session", name="spark_session")
def spark_session_fixture(memq_stack: StackState) -> Iterator[Any]:
    """A local[2] SparkSession with ``memq`` registered; AWS_* and PYSPARK_PYTHON set first."""
    os.environ.update({k: v for k, v in memq_stack.aws_env().items() if not os.environ.get(k)})
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("memq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from memq.spark import register

    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session", name="memq_source")
def memq_source_fixture(spark_session: Any) -> Any:
    """The ``memq`` format registered on the session (its counters: ``.stats()``)."""
    from memq.spark import register

    return register(spark_session)


def expected_row(record: Record, producer_id: int, epoch: int, sequence: int) -> tuple[Any, ...]:
    """A record as a comparable tuple, with u64/u32 ids mapped as the source documents."""
    ts, key, value, headers = record
    hdrs = None if headers is None else tuple(sorted(dict(headers).items()))
    signed = producer_id - (1 << 64) if producer_id >= 1 << 63 else producer_id
    ep = epoch - (1 << 32) if epoch >= 1 << 31 else epoch
    seq = sequence - (1 << 64) if sequence >= 1 << 63 else sequence
    return (ts, key, value, hdrs, signed, ep, seq)


def compare_view(df: Any) -> Any:
    """The columns :func:`expected_row` compares, with the timestamp as epoch ms."""
    from pyspark.sql import functions as F  # noqa: N812

    return df.select(
        F.unix_millis("timestamp").alias("ts_ms"),
        "key",
        "value",
        "headers",
        "producer_id",
        "epoch",
        "sequence",
    )


def as_tuples(rows: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Collected rows of :func:`compare_view` as :func:`expected_row` tuples."""
    return [
        (
            r.ts_ms,
            None if r.key is None else bytes(r.key),
            bytes(r.value),
            None
            if r.headers is None
            else tuple(sorted((k, None if v is None else bytes(v)) for k, v in r.headers.items())),
            r.producer_id,
            r.epoch,
            r.sequence,
        )
        for r in rows
    ]


def spark_rows(df: Any) -> list[tuple[Any, ...]]:
    """Collect a ``memq`` DataFrame as tuples in the shape :func:`expected_row` makes."""
    return as_tuples(compare_view(df).collect())


def plan_now(df: Any) -> Any:
    """Plan ``df`` now (the source lists its objects here) as an RDD that keeps this plan.

    A DataFrame re-plans on every action; its RDD is built once, from one plan.
    """
    return df.rdd


def row_multiset(rows: Iterable[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(rows)


@dataclass
class TopicWriter:
    """Writes batch objects for one topic the way a broker does, and remembers them."""

    endpoint: str
    bucket: str
    topic: str
    cluster: str = "default"
    use_hash_prefix: bool = True
    broker: str = "broker-1"
    seed: int = 7
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    stored: list[StoredObject] = field(default_factory=list)
    _seq: int = 0

    def __post_init__(self) -> None:
        cfg = S3Config(
            bucket=self.bucket,
            endpoint_url=self.endpoint,
            region="us-east-1",
            use_hash_prefix=self.use_hash_prefix,
        )
        self.writer = S3Writer(cfg, self.cluster)
        self.rng = random.Random(self.seed)

    def records(self, n: int, ts0: int, spread_ms: int = 1000) -> list[Record]:
        """Varied records: text and binary keys/values, null keys, headers of every kind."""
        out: list[Record] = []
        for i in range(n):
            r = self.rng.random()
            key: bytes | None = (
                None
                if r < 0.2
                else (f"key-{i}".encode() if r < 0.7 else self.rng.randbytes(6) + b"\xff")
            )
            value = (
                f"value {i} \u00e9\u6f22".encode() * self.rng.randint(1, 3)
                if self.rng.random() < 0.7
                else b"\x80\xfe" + self.rng.randbytes(20)
            )
            h = self.rng.random()
            headers: tuple[tuple[str, bytes | None], ...] | None
            if h < 0.3:
                headers = None
            elif h < 0.4:
                headers = ()
            else:
                headers = (("trace", f"t-{i}".encode()), ("bin", b"\xc3\x28"), ("nil", None))
            out.append((ts0 + self.rng.randrange(spread_ms), key, value, headers))
        return out

    def write(
        self,
        created_ms: int,
        blocks: list[list[Record]],
        *,
        producer_id: int = 42,
        epoch: int = 1,
        first_sequence: int = 0,
        compression: Compression = Compression.ZSTD,
        seq: int | None = None,
        remember: bool = True,
    ) -> StoredObject:
        """Store one batch object of ``blocks`` sealed at ``created_ms``."""
        encoded = []
        for j, recs in enumerate(blocks):
            sequence = first_sequence + j
            encoded.append(
                encode_block(
                    recs,
                    producer_id=producer_id,
                    epoch=epoch,
                    sequence=sequence,
                    compression=compression,
                )
            )
            if remember:
                self.rows.extend(expected_row(r, producer_id, epoch, sequence) for r in recs)
        data = encode_batch(encoded)
        if seq is None:
            seq = self._seq
            self._seq += 1
        stored = self.writer.store(
            self.topic, batch_id(created_ms, self.broker, seq), created_ms, data
        )
        self.stored.append(stored)
        return stored

    def options(self, **extra: str) -> dict[str, str]:
        return {
            "bucket": self.bucket,
            "topic": self.topic,
            "cluster": self.cluster,
            "endpoint_url": self.endpoint,
            "region": "us-east-1",
            **extra,
        }
