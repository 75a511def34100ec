"""``memq produce``: send records from stdin or generate them, with a progress bar."""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memq.cli.options import (
    STATE_DIR,
    StopOnInterrupt,
    acks_value,
    compression_value,
    human_bytes,
    positive,
    topic_name,
)

err = Console(stderr=True)

__all__ = ["field_format", "pairs", "produce", "separator", "usage_config"]


def field_format(value: str | None) -> str | None:
    """``raw`` or ``base64`` (None: not given), else a usage error."""
    from memq.jsonlines import FIELD_FORMATS

    if value is not None and value not in FIELD_FORMATS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(FIELD_FORMATS)}")
    return value


def separator(value: str | None) -> str | None:
    """A key separator: not empty, no line break (lines are records)."""
    if value is not None and (not value or "\n" in value or "\r" in value):
        raise typer.BadParameter(f"{value!r}: use a non-empty text without line breaks")
    return value


def pairs(
    values: list[str], flag: str, *, shape: str = "NAME=VALUE", strip_value: bool = False
) -> list[tuple[str, str]]:
    """``NAME=VALUE`` options (``-X``, ``-H``) as (name, value), in order; a missing ``=``
    or an empty name is a usage error."""
    out: list[tuple[str, str]] = []
    for pair in values:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"{flag} {pair!r}: use {shape}")
        out.append((name.strip(), value.strip() if strip_value else value))
    return out


