"""``memq consume``, ``memq cat`` and ``memq peek``: read records and inspect batches."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memq.cli.options import (
    BOOTSTRAP,
    STATE_DIR,
    StopOnInterrupt,
    http_url,
    human_bytes,
    parse_time,
    positive,
    time_option,
    topic_name,
    usage_error,
)
from memq.cli.produce import env_security, field_format, pairs, separator, usage_config
from memq.errors import MemqError
from memq.formats.times import ms_to_iso

err = Console(stderr=True, soft_wrap=True)


def _use_state_dir(state_dir: Path | None) -> None:
    if state_dir is not None:
        os.environ["MEMQ_STATE_DIR"] = str(state_dir)


def _optional_name(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


def _message_id(value: str | None) -> str | None:
    if value is not None:
        from memq.consumer.message import MessageId

        with usage_error(MemqError):
            MessageId.parse(value)
    return value


def consume(
    topic: str = typer.Option(..., "--topic", "-t", callback=topic_name, help="Topic to read."),
    group: str | None = typer.Option(
        None,
        "--group",
        "-g",
        callback=_optional_name,
        help="Consumer group (a Kafka group on the notification topic): join it, start at "
        "its committed offsets, commit. Without: read every partition (or --partition) "
        "without a group, from the beginning (-X auto.offset.reset=latest: from the end), "
        "committing nothing.",
    ),
    partition: int | None = typer.Option(
        None,
        "--partition",
        "-p",
        min=0,
        help="Read only this partition, without joining the group (with --group: its "
        "committed offset is where it starts, and progress is committed to it).",
    ),
    offset: int | None = typer.Option(
        None,
        "--offset",
        "-o",
        min=0,
        help="With --partition: start at this notification offset (an object).",
    ),
    from_message_id: str | None = typer.Option(
        None,
        "--from-message-id",
        callback=_message_id,
        help="Start at this record, PARTITION:OFFSET:BLOCK:RECORD (the id of --format "
        "json); reads that partition only.",
    ),
    from_beginning: bool = typer.Option(
        False,
        help="Start at the oldest object of every partition (that retention has not deleted).",
    ),
    from_time: str | None = typer.Option(
        None,
        callback=time_option,
        help="Start at the first record at/after this time (ISO-8601 or epoch ms).",
    ),
    max_records: int | None = typer.Option(
        None, "--max", min=1, help="Stop after this many records."
    ),
    fmt: str = typer.Option(
        "raw", "--format", help="raw (values, one per line) or json (one object per line)."
    ),
    value_format: str | None = typer.Option(
        None,
        "--value-format",
        callback=field_format,
        show_default="raw",
        help="--format raw: each value as is (raw) or base64-encoded (base64), one per line.",
    ),
    key_separator: str | None = typer.Option(
        None,
        "--key-separator",
        "-K",
        callback=separator,
        help="--format raw: print KEY<SEP>VALUE lines (no key: an empty key), what "
        "`memq produce --key-separator` reads.",
    ),
    key_format: str | None = typer.Option(
        None,
        "--key-format",
        callback=field_format,
        show_default="raw",
        help="raw or base64: how --key-separator prints keys.",
    ),
    no_commit: bool = typer.Option(False, "--no-commit", help="Do not commit offsets."),
    timeout: float = typer.Option(
        10.0,
        min=0,
        help="Stop after this many seconds without a record, once joined (0: never).",
    ),
    join_timeout: float = typer.Option(
        120.0, callback=positive, help="Give up if the group assigns no partition in this time."
    ),
    props: list[str] = typer.Option(
        [],
        "--property",
        "-X",
        help="Consumer setting KEY=VALUE, e.g. -X group.protocol=consumer (repeatable). "
        "Against the local stack session.timeout.ms=6000 and "
        "heartbeat.interval.ms=1000 unless set here (group.protocol=classic): a consume "
        "killed there holds up the group's next join for a session.",
    ),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Print records of a topic. raw: each value on its own line (--value-format base64:
    base64-encoded; --key-separator: KEY<SEP>VALUE, as `memq produce` reads them); json:
    one object per line with id (partition:offset:block:record), key, value (UTF-8 text,
    else null with key_b64/value_b64), headers, timestamp. Without --group it reads
    without a consumer group (every partition, or --partition / --from-message-id) and
    commits nothing; with --group it joins the group (or, with --partition, commits to
    it) and commits what it printed, to the record. Progress on stderr (on a terminal:
    "joining group ..." until the group assigns partitions); a summary at the end."""
    from memq import Consumer
    from memq.consumer.config import ConsumerConfig
    from memq.consumer.message import MessageId
    from memq.consumer.offsets import log as offsets_log
    from memq.jsonlines import record_json, record_line

    if fmt not in ("raw", "json"):
        raise typer.BadParameter("--format must be raw or json")
    if fmt == "json" and (value_format or key_separator is not None or key_format):
        raise typer.BadParameter(
            "--value-format, --key-separator and --key-format shape --format raw lines; "
            "json lines carry key, value and headers (binary ones as key_b64, value_b64, "
            "headers_b64)"
        )
    if key_format is not None and key_separator is None:
        raise typer.BadParameter("--key-format applies with --key-separator")
    sep = key_separator.encode() if key_separator is not None else None
    kfmt, vfmt = key_format or "raw", value_format or "raw"
    start_id = MessageId.parse(from_message_id) if from_message_id is not None else None
    if offset is not None and partition is None:
        raise typer.BadParameter("--offset needs --partition (offsets are per partition)")
    if offset is not None and start_id is not None:
        raise typer.BadParameter("use --offset or --from-message-id, not both")
    if start_id is not None and partition is not None and partition != start_id.partition:
        raise typer.BadParameter(
            f"--from-message-id {start_id} is of partition {start_id.partition}, "
            f"not --partition {partition}"
        )
    if from_beginning and from_time is not None:
        raise typer.BadParameter(
            "--from-beginning and --from-time each say where to start: use one"
        )
    if (offset is not None or start_id is not None) and (from_beginning or from_time):
        raise typer.BadParameter(
            "--offset/--from-message-id and --from-beginning/--from-time each say where to "
            "start: use one"
        )
    if start_id is not None:
        partition = start_id.partition
    _use_state_dir(state_dir)
    # Commits are made here, after the printed records were flushed to stdout (a reader
    # that closed the pipe, `| head`, did not get what was written after it left).
    conf: dict[str, Any] = {"auto.offset.reset": "earliest", "enable.auto.commit": False}
    if group is not None:
        conf["group.id"] = group
    if bootstrap:
        conf["bootstrap.servers"] = bootstrap
    conf.update(pairs(props, "-X", shape="KEY=VALUE", strip_value=True))
    usage_config(
        ConsumerConfig, env_security(conf)
    )  # a typo'd -X key: one line, before anything runs
    start_ms = parse_time(from_time) if from_time is not None else None
    # The consumer's warning that this Kafka drops commit metadata is left out (for the
    # periodic commits too): the summary says what it means here.
    offsets_log.addFilter(_not_metadata_dropped)
    c = Consumer(conf)
    joins = group is not None and partition is None  # else: no join, no waiting for one
    if partition is not None:
        try:  # (an offset past the partition's end: InvalidPositionError, one line)
            c.assign([(topic, partition, start_id if start_id is not None else offset)])
        except MemqError:
            c.close()
            raise
    elif group is None:
        c.assign([(topic, p) for p in c.partitions_for(topic)])
    else:
        c.subscribe(topic)
    if from_beginning:
        c.seek_to_beginning()
    elif start_ms is not None:
        c.seek_to_time(start_ms)
    out = sys.stdout
    commits = group is not None and not no_commit
    every = int(conf.get("auto.commit.interval.ms", 5000)) / 1000
    next_commit = time.monotonic() + every
    closed_pipe = aborted = False
    n = nbytes = 0
    #: Records printed per object (partition, offset): what a commit covers, or not.
    printed: dict[tuple[int, int], int] = {}
    t0 = time.monotonic()
    # The idle clock starts once the group assigned partitions (at once without a group).
    last: float | None = None if joins else t0
    tty = err.is_terminal
    joining = (
        err.status(f"joining group {group!r} for topic {topic!r}...") if tty and joins else None
    )
    if joining is not None:
        joining.start()
    # Ctrl-C stops between batches: what was handed out is printed before the commit, so
    # the commit never covers a record that was not printed (a second Ctrl-C: no commit).
    stop = StopOnInterrupt(lambda text: err.print(f"\n{text}", highlight=False))
    try:
        with stop:
            while not stop.requested and (max_records is None or n < max_records):
                want = min(500, max_records - n) if max_records else 500
                batch = c.consume(want, 1.0)
                if joining is not None and (batch or c.assignment()):
                    joining.stop()
                    joining = None
                now = time.monotonic()
                if batch:
                    last = now
                    for m in batch:
                        if fmt == "json":
                            line = record_json(str(m.id), m.key, m.value, m.headers, m.timestamp)
                            out.write(line + "\n")
                        else:
                            key = m.key if sep is not None else None
                            out.buffer.write(
                                record_line(key, m.value, sep, key_format=kfmt, value_format=vfmt)
                            )
                        n += 1
                        nbytes += len(m.value)
                        obj = (m.partition, m.offset)
                        printed[obj] = printed.get(obj, 0) + 1
                    if tty:
                        err.print(f"\r{n:,} records, {n / (now - t0):,.0f}/s", end="")
                else:
                    if last is None and c.assignment():
                        last = now
                    if last is None and now - t0 > join_timeout:
                        raise MemqError(
                            f"group {group!r} assigned no partition of {topic!r} within "
                            f"{join_timeout:.0f} s: is Kafka reachable, is the group stuck?"
                        )
                    if last is not None and timeout and now - last > timeout:
                        break
                # As auto-commit, once printed; idle too, so that a caught-up consumer's
                # group shows its progress while it waits.
                if commits and now >= next_commit:
                    out.flush()
                    with contextlib.suppress(MemqError):  # (the next commit covers it)
                        c.commit(asynchronous=True)
                    next_commit = now + every
            out.flush()
    except KeyboardInterrupt:  # the second Ctrl-C, maybe in the middle of a batch
        aborted = True
    except BrokenPipeError:  # the reader left: stop, keep the offsets, say so on stderr
        closed_pipe = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        if joining is not None:
            joining.stop()
        if closed_pipe and commits:
            committed = (
                "no (the output was closed: the last records printed may not have been "
                "read, so the group's offsets stay at its last commit)"
            )
        elif aborted and commits:
            committed = (
                "no (stopped at once by a second Ctrl-C, maybe in the middle of a batch: "
                "the group's offsets stay at its last commit)"
            )
        else:
            committed = _commit(c, topic, group, no_commit, printed)
        elapsed = time.monotonic() - t0
        stats = c.stats
        c.close()
        offsets_log.removeFilter(_not_metadata_dropped)
    if tty:
        err.print()
    where = f"group {group}" if group is not None else "no group"
    if partition is not None:
        where += f", partition {partition}"
    t = Table(title=f"memq consume {topic} ({where})", show_header=False)
    t.add_row("records", f"{n:,}")
    t.add_row("bytes", f"{human_bytes(nbytes)} of values")
    t.add_row("objects", f"{len(printed):,} read from ({human_bytes(stats.bytes)} fetched)")
    t.add_row("time", f"{elapsed:.1f} s, {n / elapsed if elapsed else 0:,.0f} records/s")
    if stats.skipped_missing or stats.skipped_corrupt or stats.skipped_expired:
        t.add_row(
            "skipped",
            f"{stats.skipped_missing} missing, {stats.skipped_corrupt} corrupt, "
            f"{stats.skipped_expired} expired (past retention)",
        )
    t.add_row("committed", committed)
    err.print(t)
    if closed_pipe:
        raise typer.Exit(141)  # (128 + SIGPIPE, as a shell tool killed by it)
    if stop.requested:
        raise typer.Exit(StopOnInterrupt.EXIT_INTERRUPTED)


