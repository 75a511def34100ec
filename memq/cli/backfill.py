"""``memq backfill``: copy a topic's records from S3 into Parquet or JSON files with Spark."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memq.cli.options import STATE_DIR, http_url, time_option, usage_error
from memq.errors import ConfigError, MemqError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from memq.spark.options import ScanOptions

__all__ = ["backfill"]

out = Console()
err = Console(stderr=True)


def _location(
    state_dir: Path | None,
    bucket: str | None,
    endpoint_url: str | None,
    region: str | None,
    cluster: str | None,
) -> tuple[str, str | None, str | None, str]:
    """Bucket, endpoint, region and cluster to read: the flags, else the local dev stack's."""
    if bucket is not None:
        return bucket, endpoint_url, region, cluster or "default"
    if endpoint_url is not None:
        raise ConfigError("--endpoint-url needs --bucket too (which bucket holds the topic?)")
    from memq.client.profile import load_profile

    profile = load_profile(state_dir)
    if profile is None or profile.bucket is None:
        raise ConfigError(
            "no --bucket given and no local stack is running: pass --bucket (and "
            "--endpoint-url for a non-AWS S3), or start one with `memq dev up`"
        )
    # Spark's Python workers inherit this process's environment: hand them the local S3's
    # throwaway credentials there (real ones already in the environment are kept).
    storage = profile.storage
    for var, key in (
        ("AWS_ACCESS_KEY_ID", "access_key_id"),
        ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
    ):
        if storage.get(key):
            os.environ.setdefault(var, str(storage[key]))
    return (
        profile.bucket,
        storage.get("endpoint_url"),
        region or storage.get("region"),
        cluster or profile.cluster,
    )


