"""Options of the ``memq`` data source: parsed once, validated, picklable.

Every option is a string in Spark (``.option("topic", "events")``); this module turns
them into a frozen :class:`ScanOptions`, or raises :class:`memq.errors.ConfigError`
naming the option and the fix. Credentials are never options: boto3's standard chain
(``AWS_*`` environment variables, ``AWS_PROFILE``/``profile``, instance roles) supplies them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from memq.errors import ConfigError, MalformedError
from memq.formats.keys import validate_name
from memq.formats.times import iso_to_ms, time_to_ms

__all__ = [
    "DEFAULT_CLUSTER",
    "KNOWN_OPTIONS",
    "ScanOptions",
    "parse_options",
    "parse_time_ms",
]

DEFAULT_CLUSTER = "default"
MiB = 1 << 20

HashPrefixMode = Literal["auto", "true", "false"]
CorruptPolicy = Literal["fail", "skip"]
StartingPosition = Literal["earliest", "latest"]

#: option name -> one-line meaning (docs/spark.md is the long form).
KNOWN_OPTIONS: dict[str, str] = {
    "bucket": "S3 bucket holding the topic's batch objects (required)",
    "topic": "MemQ topic name (required)",
    "cluster": f"MemQ cluster name, the key segment after the hash (default {DEFAULT_CLUSTER!r})",
    "endpoint_url": "S3 endpoint (MinIO, moto, ...); default: AWS",
    "region": "S3 region; default: boto3's chain (AWS_DEFAULT_REGION, profile)",
    "profile": "named AWS profile for boto3 (no secrets in options)",
    "hash_prefix": "auto (default) | true | false: whether keys start with a 2-hex hash",
    "start_time": "first record timestamp to read (inclusive): ISO-8601 or epoch ms",
    "end_time": "record timestamp to stop at (exclusive): ISO-8601 or epoch ms",
    "time_slack_ms": "how far a batch's seal time may be from its records' timestamps (900000)",
    "target_partition_bytes": "upper bound of object bytes per Spark partition (128 MiB)",
    "min_partition_bytes": "lower bound of object bytes per Spark partition (8 MiB)",
    "partitions_per_core": "aim for this many partitions per core when data allows (1)",
    "on_corrupt": "fail (default) | skip: what to do with corrupt or missing objects",
    "dedup": "false (default) | true: each task drops copies of a block id it already read",
    "list_concurrency": "concurrent LIST requests on the driver (32)",
    "list_page_size": "keys per LIST request, 1-1000 (1000)",
    "read_concurrency": "concurrent GETs per Spark task (4)",
    "settle_ms": "streaming: only read objects sealed at least this long ago (120000)",
    "starting_position": "streaming: earliest (default) | latest, when no start_time",
    "max_objects_per_trigger": "streaming: cap on objects per micro-batch (unlimited)",
}


def parse_time_ms(name: str, value: str) -> int:
    """Epoch milliseconds from ``value``: ISO-8601 (no zone: UTC) or epoch milliseconds
    (a short number is refused as ambiguous, :func:`memq.formats.times.time_to_ms`)."""
    try:
        ms = time_to_ms(value)
    except ValueError as e:
        raise ConfigError(f"option {name}: {e}") from None
    if not EARLIEST_MS <= ms <= LATEST_MS:  # (the listing's hour prefixes need a date)
        raise ConfigError(
            f"option {name}={value!r} is out of range: give a time from 0001-01-09 to "
            "9999-12-23 (leave the option out for no bound)"
        )
    return ms


#: The times a bound may take: a listing widens it by time_slack_ms (at most 7 days) and
#: names its hours, which must be dates (a far-future bound was a traceback).
EARLIEST_MS = iso_to_ms("0001-01-09")
LATEST_MS = iso_to_ms("9999-12-23")


def _int(opts: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {name}={raw!r} must be an integer") from None
    if not lo <= v <= hi:
        raise ConfigError(f"option {name}={v} must be between {lo} and {hi}")
    return v


def _choice(opts: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = opts.get(name)
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v not in allowed:
        raise ConfigError(f"option {name}={raw!r} must be one of {', '.join(allowed)}")
    return v


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """Validated options of one ``memq`` read (batch or streaming)."""

    bucket: str
    topic: str
    cluster: str = DEFAULT_CLUSTER
    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    hash_prefix: HashPrefixMode = "auto"
    start_ms: int | None = None
    end_ms: int | None = None
    time_slack_ms: int = 15 * 60 * 1000
    target_partition_bytes: int = 128 * MiB
    min_partition_bytes: int = 8 * MiB
    partitions_per_core: int = 1
    on_corrupt: CorruptPolicy = "fail"
    #: Each read task drops repeated block ids (producer_id, epoch, sequence); scan-wide
    #: needs a shuffle: :func:`memq.spark.dedup.drop_duplicate_blocks`.
    dedup: bool = False
    list_concurrency: int = 32
    list_page_size: int = 1000
    read_concurrency: int = 4
    settle_ms: int = 120_000
    starting_position: StartingPosition = "earliest"
    max_objects_per_trigger: int | None = None
    #: Spark's pushed filters on ``timestamp`` (``memq.spark.pushdown``): exact bounds of
    #: the records kept. Unlike start_ms/end_ms they do not narrow the listing (a record
    #: may lie any time before or after its batch's seal time); they let a task read an
    #: object's header first and GET only the blocks that overlap them.
    filter_start_ms: int | None = None
    filter_end_ms: int | None = None

    @property
    def record_window(self) -> tuple[int | None, int | None]:
        """The records kept: ``start <= timestamp < end`` (None: unbounded), the options'
        bounds narrowed by the pushed filters'."""
        lo = max((b for b in (self.start_ms, self.filter_start_ms) if b is not None), default=None)
        hi = min((b for b in (self.end_ms, self.filter_end_ms) if b is not None), default=None)
        return lo, hi

    @property
    def filtered(self) -> bool:
        """Whether pushed filters bound the records (tasks read headers first)."""
        return self.filter_start_ms is not None or self.filter_end_ms is not None

    @property
    def seal_window(self) -> tuple[int | None, int | None]:
        """Range of batch seal times (ms, inclusive) that may hold records in range."""
        lo = None if self.start_ms is None else self.start_ms - self.time_slack_ms
        hi = None if self.end_ms is None else self.end_ms + self.time_slack_ms
        return lo, hi

    def location(self) -> str:
        return f"s3://{self.bucket}/.../{self.cluster}/topics/{self.topic}/"