def _not_metadata_dropped(record: logging.LogRecord) -> bool:
    from memq.consumer.offsets import METADATA_DROPPED

    return record.msg != METADATA_DROPPED


def _commit(
    c: Any, topic: str, group: str | None, no_commit: bool, printed: dict[tuple[int, int], int]
) -> str:
    """Commit what was printed; say plainly what that covers (the consumer's warning that
    this Kafka drops commit metadata is left out: the summary says what it means here)."""
    if no_commit:
        return "no (--no-commit)"
    if group is None:
        return "no (no --group: nothing to commit to)"
    try:
        offsets = c.commit()
    except MemqError as e:
        return f"failed: {e}"
    # Objects printed in part: the commit is at that object (with its next record's
    # position in the commit metadata, which not every Kafka keeps).
    inside = sum(printed.get((p, o), 0) for (t, p), o in offsets.items() if t == topic)
    if not inside:
        return "yes"
    if c.precise_commits:
        return "yes, to the last record printed"
    return (
        f"up to the last whole object: this Kafka drops commit metadata, so the {inside:,} "
        "records printed of the current object will be read again"
    )


def _reader_for(uri: str, storage: dict[str, Any]) -> tuple[Any, str, str]:
    from memq.storage_handlers.registry import make_reader

    if uri.startswith("s3://"):
        bucket, _, key = uri[5:].partition("/")
        reader = make_reader({"type": "s3", "bucket": bucket}, storage)
        return reader, bucket, key
    path = Path(uri).absolute()
    return make_reader({"type": "filesystem", "root": "/"}), "/", str(path).lstrip("/")


