"""Options shared by several commands."""

from __future__ import annotations

from pathlib import Path

import typer

from memq.devstack import DevStack

STATE_DIR = typer.Option(
    None,
    "--state-dir",
    envvar="MEMQ_STATE_DIR",
    help="Where the local stack keeps its state, pids and logs (default: .memq).",
)


def stack(state_dir: Path | None) -> DevStack:
    return DevStack(state_dir)