def parse_options(options: Mapping[str, str]) -> ScanOptions:
    """Validate Spark's (case-insensitive) option map into :class:`ScanOptions`."""
    opts = {str(k).lower(): v for k, v in options.items() if k.lower() != "path"}
    endpoint = opts.get("endpoint_url")
    if endpoint and not re.match(r"^https?://[^/]", str(endpoint)):  # (botocore: ValueError)
        raise ConfigError(f"option endpoint_url={endpoint!r} is not a URL: use http(s)://host:port")
    unknown = sorted(set(opts) - set(KNOWN_OPTIONS))
    if unknown:
        raise ConfigError(
            f"unknown memq option(s) {', '.join(unknown)}: known options are "
            f"{', '.join(sorted(KNOWN_OPTIONS))} (see docs/spark.md)"
        )
    for required in ("bucket", "topic"):
        if not opts.get(required):
            raise ConfigError(
                f'the memq data source needs option {required!r}: .option("{required}", ...)'
            )
    try:
        topic = validate_name("topic", opts["topic"])
        cluster = validate_name("cluster", opts.get("cluster") or DEFAULT_CLUSTER)
    except MalformedError as e:
        raise ConfigError(str(e)) from None
    start = parse_time_ms("start_time", opts["start_time"]) if opts.get("start_time") else None
    end = parse_time_ms("end_time", opts["end_time"]) if opts.get("end_time") else None
    if start is not None and end is not None and end <= start:
        raise ConfigError(f"end_time ({end}) must be after start_time ({start})")
    big = 1 << 40
    max_objects = opts.get("max_objects_per_trigger")
    out = ScanOptions(
        bucket=opts["bucket"],
        topic=topic,
        cluster=cluster,
        endpoint_url=opts.get("endpoint_url") or None,
        region=opts.get("region") or None,
        profile=opts.get("profile") or None,
        hash_prefix=_choice(opts, "hash_prefix", "auto", ("auto", "true", "false")),  # type: ignore[arg-type]
        start_ms=start,
        end_ms=end,
        time_slack_ms=_int(opts, "time_slack_ms", 15 * 60 * 1000, 0, 7 * 24 * 3600 * 1000),
        target_partition_bytes=_int(opts, "target_partition_bytes", 128 * MiB, 1, big),
        min_partition_bytes=_int(opts, "min_partition_bytes", 8 * MiB, 1, big),
        partitions_per_core=_int(opts, "partitions_per_core", 1, 1, 1000),
        on_corrupt=_choice(opts, "on_corrupt", "fail", ("fail", "skip")),  # type: ignore[arg-type]
        dedup=_choice(opts, "dedup", "false", ("false", "true")) == "true",
        list_concurrency=_int(opts, "list_concurrency", 32, 1, 1024),
        list_page_size=_int(opts, "list_page_size", 1000, 1, 1000),
        read_concurrency=_int(opts, "read_concurrency", 4, 1, 256),
        settle_ms=_int(opts, "settle_ms", 120_000, 0, 7 * 24 * 3600 * 1000),
        starting_position=_choice(  # type: ignore[arg-type]
            opts, "starting_position", "earliest", ("earliest", "latest")
        ),
        max_objects_per_trigger=(
            None if max_objects is None else _int(opts, "max_objects_per_trigger", 0, 1, big)
        ),
    )
    if out.min_partition_bytes > out.target_partition_bytes:
        raise ConfigError(
            f"min_partition_bytes ({out.min_partition_bytes}) must not exceed "
            f"target_partition_bytes ({out.target_partition_bytes})"
        )
    return out