def cat(
    uri: str = typer.Argument(..., help="s3://bucket/key or a local file path."),
    records: int = typer.Option(0, min=0, help="Also print the first N records (json lines)."),
    endpoint_url: str | None = typer.Option(
        None,
        envvar="MEMQ_S3_ENDPOINT",
        help="S3 endpoint (default: AWS, or the local stack's).",
        callback=http_url,
    ),
    region: str | None = typer.Option(None, help="S3 region."),
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Inspect one batch object without consuming anything: header, blocks (offset, size,
    records, producer id/epoch/sequence, timestamps, CRC status); --records N also prints
    the first N records as json lines with ids <batch id>/<block>/<record>, as `memq
    backfill` writes them (`memq peek` lists a topic's objects)."""
    from memq.errors import MemqFormatError
    from memq.formats import decode_batch_header, decode_records, verify_batch_block
    from memq.formats.keys import parse_object_key
    from memq.jsonlines import record_json

    if uri.startswith("s3://") and not uri[5:].partition("/")[2]:
        raise typer.BadParameter(
            f"{uri!r} names a bucket, not an object: use s3://bucket/key (`memq peek` and "
            "`memq produce` print object keys)",
            param_hint="URI",
        )
    storage: dict[str, Any] = {"endpoint_url": endpoint_url, "region": region}
    if uri.startswith("s3://") and endpoint_url is None:
        from memq.client.profile import load_profile

        profile = load_profile(state_dir)  # the local stack's S3 endpoint and credentials
        if profile is not None:
            storage = {**profile.storage, **({"region": region} if region else {})}
    reader, bucket, key = _reader_for(uri, storage)
    data = reader.read(bucket, key)
    header = decode_batch_header(data)
    batch_id = key.rsplit("/", 1)[-1]
    try:
        where = parse_object_key(key)
        batch_id = where.batch_id
        err.print(f"topic {where.topic} (cluster {where.cluster}), batch {where.batch_id}")
    except MemqFormatError:
        pass
    err.print(
        f"{escape(uri)}: {len(data):,} bytes, format v{header.version}, {header.block_count} blocks, "
        f"{header.record_count:,} records, header CRC {header.crc:#010x}, "
        f"{ms_to_iso(header.min_timestamp)} .. {ms_to_iso(header.max_timestamp)}"
    )
    t = Table()
    for col in ("block", "offset", "bytes", "records", "producer", "epoch", "seq", "codec", "CRC"):
        t.add_column(col, justify="right")
    printed = 0
    bad = 0
    for i, e in enumerate(header.entries):
        block = memoryview(data)[e.offset : e.offset + e.length]
        try:
            bh = verify_batch_block(block, e, index=i)
            status = "[green]ok[/green]"
        except MemqFormatError as ex:
            bad += 1
            t.add_row(
                str(i),
                str(e.offset),
                str(e.length),
                str(e.record_count),
                "",
                "",
                "",
                "",
                f"[red]{ex}[/red]",
            )
            continue
        t.add_row(
            str(i),
            str(e.offset),
            str(e.length),
            str(bh.record_count),
            f"{bh.producer_id:#x}",
            str(bh.epoch),
            str(bh.sequence),
            bh.compression.name.lower(),
            status,
        )
        if printed < records:
            for ri, (ts, k, v, h) in enumerate(decode_records(block, bh)):
                if printed >= records:
                    break
                # (ids as `memq backfill` writes them: <batch id>/<block>/<record>)
                sys.stdout.write(record_json(f"{batch_id}/{i}/{ri}", k, v, h, ts) + "\n")
                printed += 1
    err.print(t)
    if len(data) != header.object_size:
        err.print(
            f"[red]object is {len(data)} bytes but its header says {header.object_size}[/red]"
        )
        bad += 1
    if bad:
        raise typer.Exit(1)


def peek(
    topic: str = typer.Option(..., "--topic", "-t", callback=topic_name, help="Topic to inspect."),
    last: int = typer.Option(5, min=1, help="How many of the newest objects per partition."),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Show a topic's newest batches (from their notifications) without joining a group or
    committing: partition, offset, object key, size, blocks, records, time range, broker."""
    from memq.client.bootstrap import fetch_metadata, resolve_client, split_servers
    from memq.config import SecureClientConfig
    from memq.consumer.notifications import NotificationProbe

    _use_state_dir(state_dir)
    sec, endpoints = resolve_client(SecureClientConfig(), split_servers(bootstrap))
    meta = fetch_metadata(endpoints.bootstrap, [topic], security=sec.security())
    tm = meta.topics.get(topic)
    if tm is None or tm.error:
        raise MemqError(tm.error if tm and tm.error else f"unknown topic {topic!r}")
    nt = tm.notification["topic"]
    probe = NotificationProbe({"bootstrap.servers": tm.notification["bootstrap_servers"]})
    t = Table(title=f"{topic}: newest {last} objects per partition ({nt})")
    for col in (
        "partition",
        "offset",
        "object",
        "bytes",
        "blocks",
        "records",
        "from",
        "to",
        "broker",
    ):
        t.add_column(col, no_wrap=col == "object")  # (copied into `memq cat` whole)
    try:
        for p in range(int(tm.notification["partitions"])):
            low, high = probe.watermarks(nt, p)
            for off, n in probe.scan(nt, p, max(low, high - last), high):
                t.add_row(
                    str(p),
                    str(off),
                    _object_uri(n),  # what `memq cat` takes
                    f"{n.size:,}",
                    str(n.block_count),
                    f"{n.record_count:,}",
                    ms_to_iso(n.min_timestamp),
                    ms_to_iso(n.max_timestamp),
                    n.broker,
                )
    finally:
        probe.close()
    console = Console()
    if not console.is_terminal:
        console = Console(width=1000)  # piped: do not crop or fold the table
    console.print(t)


def _object_uri(n: Any) -> str:
    """A notification's object as `memq cat` reads it: s3://bucket/key, else a path."""
    if n.storage == "s3":
        return f"s3://{n.bucket}/{n.key}"
    return str(Path(n.bucket or "/") / n.key)
