"""``memq produce``: send records from stdin or generate them, with a progress bar."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memq.cli.options import STATE_DIR, acks_value, compression_value, positive, topic_name

err = Console(stderr=True)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


MiB = 1 << 20
#: The producer's default batch.size: used when the topic does not exist yet.
DEFAULT_BATCH_SIZE = MiB
#: The producer's largest batch.size.
MAX_BATCH_SIZE = 256 * MiB


def produce(
    topic: str = typer.Option(..., "--topic", "-t", callback=topic_name, help="Topic to write to."),
    acks: str = typer.Option("all", callback=acks_value, help="0, 1 or all (-1: all)."),
    count: int | None = typer.Option(
        None, min=1, help="Generate this many records instead of reading stdin."
    ),
    size: int = typer.Option(1024, min=0, max=MAX_BATCH_SIZE, help="Bytes per generated record."),
    rate: float | None = typer.Option(
        None, callback=positive, help="Records per second (default: as fast as possible)."
    ),
    key: str | None = typer.Option(None, help="Key for every record."),
    bootstrap: str | None = typer.Option(
        None,
        "--bootstrap-servers",
        "-b",
        envvar="MEMQ_BOOTSTRAP",
        help="Brokers host:port,... (default: the local stack).",
    ),
    compression: str = typer.Option(
        "zstd", callback=compression_value, help="none, gzip, zstd or lz4."
    ),
    linger_ms: float = typer.Option(20, min=0, help="Producer linger.ms."),
    batch_size: int | None = typer.Option(
        None,
        min=1024,
        max=MAX_BATCH_SIZE,
        show_default="the topic's max_block_bytes, 1 MiB for a topic not created yet",
        help="Producer batch.size: the largest block, so the largest record.",
    ),
    timeout: float = typer.Option(
        120, min=1, help="Seconds to wait for outstanding acks at the end."
    ),
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Produce records: `--count N --size BYTES` generates them, otherwise each stdin line is
    one record. Prints a progress bar and a summary (records, MB, records/s, ack latency
    p50/p99, where the records went, errors with the first one's message); exits 1 if any
    record failed (a line too large for the topic is reported and skipped; the others are
    sent)."""
    from memq.errors import MemqError
    from memq.producer import Producer

    if state_dir is not None:
        os.environ["MEMQ_STATE_DIR"] = str(state_dir)
    limit = _topic_limit(topic, bootstrap)
    conf: dict[str, object] = {
        "acks": acks,
        "compression.type": compression,
        "linger.ms": linger_ms,
        "batch.size": batch_size or min(limit or DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE),
        "delivery.timeout.ms": int(timeout * 1000),
    }
    if bootstrap:
        conf["bootstrap.servers"] = bootstrap
    producer = Producer(conf)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    first: list[str] = []  # the first error's message
    stored: list[str] = []  # where the first acknowledged record went (acks=all)
    lock = threading.Lock()

    def failed(e: BaseException, where: str = "") -> None:
        with lock:
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
            if first:
                return
            first.append(f"{where}{type(e).__name__}: {e}")
        err.print(f"[bold red]error:[/bold red] {first[0]}", highlight=False)

    def delivered(e: object, md: object) -> None:
        if e is not None:
            assert isinstance(e, BaseException)
            failed(e)
            return
        now = time.time() * 1000
        with lock:
            latencies.append(now - md.timestamp)  # type: ignore[attr-defined]
            if not stored and md.key:  # type: ignore[attr-defined]
                stored.append(f"s3://{md.bucket}/{md.key}")  # type: ignore[attr-defined]

    payload = os.urandom(size // 2 + 1).hex().encode()[:size] if count is not None else b""
    sent = nbytes = 0
    t0 = time.monotonic()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        task = progress.add_task(f"produce {topic}", total=count, rate="")
        lines = (
            iter(range(count))
            if count is not None
            else (ln.rstrip(b"\r\n") for ln in sys.stdin.buffer)
        )
        for item in lines:
            value = payload if count is not None else item
            assert isinstance(value, bytes)
            sent += 1
            try:
                producer.produce(topic, value, key=key, on_delivery=delivered)
            except MemqError as e:  # too large for a block, buffer full: this record only
                failed(e, f"record {sent:,} ({len(value):,} bytes): ")
                continue
            nbytes += len(value)
            if rate:
                ahead = sent / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            if sent % 1000 == 0:
                el = time.monotonic() - t0
                progress.update(task, completed=sent, rate=f"{sent / el:,.0f} rec/s")
        progress.update(task, completed=sent, description=f"flush {topic}")
        left = producer.flush(timeout)
        progress.update(task, completed=sent, description=f"done {topic}")
    producer.close(5)
    elapsed = time.monotonic() - t0
    t = Table(title=f"memq produce {topic} (acks={acks})", show_header=False)
    t.add_row("records", f"{sent:,}")
    t.add_row("bytes", f"{nbytes / 1e6:,.2f} MB")
    t.add_row("time", f"{elapsed:.2f} s")
    t.add_row("throughput", f"{sent / elapsed:,.0f} records/s, {nbytes / 1e6 / elapsed:,.2f} MB/s")
    if latencies:
        t.add_row(
            "ack latency",
            f"p50 {_percentile(latencies, 0.5):.0f} ms, p99 {_percentile(latencies, 0.99):.0f} ms",
        )
    if stored:
        bucket, _, key = stored[0].removeprefix("s3://").partition("/")
        parts = key.split("/")
        where = "/".join(["<hash>", *parts[1:4]]) if len(parts) > 4 else key
        t.add_row("stored in", f"s3://{bucket}/{where}/")
    t.add_row("errors", ", ".join(f"{k}: {v}" for k, v in errors.items()) or "0")
    if first:
        t.add_row("first error", first[0])
    if left:
        t.add_row("undelivered", str(left))
    err.print(t)
    if stored:
        err.print(f"first object: {stored[0]}", soft_wrap=True, highlight=False)
    if errors or left:
        raise typer.Exit(1)


def _topic_limit(topic: str, bootstrap: str | None) -> int | None:
    """The topic's largest block (None: it does not exist yet); fails at once, naming
    each broker and why, when no broker answers."""
    from memq.client.bootstrap import fetch_metadata, resolve_client, split_servers
    from memq.config import SecureClientConfig
    from memq.errors import ConnectionLostError, MemqError

    sec, endpoints = resolve_client(SecureClientConfig(), split_servers(bootstrap))
    try:
        meta = fetch_metadata(endpoints.bootstrap, [topic], security=sec.security())
    except ConnectionLostError as e:
        hint = "" if bootstrap else " (is the local stack up? `memq dev status`)"
        raise MemqError(f"{e}{hint}") from None
    tmeta = meta.topics.get(topic)
    if tmeta is None or tmeta.error or not tmeta.max_block_bytes:
        return None
    return int(tmeta.max_block_bytes)
