"""Object keys and names (pure).

Key layout::

    <hash>/<cluster>/topics/<topic>/dt=YYYY-MM-DD/hh=HH/<batch id>

``<hash>`` is two lowercase hex digits (CRC-32 of the batch id, low byte) that spread
keys over S3 partitions; it is left out (the key starts at ``<cluster>``) when hash
prefixes are switched off. ``dt``/``hh`` are the UTC date and hour the batch was
created, so readers prune by time from the key alone.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

from memq.errors import MalformedError

__all__ = [
    "NAME_PATTERN",
    "ObjectKey",
    "batch_id",
    "hash_prefix",
    "hour_of",
    "object_key",
    "parse_object_key",
    "topic_prefix",
    "validate_name",
]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_BROKER_ID = re.compile(r"^[A-Za-z0-9.-]{1,64}$")
_BATCH_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_KEY = re.compile(
    r"^(?:(?P<hash>[0-9a-f]{2})/)?(?P<cluster>[A-Za-z0-9._-]{1,249})/topics/"
    r"(?P<topic>[A-Za-z0-9._-]{1,249})/dt=(?P<dt>\d{4}-\d{2}-\d{2})/hh=(?P<hh>\d{2})/"
    r"(?P<batch>[A-Za-z0-9._-]{1,200})$"
)


def validate_name(kind: str, name: str) -> str:
    """Check a cluster or topic name (Kafka's rules: ``[A-Za-z0-9._-]``, 1-249 chars)."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or name in {".", ".."}:
        raise MalformedError(
            f"invalid {kind} name {name!r}: use 1-249 characters from A-Z a-z 0-9 . _ -"
        )
    return name


def hash_prefix(batch: str) -> str:
    return f"{zlib.crc32(batch.encode()) & 0xFF:02x}"


def hour_of(timestamp_ms: int) -> tuple[str, str]:
    """The ``(dt, hh)`` partition values of a millisecond timestamp (UTC)."""
    t = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return t.strftime("%Y-%m-%d"), f"{t.hour:02d}"


def batch_id(created_ms: int, broker_id: str, sequence: int, attempt: int = 0) -> str:
    """A batch id that sorts by creation time: ``<ms:13>-<seq:08>-<broker>[-h<attempt>]``.

    ``attempt`` > 0 names a hedged re-upload of the same batch under a new key.
    """
    if not _BROKER_ID.match(broker_id):
        raise MalformedError(
            f"invalid broker id {broker_id!r}: use 1-64 characters from A-Z a-z 0-9 . -"
        )
    if created_ms < 0 or sequence < 0 or attempt < 0:
        raise MalformedError("batch id parts must be non-negative")
    base = f"{created_ms:013d}-{sequence:08d}-{broker_id}"
    return f"{base}-h{attempt}" if attempt else base


def object_key(
    cluster: str, topic: str, batch: str, created_ms: int, *, use_hash_prefix: bool = True
) -> str:
    validate_name("cluster", cluster)
    validate_name("topic", topic)
    if not _BATCH_ID.match(batch):
        raise MalformedError(f"invalid batch id {batch!r}")
    dt, hh = hour_of(created_ms)
    path = f"{cluster}/topics/{topic}/dt={dt}/hh={hh}/{batch}"
    return f"{hash_prefix(batch)}/{path}" if use_hash_prefix else path


def topic_prefix(
    cluster: str,
    topic: str,
    *,
    hash_: str | None = None,
    dt: str | None = None,
    hh: str | None = None,
) -> str:
    """The listing prefix for a topic, optionally narrowed to a hash, day and hour.

    With hash prefixes on, list once per ``hash_`` value (``00``..``ff``).
    """
    validate_name("cluster", cluster)
    validate_name("topic", topic)
    p = f"{cluster}/topics/{topic}/"
    if hash_ is not None:
        p = f"{hash_}/{p}"
    if dt is not None:
        p += f"dt={dt}/"
        if hh is not None:
            p += f"hh={hh}/"
    elif hh is not None:
        raise MalformedError("an hour prefix needs a date")
    return p


@dataclass(frozen=True, slots=True)
class ObjectKey:
    hash: str | None
    cluster: str
    topic: str
    dt: str
    hh: str
    batch_id: str

    @property
    def hour_start_ms(self) -> int:
        """Start of the UTC hour this key's batch was created in (ms)."""
        t = datetime.strptime(f"{self.dt} {self.hh}", "%Y-%m-%d %H").replace(tzinfo=UTC)
        return int(t.timestamp() * 1000)


def parse_object_key(key: str) -> ObjectKey:
    m = _KEY.match(key)
    if not m:
        raise MalformedError(
            f"{key!r} is not a MemQ object key "
            "(<hash>/<cluster>/topics/<topic>/dt=YYYY-MM-DD/hh=HH/<batch id>)"
        )
    parsed = ObjectKey(m["hash"], m["cluster"], m["topic"], m["dt"], m["hh"], m["batch"])
    try:
        hour = int(parsed.hh)
        datetime.strptime(parsed.dt, "%Y-%m-%d")
    except ValueError:
        raise MalformedError(f"{key!r} has an invalid date partition") from None
    if hour > 23:
        raise MalformedError(f"{key!r} has an invalid hour partition")
    if parsed.hash is not None and parsed.hash != hash_prefix(parsed.batch_id):
        raise MalformedError(f"{key!r}: hash prefix does not match its batch id")
    return parsed
