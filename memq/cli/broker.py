"""``memq broker``: run one broker in the foreground."""

from __future__ import annotations

from pathlib import Path

import typer


def broker(
    config: Path = typer.Option(
        ..., "--config", "-c", help="Broker YAML file (see README: configuration)."
    ),
    port: int | None = typer.Option(None, help="Override the config's port (0: any free port)."),
    broker_id: str | None = typer.Option(
        None, "--broker-id", help="Override the config's broker_id."
    ),
    ready_file: Path | None = typer.Option(
        None, help="Write {broker, port, http_port} as JSON here once serving (for supervisors)."
    ),
) -> None:
    """Run a broker until SIGTERM/SIGINT, then drain: stop accepting, seal and upload open
    batches, answer every pending request, exit 0. Env overrides: MEMQ__<KEY>__<SUBKEY>=value."""
    from memq.config import load_broker_config
    from memq.run.broker import run_broker

    overrides: dict[str, object] = {}
    if port is not None:
        overrides["port"] = port
    if broker_id is not None:
        overrides["broker_id"] = broker_id
    cfg = load_broker_config(config, data=overrides)
    run_broker(cfg, ready_file)
