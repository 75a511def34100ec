"""Cost model: MemQ on S3 versus the same traffic on a 3-replica Kafka cluster (pure).

Every price and assumption is an input (:class:`Prices`, :class:`Workload`) with a
documented default, and :func:`estimate` returns each line item with the formula that
produced it, so a reader can check the arithmetic and substitute their own contract
prices. Defaults are AWS us-east-1 public list prices (S3 Standard, EBS gp3, inter-AZ
data transfer) as published in 2025; compute (broker instances) is left out on both
sides because both designs need brokers, and MemQ's are stateless.

What differs between the designs:

- **Kafka**: every byte crosses availability zones to reach its replicas (RF-1 copies),
  producers reach a leader in another zone 2 times in 3 (three zones, no rack-aware
  routing), and so do consumers (unless fetch-from-follower is configured); disks hold
  RF copies for the retention period, provisioned with headroom.
- **MemQ**: producers still cross zones to reach a broker (same fraction, an input),
  but the broker writes one object per batch to S3, which replicates across zones
  itself and charges per request: PUTs per sealed batch, GETs per object per consumer
  group, and storage for the retention. Notifications are a few hundred bytes per
  object (their Kafka cost is listed, tiny). S3 to EC2 transfer in-region is free.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CostLine", "Estimate", "Prices", "Workload", "estimate"]

DAY_S = 86_400
GB = 1e9  # AWS bills decimal GB for transfer; storage GB-month likewise (approximation)
MONTH_DAYS = 30.0


@dataclass(frozen=True)
class Prices:
    """Public list prices (USD). Override any of them with your own."""

    #: S3 Standard PUT/COPY/POST/LIST, per 1,000 requests.
    s3_put_per_1k: float = 0.005
    #: S3 Standard GET/SELECT, per 1,000 requests.
    s3_get_per_1k: float = 0.0004
    #: S3 Standard storage, per GB-month (first 50 TB tier).
    s3_storage_gb_month: float = 0.023
    #: Data transfer between availability zones, per GB, charged on each side (0.01 + 0.01).
    inter_az_per_gb: float = 0.02
    #: EBS gp3 volume, per GB-month (baseline IOPS/throughput included).
    ebs_gb_month: float = 0.08


@dataclass(frozen=True)
class Workload:
    """The traffic and the settings of both designs."""

    #: Ingest rate of record payload, MB/s (decimal).
    ingest_mbps: float = 100.0
    #: Average record size, bytes (used for record counts only).
    record_bytes: int = 1024
    #: How long data is kept, days (S3 objects / Kafka segments).
    retention_days: float = 7.0
    #: MemQ batch size: a batch is sealed at this many bytes...
    batch_bytes: int = 8 << 20
    #: ...or after this long, whichever comes first.
    batch_ms: int = 1000
    #: Brokers writing the topic (each seals its own batches).
    writers: int = 2
    #: Consumer groups reading everything once (fan-out).
    consumer_groups: int = 1
    #: Compression ratio of the stored bytes (payload / stored), same codec on both sides.
    compression_ratio: float = 1.0
    #: Kafka replication factor.
    replication_factor: int = 3
    #: Share of producer (and consumer) traffic that crosses zones: 2/3 with 3 zones.
    cross_az_fraction: float = 2 / 3
    #: Kafka consumers read from a same-zone follower (fetch-from-follower, KIP-392).
    kafka_fetch_from_follower: bool = False
    #: Kafka disks are provisioned so that retained data fills this share of them.
    kafka_disk_utilisation: float = 0.5
    #: Bytes of one MemQ notification in Kafka (replicated like any Kafka data).
    notification_bytes: int = 600


@dataclass(frozen=True)
class CostLine:
    item: str
    usd_per_day: float
    formula: str


@dataclass
class Estimate:
    workload: Workload
    prices: Prices
    memq: list[CostLine] = field(default_factory=list)
    kafka: list[CostLine] = field(default_factory=list)
    facts: dict[str, float] = field(default_factory=dict)

    @property
    def memq_total(self) -> float:
        return sum(c.usd_per_day for c in self.memq)

    @property
    def kafka_total(self) -> float:
        return sum(c.usd_per_day for c in self.kafka)

    @property
    def ratio(self) -> float:
        """MemQ cost as a fraction of Kafka's."""
        return self.memq_total / self.kafka_total if self.kafka_total else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": asdict(self.workload),
            "prices": asdict(self.prices),
            "facts": self.facts,
            "memq": [asdict(c) for c in self.memq],
            "kafka": [asdict(c) for c in self.kafka],
            "memq_usd_per_day": round(self.memq_total, 2),
            "kafka_usd_per_day": round(self.kafka_total, 2),
            "memq_vs_kafka": round(self.ratio, 4),
        }


