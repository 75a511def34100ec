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
    records: int = typer.Option(20_000, help="Records to send through the stack."),
    keep: bool = typer.Option(False, help="Leave a stack this command started running."),
) -> None:
    """Run the end-to-end demo on the local stack (started and stopped here if not up)."""
    from memq.demo import demo_with_stack

    res = demo_with_stack(stack(state_dir), keep=keep, say=out.log, records=records)
    t = Table(title="MemQ demo: verified round trip through S3 and Kafka", show_header=False)
    t.add_row("records", f"{res.records:,}")
    t.add_row("blocks", str(res.blocks))
    t.add_row("object", f"{res.key} ({res.object_size:,} bytes)")
    t.add_row("notification", res.notification)
    for name, secs in res.timings.items():
        t.add_row(f"{name} time", f"{secs * 1000:.0f} ms")
    out.print(t)
    for c in res.checks:
        out.print(f"[green]✔[/green] {c}")
    out.print("[bold green]DEMO OK[/bold green]")
