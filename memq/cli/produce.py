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

from memq.cli.options import STATE_DIR

err = Console(stderr=True)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def produce(
    topic: str = typer.Option(..., "--topic", "-t", help="Topic to write to."),
    acks: str = typer.Option("all", help="0, 1 or all."),
    count: int | None = typer.Option(
        None, help="Generate this many records instead of reading stdin."
    ),
    size: int = typer.Option(1024, help="Bytes per generated record."),
    rate: float | None = typer.Option(
        None, help="Records per second (default: as fast as possible)."
    ),
    key: str | None = typer.Option(None, help="Key for every record."),
    bootstrap: str | None = typer.Option(
        None,
        "--bootstrap-servers",
        "-b",
        envvar="MEMQ_BOOTSTRAP",
        help="Brokers host:port,... (default: the local stack).",
    ),
    compression: str = typer.Option("zstd", help="none, gzip, zstd or lz4."),
    linger_ms: float = typer.Option(20, help="Producer linger.ms."),
    batch_size: int = typer.Option(1 << 20, help="Producer batch.size (max block bytes)."),
    timeout: float = typer.Option(120, help="Seconds to wait for outstanding acks at the end."),
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Produce records: `--count N --size BYTES` generates them, otherwise each stdin line is
    one record. Prints a progress bar and a summary (records, MB, records/s, ack latency
    p50/p99, errors); exits 1 if any record failed."""
    from memq.producer import Producer

    if state_dir is not None:
        os.environ["MEMQ_STATE_DIR"] = str(state_dir)
    conf: dict[str, object] = {
        "acks": acks,
        "compression.type": compression,
        "linger.ms": linger_ms,
        "batch.size": batch_size,
        "delivery.timeout.ms": int(timeout * 1000),
    }
    if bootstrap:
        conf["bootstrap.servers"] = bootstrap
    producer = Producer(conf)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()

    def delivered(e: object, md: object) -> None:
        now = time.time() * 1000
        with lock:
            if e is not None:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
            else:
                latencies.append(now - md.timestamp)  # type: ignore[attr-defined]

    payload = os.urandom(size // 2).hex().encode()[:size] if count is not None else b""
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
            producer.produce(topic, value, key=key, on_delivery=delivered)
            sent += 1
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
    t.add_row("errors", ", ".join(f"{k}: {v}" for k, v in errors.items()) or "0")
    if left:
        t.add_row("undelivered", str(left))
    err.print(t)
    if errors or left:
        raise typer.Exit(1)