def _check(w: Workload) -> None:
    bad = [
        f"{name} must be a finite number, not {value}"
        for name, value in vars(w).items()
        if isinstance(value, float) and not math.isfinite(value)
    ]
    if bad:  # (inf divided down to 0 s per object; nan printed "$nan/day")
        raise ValueError("invalid cost model input: " + "; ".join(bad))
    if w.ingest_mbps <= 0:
        bad.append("ingest_mbps must be > 0")
    if w.record_bytes <= 0:
        bad.append("record_bytes must be > 0")
    if w.retention_days < 0:
        bad.append("retention_days must be >= 0")
    if w.batch_bytes <= 0 or w.batch_ms <= 0:
        bad.append("batch_bytes and batch_ms must be > 0")
    if w.writers < 1 or w.consumer_groups < 0 or w.replication_factor < 1:
        bad.append("writers >= 1, consumer_groups >= 0, replication_factor >= 1")
    if w.compression_ratio <= 0:
        bad.append("compression_ratio must be > 0")
    if not 0 <= w.cross_az_fraction <= 1 or not 0 < w.kafka_disk_utilisation <= 1:
        bad.append("cross_az_fraction in [0, 1] and kafka_disk_utilisation in (0, 1]")
    if bad:
        raise ValueError("invalid cost model input: " + "; ".join(bad))


def estimate(w: Workload | None = None, p: Prices | None = None) -> Estimate:
    """Daily cost of ``w`` on MemQ (S3) and on Kafka, line by line."""
    w = w or Workload()
    p = p or Prices()
    _check(w)
    est = Estimate(w, p)
    payload_gb_day = w.ingest_mbps * 1e6 * DAY_S / GB
    stored_gb_day = payload_gb_day / w.compression_ratio
    per_writer_bps = w.ingest_mbps * 1e6 / w.writers
    # Each writer seals on size or age, whichever comes first.
    seal_s = min(w.batch_bytes / (per_writer_bps / w.compression_ratio), w.batch_ms / 1000)
    objects_day = w.writers * DAY_S / seal_s
    avg_object_mb = stored_gb_day * GB / objects_day / 1e6
    est.facts = {
        "payload_GB_per_day": round(payload_gb_day, 1),
        "stored_GB_per_day": round(stored_gb_day, 1),
        "records_per_s": round(w.ingest_mbps * 1e6 / w.record_bytes),
        "batch_seal_interval_s": round(seal_s, 3),
        "objects_per_day": round(objects_day),
        "avg_object_MB": round(avg_object_mb, 2),
        "retained_GB": round(stored_gb_day * w.retention_days, 1),
    }
    cross = w.cross_az_fraction
    az = p.inter_az_per_gb

    # MemQ
    m = est.memq
    m.append(CostLine("producers -> brokers, inter-AZ", stored_gb_day * cross * az,
                      f"{stored_gb_day:.1f} GB x {cross:.2f} x ${az}/GB"))  # fmt: skip
    m.append(CostLine("S3 PUT (one per batch)", objects_day / 1000 * p.s3_put_per_1k,
                      f"{objects_day:,.0f} objects / 1000 x ${p.s3_put_per_1k}"))  # fmt: skip
    gets = objects_day * w.consumer_groups
    m.append(CostLine("S3 GET (one per object per group)", gets / 1000 * p.s3_get_per_1k,
                      f"{gets:,.0f} GETs / 1000 x ${p.s3_get_per_1k}"))  # fmt: skip
    retained = stored_gb_day * w.retention_days
    m.append(CostLine("S3 storage (retention)", retained * p.s3_storage_gb_month / MONTH_DAYS,
                      f"{retained:,.1f} GB x ${p.s3_storage_gb_month}/GB-month / 30"))  # fmt: skip
    notif_gb = objects_day * w.notification_bytes / GB
    notif = notif_gb * (w.replication_factor - 1 + cross * (1 + w.consumer_groups)) * az
    m.append(CostLine("notifications on Kafka (replication + clients, inter-AZ)", notif,
                      f"{notif_gb:.3f} GB x ({w.replication_factor - 1} + {cross:.2f} x "
                      f"{1 + w.consumer_groups}) x ${az}/GB"))  # fmt: skip

    # Kafka
    k = est.kafka
    k.append(CostLine("producers -> leaders, inter-AZ", stored_gb_day * cross * az,
                      f"{stored_gb_day:.1f} GB x {cross:.2f} x ${az}/GB"))  # fmt: skip
    rep = stored_gb_day * (w.replication_factor - 1)
    k.append(CostLine(f"replication to {w.replication_factor - 1} followers, inter-AZ",
                      rep * az, f"{stored_gb_day:.1f} GB x {w.replication_factor - 1} x ${az}/GB"))  # fmt: skip
    cons_cross = 0.0 if w.kafka_fetch_from_follower else cross
    k.append(CostLine("consumers <- leaders, inter-AZ",
                      stored_gb_day * w.consumer_groups * cons_cross * az,
                      f"{stored_gb_day:.1f} GB x {w.consumer_groups} groups x {cons_cross:.2f} "
                      f"x ${az}/GB"))  # fmt: skip
    disk = retained * w.replication_factor / w.kafka_disk_utilisation
    k.append(CostLine("broker disks (EBS gp3, RF copies, headroom)",
                      disk * p.ebs_gb_month / MONTH_DAYS,
                      f"{retained:,.1f} GB x {w.replication_factor} / "
                      f"{w.kafka_disk_utilisation} x ${p.ebs_gb_month}/GB-month / 30"))  # fmt: skip
    return est
