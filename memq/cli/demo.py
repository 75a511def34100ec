"""``memq demo``: the end-to-end demo (what ``make demo`` runs)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from memq.cli.options import STATE_DIR, stack

out = Console(log_path=False)


def demo(
    state_dir: Path | None = STATE_DIR,
    records: int = typer.Option(20_000, help="Records to send through the pipeline."),
    keep: bool = typer.Option(False, help="Leave a stack this command started running."),
    backfill: bool = typer.Option(True, help="End with a Spark backfill of the demo topic."),
) -> None:
    """Run the end-to-end demo: produce (acks=all) through a broker, read every notification
    and object back, and backfill with Spark; every step is verified against what was
    produced. Uses the running local stack, or starts (and stops) one."""
    from memq.demo import demo_with_stack

    res = demo_with_stack(
        stack(state_dir), keep=keep, say=out.log, records=records, backfill=backfill
    )
    t = Table(title=f"MemQ demo: topic {res.topic}", show_header=False)
    t.add_row("records produced", f"{res.records:,}")
    t.add_row("objects in S3", f"{res.objects} ({res.bytes_stored:,} bytes)")
    if res.backfill_records is not None:
        t.add_row("records backfilled", f"{res.backfill_records:,}")
    for name, secs in res.timings.items():
        t.add_row(name, f"{secs:.2f} s")
    out.print(t)
    for c in res.checks:
        out.print(f"[green]✔[/green] {c}")
    out.print("[bold green]DEMO OK[/bold green]")
