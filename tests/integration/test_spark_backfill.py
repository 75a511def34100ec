"""The backfill job and ``memq backfill`` against the real local stack."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import typer
from typer.testing import CliRunner

from memq.cli.backfill import backfill
from memq.devstack import StackState
from memq.errors import ConfigError
from memq.formats import Compression
from memq.formats.keys import hour_of
from memq.spark.backfill import run_backfill
from memq.spark.errors import BackfillError
from tests.integration.spark_fixtures import (  # noqa: F401 - fixtures
    HOUR_MS,
    T0,
    TopicWriter,
    expected_row,
    spark_session_fixture,
)
from tests.integration.test_spark_datasource import write_shared_block


def _fill(w: TopicWriter, hours: int = 3) -> None:
    producers = [(7, 0, 0), ((1 << 64) - 2, 3, (1 << 63) + 1), (1 << 40, (1 << 31) + 5, 99)]
    for h in range(hours):
        for j, (pid, epoch, seq) in enumerate(producers):
            created = T0 + h * HOUR_MS + (j + 1) * 5 * 60_000
            # Records stamped up to 10 minutes before the seal: some cross into the hour
            # before, so output hours differ from key hours.
            blocks = [w.records(30, created - 600_000, 590_000) for _ in range(j + 1)]
            w.write(
                created,
                blocks,
                producer_id=pid,
                epoch=epoch,
                first_sequence=seq,
                compression=list(Compression)[(h + j) % 4],
            )


def test_backfill_to_parquet_writes_exactly_the_records(
    spark_session: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    w = TopicWriter(memq_stack.s3_endpoint, s3_bucket, unique_name("t"))
    _fill(w)
    out = tmp_path / "parquet"
    seen: list[tuple[int, int]] = []
    result = run_backfill(
        spark_session, w.options(), str(out), progress=lambda d, t: seen.append((d, t))
    )
    assert (result.objects, result.records) == (len(w.stored), len(w.rows))
    assert result.bytes == sum(s.size for s in w.stored)
    assert seen and seen[-1] == (1, 1)

    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    # Standard Parquet timestamps (TIMESTAMP_MICROS, UTC), not Spark's legacy INT96.
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    table = table.set_column(
        table.schema.get_field_index("timestamp"),
        "timestamp",
        table["timestamp"].cast(pa.int64()),
    )
    got: list[tuple[Any, ...]] = []
    for r in table.to_pylist():
        ms = r["timestamp"] // 1000
        hdrs = None if r["headers"] is None else tuple(sorted(r["headers"]))
        got.append((ms, r["key"], r["value"], hdrs, r["producer_id"], r["epoch"], r["sequence"]))
        # Partitioned by the record's own UTC date and hour.
        assert (str(r["dt"]), f"{int(r['hh']):02d}") == hour_of(ms)
    assert Counter(got) == Counter(w.rows)  # no loss, no duplicates, every field exact
    assert len({(r["dt"], r["hh"]) for r in table.select(["dt", "hh"]).to_pylist()}) >= 4


def _from_json(line: dict[str, Any]) -> tuple[Any, ...]:
    def raw(text: str | None, b64: str | None) -> bytes | None:
        if b64 is not None:
            assert text is None
            return base64.b64decode(b64)
        return None if text is None else text.encode()

    headers = line["headers"]
    if headers is not None:
        b64 = line["headers_b64"] or {}
        headers = tuple(sorted((k, raw(v, b64.get(k))) for k, v in headers.items()))
    ts = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))
    return (
        int(ts.timestamp() * 1000),
        raw(line["key"], line["key_b64"]),
        raw(line["value"], line["value_b64"]),
        headers,
    )


def test_backfill_command_writes_json_lines(
    spark_session: Any,
    memq_stack: StackState,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    # No --bucket/--endpoint-url: the command finds the dev stack through --state-dir.
    w = TopicWriter(memq_stack.s3_endpoint, memq_stack.bucket, unique_name("t"), cluster="dev")
    _fill(w, hours=2)
    app = typer.Typer()
    app.command("backfill")(backfill)
    out = tmp_path / "json"
    args = ["--topic", w.topic, "--cluster", "dev", "--out", str(out), "--format", "json",
            "--from", datetime.fromtimestamp((T0 - HOUR_MS) / 1000, UTC).isoformat(),
            "--state-dir", memq_stack.state_dir]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, (res.output, res.exception)
    assert "records" in res.output and f"{len(w.rows):,}" in res.output and "MB/s" in res.output

    files = sorted(out.glob("dt=*/hh=*/*.json"))
    assert files
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines() if x]
    fields = {"id", "key", "key_b64", "value", "value_b64", "headers", "headers_b64", "timestamp"}
    assert all(set(line) == fields for line in lines)
    assert len({line["id"] for line in lines}) == len(lines) == len(w.rows)
    assert Counter(_from_json(line) for line in lines) == Counter(r[:4] for r in w.rows)
    # Text stays text; bytes that are not UTF-8 go to *_b64 (never both).
    assert any(line["value"] is not None for line in lines)
    assert any(line["value_b64"] is not None for line in lines)
    hdr = next(line for line in lines if line["headers"])
    assert hdr["headers"]["trace"].startswith("t-") and hdr["headers"]["nil"] is None
    assert hdr["headers"]["bin"] is None and hdr["headers_b64"] == {"bin": "wyg="}
    some = lines[0]
    batch = some["id"].split("/")[0]
    assert any(s.key.endswith(batch) for s in w.stored)
    assert some["timestamp"].endswith("Z")

    # An existing output is not overwritten by accident.
    again = CliRunner().invoke(app, args)
    assert again.exit_code != 0 and isinstance(again.exception, ConfigError)
    assert "already exists" in str(again.exception)
    # --overwrite replaces a backfill output, never another directory (a typo'd --out).
    other = tmp_path / "mine"
    (other / "sub").mkdir(parents=True)
    (other / "notes.txt").write_text("keep me")
    at = args.index(str(out)) + 1
    refused = CliRunner().invoke(app, [*args[: at - 1], str(other), *args[at:], "--overwrite"])
    assert isinstance(refused.exception, ConfigError), refused.output
    assert "does not look like a backfill output" in str(refused.exception)
    assert (other / "notes.txt").read_text() == "keep me"
    # A corrupt object fails the job with one line naming it (it was a 259-line JVM and
    # Python traceback), and --overwrite of the earlier output is taken.
    key = w.stored[0].key
    memq_stack.s3_client().put_object(Bucket=memq_stack.bucket, Key=key, Body=b"not a batch")
    failed = CliRunner().invoke(app, [*args, "--overwrite"])
    assert isinstance(failed.exception, BackfillError), (failed.output, failed.exception)
    message = str(failed.exception)
    assert message.startswith("CorruptObjectError: corrupt MemQ batch object s3://")
    assert key in message and "\n" not in message and "--on-corrupt skip" in message


def test_expected_row_maps_unsigned_ids() -> None:
    row = expected_row((1, None, b"v", None), (1 << 64) - 1, (1 << 32) - 1, 1 << 63)
    assert row[4:] == (-1, -1, -(1 << 63))


def test_records_produced_through_the_broker_are_backfilled_exactly(
    spark_session: Any, memq_stack: StackState, s3_bucket: str, tmp_path: Path
) -> None:
    """The whole write path (producer -> broker -> S3) feeding Spark: no loss, no duplicates."""
    from memq import Producer
    from memq.run.broker import BrokerThread
    from memq.testing import broker_config

    cfg = broker_config(
        memq_stack, bucket=s3_bucket, topics=["bf"], batch_bytes=256 * 1024, batch_ms=100
    )
    sent = [
        (
            1_763_776_800_000 + i * 997,
            f"k{i % 7}".encode(),
            b"v-%06d-" % i + bytes(i % 200),
            (("n", str(i).encode()),) if i % 4 == 0 else None,
        )
        for i in range(20_000)
    ]
    with (
        BrokerThread(cfg) as broker,
        Producer(
            {"bootstrap.servers": broker.address, "linger.ms": 5, "batch.size": 64 * 1024}
        ) as p,
    ):
        for ts, k, v, h in sent:
            p.produce("bf", v, key=k, headers=h, timestamp=ts)
        assert p.flush(60) == 0
    options = {
        "bucket": s3_bucket,
        "cluster": "test",
        "topic": "bf",
        "endpoint_url": memq_stack.s3_endpoint,
        "region": "us-east-1",
    }
    out = tmp_path / "from-broker"
    result = run_backfill(spark_session, options, str(out))
    assert result.records == len(sent)
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    got = Counter(
        (
            r["timestamp"] // 1000,
            r["key"],
            r["value"],
            None if r["headers"] is None else tuple(sorted(r["headers"])),
        )
        for r in table.set_column(
            table.schema.get_field_index("timestamp"),
            "timestamp",
            table["timestamp"].cast(pa.int64()),
        ).to_pylist()
    )
    assert got == Counter(sent)


def _parquet_rows(out: Path) -> list[tuple[Any, ...]]:
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    table = table.set_column(
        table.schema.get_field_index("timestamp"),
        "timestamp",
        table["timestamp"].cast(pa.int64()),
    )
    return [
        (r["timestamp"] // 1000, r["key"], r["value"],
         None if r["headers"] is None else tuple(sorted(r["headers"])),
         r["producer_id"], r["epoch"], r["sequence"])
        for r in table.to_pylist()
    ]  # fmt: skip


def test_backfill_dedup_writes_each_record_once_over_the_whole_scan(
    spark_session: Any,
    memq_stack: StackState,
    s3_bucket: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    w = TopicWriter(memq_stack.s3_endpoint, s3_bucket, unique_name("t"))
    copy = write_shared_block(w)
    # One object per task: only the shuffle can meet the two copies.
    options = w.options(target_partition_bytes="1", min_partition_bytes="1")

    plain = run_backfill(spark_session, options, str(tmp_path / "plain"))
    assert Counter(_parquet_rows(tmp_path / "plain")) == Counter(w.rows + copy)
    assert (plain.records, plain.duplicate_records_dropped) == (len(w.rows) + len(copy), 0)

    result = run_backfill(spark_session, options, str(tmp_path / "dedup"), dedup=True)
    assert Counter(_parquet_rows(tmp_path / "dedup")) == Counter(w.rows)
    assert result.stats.partitions_planned == 2
    assert (result.records, result.duplicate_records_dropped) == (len(w.rows), len(copy))
    assert result.stats.records_read == len(w.rows) + len(copy)
    # Nothing in range: the written count still arrives (no wait for metrics that never do).
    later = w.options(start_time=str(T0 + 100 * HOUR_MS))
    empty = run_backfill(spark_session, later, str(tmp_path / "empty"), dedup=True)
    assert (empty.records, empty.duplicate_records_dropped, empty.objects) == (0, 0, 0)

    app = typer.Typer()
    app.command("backfill")(backfill)
    out = tmp_path / "cli"
    args = ["--topic", w.topic, "--out", str(out), "--bucket", s3_bucket,
            "--endpoint-url", memq_stack.s3_endpoint, "--region", "us-east-1",
            "--format", "json", "--dedup"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, (res.output, res.exception)
    assert "duplicates dropped" in res.output and f"{len(copy)} records" in res.output
    lines = [json.loads(x) for f in sorted(out.glob("dt=*/hh=*/*.json"))
             for x in f.read_text().splitlines() if x]  # fmt: skip
    assert Counter(_from_json(line) for line in lines) == Counter(r[:4] for r in w.rows)