def env_security(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with ``auth.token``/``ssl.ca.location`` from ``MEMQ_AUTH_TOKEN`` /
    ``MEMQ_SSL_CA_LOCATION`` when ``-X`` does not set them, as the admin commands read
    them (a token given with ``-X`` is in the process list for every local user)."""
    for key, var in (
        ("auth.token", "MEMQ_AUTH_TOKEN"),
        ("ssl.ca.location", "MEMQ_SSL_CA_LOCATION"),
    ):
        if key not in conf and os.environ.get(var):
            conf[key] = os.environ[var]
    return conf


def usage_config(model: Any, conf: dict[str, Any]) -> Any:
    """``model.from_mapping(conf)``, its :class:`ConfigError` (a typo'd ``-X`` key, a bad
    value) as a one-line usage error."""
    from memq.errors import ConfigError

    try:
        return model.from_mapping(conf)
    except ConfigError as e:
        text = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
        raise typer.BadParameter(
            text.replace(":;", ":"), param_hint="'-X' / '--property'"
        ) from None


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


MiB = 1 << 20
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
    key: str | None = typer.Option(None, help="Key for every record (see --key-format)."),
    key_separator: str | None = typer.Option(
        None,
        "--key-separator",
        "-K",
        callback=separator,
        help="Each stdin line is KEY<SEP>VALUE: the text before the first SEP is the key "
        "(a line without SEP, or with an empty key, has no key).",
    ),
    key_format: str | None = typer.Option(
        None,
        "--key-format",
        callback=field_format,
        show_default="raw",
        help="raw or base64: how --key and the keys of --key-separator are written.",
    ),
    value_format: str = typer.Option(
        "raw",
        "--value-format",
        callback=field_format,
        help="raw (each stdin line is a value) or base64 (each line is base64-decoded).",
    ),
    headers: list[str] = typer.Option(
        [], "--header", "-H", help="Header NAME=VALUE on every record (repeatable)."
    ),
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
        show_default="the topic's max_block_bytes; for a topic not created yet, a topic's "
        "default (batch.bytes, 8 MiB)",
        help="Producer batch.size: the size of blocks (a larger record goes in a block of "
        "its own; the largest record is the topic's max_block_bytes, less 80 bytes).",
    ),
    timeout: float = typer.Option(
        120, min=1, help="Seconds to wait for outstanding acks at the end."
    ),
    props: list[str] = typer.Option(
        [],
        "--property",
        "-X",
        help="Producer setting KEY=VALUE (Kafka names, e.g. -X linger.ms=5 -X "
        "ssl.ca.location=ca.pem -X auth.token=...; repeatable). Overrides the options above.",
    ),
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Produce records: `--count N --size BYTES` generates them, otherwise each stdin line is
    one record (kcat-like: --key-separator splits a key off each line, --value-format
    base64 decodes each line, -H adds headers). Prints a progress bar and a summary
    (records, MB, records/s, ack latency p50/p99, where the records went, errors with the
    first one's message); exits 1 if any record failed (a line too large for the topic, or
    not base64, is reported and skipped; the others are sent)."""
    from memq.config import BatchConfig
    from memq.errors import MemqError
    from memq.jsonlines import decode_field, split_line
    from memq.producer import Producer, ProducerConfig

    if key is not None and key_separator is not None:
        raise typer.BadParameter(
            "--key and --key-separator: give one (a key for every record, or one per line)"
        )
    if count is not None and (key_separator is not None or value_format != "raw"):
        raise typer.BadParameter(
            "--key-separator and --value-format read stdin lines: not with --count"
        )
    if key_format is not None and key is None and key_separator is None:
        raise typer.BadParameter("--key-format applies to --key or --key-separator")
    try:
        fixed_key = None if key is None else decode_field(key.encode(), key_format or "raw", "key")
    except MemqError as e:
        raise typer.BadParameter(str(e), param_hint="'--key'") from None
    record_headers = [(n, v.encode()) for n, v in pairs(headers, "-H")] or None
    if state_dir is not None:
        os.environ["MEMQ_STATE_DIR"] = str(state_dir)
    conf: dict[str, Any] = {
        "acks": acks,
        "compression.type": compression,
        "linger.ms": linger_ms,
        "delivery.timeout.ms": int(timeout * 1000),
    }
    if batch_size is not None:
        conf["batch.size"] = batch_size
    if bootstrap:
        conf["bootstrap.servers"] = bootstrap
    conf.update(pairs(props, "-X", shape="KEY=VALUE", strip_value=True))
    cfg = usage_config(
        ProducerConfig, env_security(conf)
    )  # nothing is reached before the options are good
    limit = _topic_limit(topic, cfg)  # fails at once when no broker answers
    # A topic created by this first write gets the topic defaults: blocks up to batch.bytes
    # (the producer caps them by the topic's max_block_bytes once its metadata is known).
    conf.setdefault("batch.size", min(limit or BatchConfig().max_bytes, MAX_BATCH_SIZE))
    acks = str(conf["acks"])
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
        err.print(f"[bold red]error:[/bold red] {escape(first[0])}", highlight=False)

    acked = [0]  # records delivered (as acks= says), of those read

    def delivered(e: object, md: object) -> None:
        if e is not None:
            assert isinstance(e, BaseException)
            failed(e)
            return
        now = time.time() * 1000
        with lock:
            acked[0] += 1
            latencies.append(now - md.timestamp)  # type: ignore[attr-defined]
            if not stored and md.key:  # type: ignore[attr-defined]
                stored.append(f"s3://{md.bucket}/{md.key}")  # type: ignore[attr-defined]

    rng = random.Random()
    half = size // 2 + 1

    def payload() -> bytes:  # each record its own random text (one repeated value
        return rng.randbytes(half).hex().encode()[:size]  # compressed ~500x: no test)

    sent = nbytes = 0
    left = 0
    forced = False
    stop = StopOnInterrupt(lambda text: err.print(text, highlight=False))
    t0 = time.monotonic()
    with (
        stop,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=err,
            transient=False,
        ) as progress,
    ):
        task = progress.add_task(f"produce {topic}", total=count, rate="")
        sep = key_separator.encode() if key_separator is not None else None
        lines: Iterator[bytes] = (
            (payload() for _ in range(count))
            if count is not None
            else (ln.rstrip(b"\r\n") for ln in sys.stdin.buffer)
        )
        # Ctrl-C stops reading; what was handed to the producer is still flushed (a second
        # Ctrl-C stops that too) and the summary says what was stored.
        while not stop.requested:
            try:
                with stop.interruptible():
                    line = next(lines)
            except (StopIteration, KeyboardInterrupt):
                break
            sent += 1
            try:  # too large for a block, not base64, buffer full: this record only
                if sep is None:  # generated, or a value per line (raw or base64)
                    k, value = fixed_key, decode_field(line, value_format)
                else:
                    fmt = key_format or "raw"
                    k, value = split_line(line, sep, key_format=fmt, value_format=value_format)
                producer.produce(topic, value, key=k, headers=record_headers, on_delivery=delivered)
            except MemqError as e:
                failed(e, f"record {sent:,} ({len(line):,} bytes): ")
                continue
            nbytes += len(value)
            if rate:
                ahead = sent / rate - (time.monotonic() - t0)
                if ahead > 0:
                    try:
                        with stop.interruptible():
                            time.sleep(ahead)
                    except KeyboardInterrupt:
                        break
            if sent % 1000 == 0:
                el = time.monotonic() - t0
                progress.update(task, completed=sent, rate=f"{sent / el:,.0f} rec/s")
        progress.update(task, completed=sent, description=f"flush {topic}")
        try:
            left = producer.flush(timeout)
        except KeyboardInterrupt:
            forced = True
        elapsed = time.monotonic() - t0
        progress.update(
            task,
            completed=sent,
            description=f"done {topic}",
            rate=f"{sent / elapsed:,.0f} rec/s" if elapsed else "",
        )
    # Records still in the producer fail with an error through their callbacks (counted).
    left = max(left, len(producer)) if forced else left
    producer.close(0 if forced else 5)
    t = Table(title=f"memq produce {topic} (acks={acks})", show_header=False)
    t.add_row("records", f"{sent:,}" if acked[0] == sent else f"{acked[0]:,} of {sent:,}")
    t.add_row("bytes", f"{human_bytes(nbytes)} of values")
    t.add_row("time", f"{elapsed:.2f} s")
    t.add_row("throughput", f"{sent / elapsed:,.0f} records/s, {human_bytes(nbytes / elapsed)}/s")
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
    if stop.requested:
        t.add_row(
            "stopped", "by Ctrl-C" + (", before every record was acknowledged" if forced else "")
        )
    err.print(t)
    if stored:
        err.print(f"first object: {stored[0]}", soft_wrap=True, highlight=False)
    if stop.requested:
        raise typer.Exit(StopOnInterrupt.EXIT_INTERRUPTED)
    if errors or left:
        raise typer.Exit(1)


def _topic_limit(topic: str, cfg: Any) -> int | None:
    """The topic's largest block (None: it does not exist yet), asked with the producer's
    brokers and security (``cfg``: a ProducerConfig); fails at once, naming each broker and
    why, when no broker answers."""
    from memq.client.bootstrap import fetch_metadata, resolve_client
    from memq.errors import ConnectionLostError, MemqError

    sec, endpoints = resolve_client(cfg, cfg.bootstrap_list())
    try:
        meta = fetch_metadata(endpoints.bootstrap, [topic], security=sec.security())
    except ConnectionLostError as e:
        hint = "" if cfg.bootstrap_servers else " (is the local stack up? `memq dev status`)"
        raise MemqError(f"{e}{hint}") from None
    tmeta = meta.topics.get(topic)
    if tmeta is None or tmeta.error or not tmeta.max_block_bytes:
        return None
    return int(tmeta.max_block_bytes)
