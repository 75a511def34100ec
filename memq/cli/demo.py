"""``memq demo``: the end-to-end demo (what ``make demo`` runs)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from memq.cli.options import STATE_DIR

out = Console(log_path=False)


def demo(
    state_dir: Path | None = STATE_DIR,
    records: int = typer.Option(20_000, help="Records to send through the pipeline."),
    keep: bool = typer.Option(False, help="Leave a stack this command started running."),
    backfill: bool = typer.Option(True, help="End with a Spark backfill of the demo topic."),
) -> None:
    """Run the end-to-end demo: produce (acks=all) through the brokers, consume with a
    consumer group, read every notification and object back, backfill with Spark, and end
    with the auditor's report (zero loss) and dashboard URL; every step is verified
    against what was produced. Uses the running local stack, or starts (and stops) one."""
    from memq.cli.audit import print_report
    from memq.demo import DemoResult, demo_with_stack
    from memq.devstack import DevStack

    def report(res: DemoResult, stack_stops: bool) -> None:
        t = Table(title=f"MemQ demo: topic {res.topic}", show_header=False)
        t.add_row("records produced", f"{res.records:,}")
        t.add_row("records consumed", f"{res.consumed:,}")
        t.add_row("objects in S3", f"{res.objects} ({res.bytes_stored:,} bytes)")
        if res.backfill_records is not None:
            t.add_row("records backfilled", f"{res.backfill_records:,}")
        for name, secs in res.timings.items():
            t.add_row(name, f"{secs:.2f} s")
        out.print(t)
        for c in res.checks:
            out.print(f"[green]✔[/green] {c}")
        if res.audit:
            out.print("[bold]audit report[/bold] (memq audit report --topic " + res.topic + "):")
            wide = Console(width=max(out.width, 120), log_path=False)  # the table has 10 columns
            print_report(wide, res.audit["summary"], res.audit["missing"])
        if res.dashboard:
            note = (
                " (until the stack stops below; `memq demo --keep` leaves it up)"
                if stack_stops
                else ""
            )
            out.print(f"audit dashboard: [link={res.dashboard}]{res.dashboard}[/link]{note}")

    demo_with_stack(
        DevStack(state_dir),
        keep=keep,
        say=out.log,
        report=report,
        records=records,
        backfill=backfill,
    )
    out.print("[bold green]DEMO OK[/bold green]")
