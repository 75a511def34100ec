"""``memq acl add|remove|list``: per-topic ACLs (kept in ZooKeeper by clustered brokers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memq.cli.admin import _admin
from memq.cli.options import BOOTSTRAP, STATE_DIR

__all__ = ["app"]

app = typer.Typer(
    help="Per-topic ACLs: who may produce, consume or administer which topics. Needs admin "
    "on * (or a superuser); remote clusters: MEMQ_AUTH_TOKEN and MEMQ_SSL_CA_LOCATION.",
    no_args_is_help=True,
)
out = Console()

PRINCIPAL = typer.Option(..., "--principal", "-p", help="Token subject or certificate CN; * = any.")
TOPIC = typer.Option(..., "--topic", "-t", help="Topic, prefix ending in *, or * (cluster-wide).")


def _ops(values: list[str]) -> list[str]:
    """produce, consume or admin, else a usage error (before any broker is asked)."""
    bad = [v for v in values if v not in ("produce", "consume", "admin")]
    if bad:
        raise typer.BadParameter(f"{bad[0]!r} is not an operation: use produce, consume or admin")
    return values


OPS = typer.Option(..., "--op", "-o", callback=_ops, help="produce, consume or admin (repeatable).")


def _print(entries: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(entries, indent=2))
        return
    t = Table(title="ACLs")
    for col in ("principal", "topic", "ops"):
        t.add_column(col)
    for e in entries:
        t.add_row(escape(e["principal"]), e["topic"], ", ".join(e["ops"]))  # (a name, not markup)
    out.print(t)


@app.command("add")
def add(
    principal: str = PRINCIPAL,
    topic: str = TOPIC,
    op: list[str] = OPS,
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
) -> None:
    """Grant PRINCIPAL the operations on TOPIC (merged into an existing entry)."""
    _print(_admin(bootstrap, state_dir).add_acl(principal, topic, op), as_json)


@app.command("remove")
def remove(
    principal: str = PRINCIPAL,
    topic: str = TOPIC,
    op: list[str] = OPS,
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
) -> None:
    """Take the operations back (an entry left with none is dropped)."""
    _print(_admin(bootstrap, state_dir).remove_acl(principal, topic, op), as_json)


@app.command("list")
def list_(
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
) -> None:
    """The ACLs in force."""
    _print(_admin(bootstrap, state_dir).list_acls(), as_json)
