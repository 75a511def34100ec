"""``memq cost``: S3 cost of a workload on MemQ beside the same traffic on Kafka."""

from __future__ import annotations

import dataclasses
import json
import math

import typer
from rich.console import Console
from rich.table import Table

from memq.cost import CostLine, Estimate, Prices, Workload, estimate

__all__ = ["cost", "print_estimate"]

out = Console()

_PRICE_KEYS = [f.name for f in dataclasses.fields(Prices)]


def _prices(pairs: list[str]) -> Prices:
    values: dict[str, float] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in _PRICE_KEYS:
            raise typer.BadParameter(
                f"--price {pair!r}: expected KEY=USD with KEY one of {', '.join(_PRICE_KEYS)}"
            )
        try:
            values[key] = float(raw)
        except ValueError:
            raise typer.BadParameter(f"--price {pair!r}: {raw!r} is not a number") from None
        if not math.isfinite(values[key]) or values[key] < 0:
            raise typer.BadParameter(f"--price {pair!r}: a price is a finite number >= 0")
    return Prices(**values)


def _table(title: str, lines: list[CostLine], total: float) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("item")
    t.add_column("USD/day", justify="right")
    t.add_column("how", style="dim")
    for c in lines:
        t.add_row(c.item, f"{c.usd_per_day:,.2f}", c.formula)
    t.add_row("[bold]total[/bold]", f"[bold]{total:,.2f}[/bold]", "")
    return t


def print_estimate(est: Estimate, console: Console = out) -> None:
    w = est.workload
    f = est.facts
    console.print(
        f"[bold]workload[/bold]: {w.ingest_mbps:g} MB/s of {w.record_bytes:,}-byte records "
        f"({f['records_per_s']:,.0f} records/s, {f['payload_GB_per_day']:,} GB/day), "
        f"retention {w.retention_days:g} days, {w.consumer_groups} consumer group(s), "
        f"compression {w.compression_ratio:g}x"
    )
    console.print(
        f"[bold]MemQ batches[/bold]: {w.writers} writer(s), batch.bytes {w.batch_bytes:,}, "
        f"batch.ms {w.batch_ms:,}: a batch every {f['batch_seal_interval_s']:g} s per writer, "
        f"{f['objects_per_day']:,.0f} objects/day of {f['avg_object_MB']:g} MB"
    )
    console.print(_table("MemQ (S3)", est.memq, est.memq_total))
    console.print(_table(f"Kafka (RF={w.replication_factor})", est.kafka, est.kafka_total))
    console.print(
        f"MemQ: [bold]${est.memq_total:,.2f}/day[/bold], Kafka: [bold]${est.kafka_total:,.2f}"
        f"/day[/bold]: MemQ costs [bold]{est.ratio:.1%}[/bold] of Kafka "
        f"({1 - est.ratio:.0%} less)."
    )
    p = est.prices
    console.print(
        "[dim]Assumptions: list prices (USD) "
        + ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(p).items())
        + f"; {w.cross_az_fraction:.2f} of client traffic crosses zones on both sides; "
        f"Kafka consumers {'read a same-zone follower' if w.kafka_fetch_from_follower else 'read leaders'}; "
        f"Kafka disks {w.kafka_disk_utilisation:.0%} full; compute (broker instances) not "
        "counted on either side; S3 to EC2 transfer in-region is free.[/dim]"
    )


def cost(
    ingest_mbps: float = typer.Option(100.0, help="Ingest rate of record payload, MB/s."),
    record_bytes: int = typer.Option(1024, help="Average record size, bytes."),
    retention_days: float = typer.Option(7.0, help="Retention, days."),
    batch_bytes: int = typer.Option(8 << 20, help="MemQ batch.bytes."),
    batch_ms: int = typer.Option(1000, help="MemQ batch.ms."),
    writers: int = typer.Option(2, help="Brokers writing the topic."),
    groups: int = typer.Option(1, help="Consumer groups reading everything."),
    compression_ratio: float = typer.Option(1.0, help="Payload bytes / stored bytes."),
    replication_factor: int = typer.Option(3, help="Kafka replication factor."),
    cross_az: float = typer.Option(
        2 / 3, help="Share of client traffic crossing zones (2/3 with three zones)."
    ),
    fetch_from_follower: bool = typer.Option(
        False, help="Kafka consumers read a same-zone follower (no inter-AZ reads)."
    ),
    disk_utilisation: float = typer.Option(0.5, help="How full Kafka's disks may get."),
    price: list[str] = typer.Option(
        [],
        "--price",
        help="Override a list price, KEY=USD (repeatable): " + ", ".join(_PRICE_KEYS) + ".",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
) -> None:
    """Daily S3 PUT/GET/storage cost of a workload on MemQ beside the same traffic on a
    replicated Kafka cluster (inter-AZ transfer, disks), every line with its formula and
    every price an input."""
    w = Workload(
        ingest_mbps=ingest_mbps,
        record_bytes=record_bytes,
        retention_days=retention_days,
        batch_bytes=batch_bytes,
        batch_ms=batch_ms,
        writers=writers,
        consumer_groups=groups,
        compression_ratio=compression_ratio,
        replication_factor=replication_factor,
        cross_az_fraction=cross_az,
        kafka_fetch_from_follower=fetch_from_follower,
        kafka_disk_utilisation=disk_utilisation,
    )
    prices = _prices(price)
    try:
        est = estimate(w, prices)
    except ValueError as e:  # a bad option value: a usage error
        raise typer.BadParameter(str(e)) from None
    if as_json:
        typer.echo(json.dumps(est.to_dict(), indent=2))
    else:
        print_estimate(est)