def backfill(
    topic: str = typer.Option(..., "--topic", "-t", help="MemQ topic to read."),
    output: str = typer.Option(
        ..., "--out", "-o", help="Output directory (local path or any Hadoop URI)."
    ),
    start: str | None = typer.Option(
        None,
        "--from",
        callback=time_option,
        help="First record time, inclusive: ISO-8601 (UTC if no zone) or epoch ms.",
    ),
    end: str | None = typer.Option(
        None,
        "--to",
        callback=time_option,
        help="Record time to stop at, exclusive: ISO-8601 or epoch ms.",
    ),
    fmt: str = typer.Option("parquet", "--format", "-f", help="parquet or json (JSON lines)."),
    master: str = typer.Option(
        "local[*]", "--master", help="Spark master URL (local[*], spark://host:7077, yarn, ...)."
    ),
    bucket: str | None = typer.Option(
        None, "--bucket", help="S3 bucket (default: the local dev stack's)."
    ),
    cluster: str | None = typer.Option(
        None,
        "--cluster",
        help="MemQ cluster name in the keys (default: the local stack's, else 'default').",
    ),
    endpoint_url: str | None = typer.Option(
        None,
        "--endpoint-url",
        help="S3 endpoint for non-AWS S3 (default: the dev stack's).",
        callback=http_url,
    ),
    region: str | None = typer.Option(None, "--region", help="S3 region."),
    hash_prefix: str = typer.Option(
        "auto", "--hash-prefix", help="auto, true or false: keys start with a 2-hex hash."
    ),
    on_corrupt: str = typer.Option(
        "fail", "--on-corrupt", help="fail, or skip (and count) corrupt or missing objects."
    ),
    compression: str | None = typer.Option(
        None,
        "--compression",
        help="Output codec: Parquet none|snappy|zstd|lz4_raw|gzip (default zstd); JSON "
        "none|gzip|... (default none).",
    ),
    time_slack_ms: int | None = typer.Option(
        None,
        "--time-slack-ms",
        min=0,
        max=7 * 24 * 3600 * 1000,
        help="How far a batch's seal time may be from its records' timestamps (default 15 "
        "minutes): raise it when producers set old event times, or --from/--to leave "
        "their records out.",
    ),
    dedup: bool = typer.Option(
        False,
        "--dedup",
        help="Write each record once even when its block is stored in several objects (a "
        "retried block): drops repeated (producer_id, epoch, sequence, record_index) over "
        "the whole scan (a shuffle).",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output."),
    allow_empty: bool = typer.Option(
        False,
        "--allow-empty",
        help="Succeed (and write an empty output) when the topic has no object or record in "
        "the range; without it that is an error naming the prefixes listed.",
    ),
    conf: list[str] = typer.Option(
        [], "--conf", help="Extra Spark setting key=value (repeatable)."
    ),
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Copy a topic's records from its S3 batch objects into Parquet or JSON lines, partitioned
    by record date and hour (dt=YYYY-MM-DD/hh=HH), with Spark. No broker or Kafka needed."""
    from memq.spark.backfill import check_codec, run_backfill
    from memq.spark.errors import BackfillError
    from memq.spark.options import parse_options

    if fmt not in ("parquet", "json"):
        raise typer.BadParameter(f"--format {fmt!r}: use parquet or json")
    if on_corrupt not in ("fail", "skip"):
        raise typer.BadParameter(f"--on-corrupt {on_corrupt!r}: use fail or skip")
    with usage_error(BackfillError):
        check_codec(fmt, compression)
    extra: dict[str, str] = {}
    for item in conf:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ConfigError(f"--conf {item!r}: use key=value")
        extra[k.strip()] = v.strip()
    b, endpoint, reg, cluster_name = _location(state_dir, bucket, endpoint_url, region, cluster)
    options = {
        "bucket": b,
        "topic": topic,
        "cluster": cluster_name,
        "hash_prefix": hash_prefix,
        "on_corrupt": on_corrupt,
    }
    for name, value in (
        ("endpoint_url", endpoint),
        ("region", reg),
        ("start_time", start),
        ("end_time", end),
        ("time_slack_ms", None if time_slack_ms is None else str(time_slack_ms)),
    ):
        if value is not None:
            options[name] = value
    scan = parse_options(options)  # fail on bad flags before paying for a Spark start
    if not overwrite and "://" not in output and Path(output).exists():
        raise ConfigError(f"output {output} already exists: choose another --out or --overwrite")
    if overwrite and "://" not in output:
        _check_replaceable(Path(output))
    if not allow_empty:
        _require_objects(scan)

    t0 = time.monotonic()
    session, owned = _session(master, extra)
    try:
        with Progress(
            TextColumn("[bold]backfill[/bold] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as bar:
            task = bar.add_task(f"{topic} -> {output}", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            result = run_backfill(
                session,
                options,
                output,
                fmt="json" if fmt == "json" else "parquet",
                overwrite=overwrite,
                compression=compression,
                progress=progress,
                dedup=dedup,
            )
    finally:
        if owned:
            session.stop()
    t = Table(title=f"memq backfill of {topic!r}", show_header=False)
    t.add_row("output", f"{result.output} ({result.format}, partitioned by dt/hh)")
    t.add_row("objects", f"{result.objects:,}")
    t.add_row("records", f"{result.records:,}")
    if dedup:
        t.add_row("duplicates dropped", f"{result.duplicate_records_dropped:,} records")
    t.add_row("bytes", f"{result.bytes:,}")
    t.add_row(
        "seconds", f"{result.seconds:.2f} (job), {time.monotonic() - t0:.2f} (with Spark start)"
    )
    t.add_row("MB/s", f"{result.mb_per_s:.1f}")
    t.add_row("records/s", f"{result.records_per_s:,.0f}")
    skipped = result.stats.corrupt_skipped + result.stats.missing_skipped
    if skipped or on_corrupt == "skip":
        t.add_row(
            "skipped objects",
            f"{result.stats.corrupt_skipped} corrupt, {result.stats.missing_skipped} missing",
        )
    out.print(t)
    if not result.records and not allow_empty:
        from memq.spark.errors import BackfillError

        raise BackfillError(
            f"the backfill of {topic!r} read {result.objects:,} objects but no record "
            f"{_window(scan)}: {result.output} is empty (pass --allow-empty to accept that)"
        )


def _window(scan: ScanOptions) -> str:
    from memq.formats.times import ms_to_iso

    if scan.start_ms is None and scan.end_ms is None:
        return "at any time"
    lo = "the beginning" if scan.start_ms is None else ms_to_iso(scan.start_ms)
    hi = "now" if scan.end_ms is None else ms_to_iso(scan.end_ms)
    return f"from {lo} to {hi}"


def _require_objects(scan: ScanOptions) -> None:
    """Fail before starting Spark when no prefix of the topic holds an object in the
    window, naming the prefixes listed (a wrong --cluster, --topic or range shows)."""
    from memq.spark.errors import BackfillError
    from memq.spark.listing import probe_objects
    from memq.spark.stats import Counter

    roots, found = probe_objects(scan, Counter())
    if found:
        return
    base = f"s3://{scan.bucket}/"
    if roots:
        shown = ", ".join(base + r for r in roots[:4])
        listed = f"listed {shown}" + (f" and {len(roots) - 4} more" if len(roots) > 4 else "")
    else:
        listed = f"{base} holds no prefix of cluster {scan.cluster!r} (nothing to list)"
    raise BackfillError(
        f"no objects of topic {scan.topic!r} (cluster {scan.cluster!r}) {_window(scan)}: "
        f"{listed}; check --topic, --cluster, --bucket and --from/--to, or pass "
        "--allow-empty to write an empty output"
    )


def _check_replaceable(out: Path) -> None:
    """--overwrite replaces an earlier backfill output only (dt=... directories, Spark's
    _SUCCESS and dot files): a typo in --out must not wipe another directory."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a backfill output: refusing to replace it")
    other = sorted(
        p.name for p in out.iterdir() if not p.name.startswith(("dt=", "_", ".", "part-"))
    )
    if other:
        raise ConfigError(
            f"--out {out} does not look like a backfill output (it holds "
            f"{', '.join(other[:3])}{', ...' if len(other) > 3 else ''}): refusing to replace "
            "it; choose another --out"
        )


def _session(master: str, conf: dict[str, str]) -> tuple[SparkSession, bool]:
    """A SparkSession whose Python workers run this interpreter (so they can import memq).

    An already active session (a notebook, a test) is reused and left running; ``--master``
    and ``--conf`` then do not apply. Returns ``(session, created here)``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False

    builder = (
        SparkSession.builder.master(master)
        .appName("memq-backfill")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for k, v in conf.items():
        builder = builder.config(k, v)
    try:
        session: SparkSession = builder.getOrCreate()
    except Exception as e:  # (a bad --master: the JVM gateway exits, a long traceback)
        why = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise MemqError(
            f"cannot start Spark with --master {master!r} ({why.strip()}): use local[*], "
            "spark://host:port, yarn, ..."
        ) from None
    session.sparkContext.setLogLevel("OFF")  # (a failed task's ERROR logs: ~200 lines
    # of JVM and Python traces before the one-line error this command prints)
    return session, True
