"""Options shared by several commands."""

from __future__ import annotations

import typer

STATE_DIR = typer.Option(
    None,
    "--state-dir",
    envvar="MEMQ_STATE_DIR",
    help="Where the local stack keeps its state, pids and logs (default: .memq).",
)
