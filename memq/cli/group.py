"""``memq group ...``: consumer groups (list, describe with lag, reset offsets, delete)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memq.cli.options import BOOTSTRAP, JSON, STATE_DIR, key_value_pairs

app = typer.Typer(
    help="Consumer groups: list, describe (members, committed offsets, lag), reset offsets, "
    "delete. A group is a Kafka consumer group on a topic's notification topic.",
    no_args_is_help=True,
)
err = Console(stderr=True, soft_wrap=True)


#: The notification Kafka's settings of this invocation (``memq group -X ...``).
_kafka: dict[str, str] = {}


@app.callback()
def _options(
    kafka_options: list[str] = typer.Option(
        [],
        "--kafka-option",
        "-X",
        help="librdkafka setting KEY=VALUE for the notification Kafka (repeatable, before "
        "the command), e.g. -X security.protocol=SASL_SSL -X sasl.username=u",
    ),
) -> None:
    _kafka.clear()
    _kafka.update(key_value_pairs(kafka_options, "--kafka-option"))


def _admin(bootstrap: str | None, state_dir: Path | None) -> Any:
    from memq.consumer.groups import GroupAdmin

    if state_dir is not None:
        os.environ["MEMQ_STATE_DIR"] = str(state_dir)
    return GroupAdmin(bootstrap, kafka=dict(_kafka))


def _console() -> Console:
    c = Console()
    return c if c.is_terminal else Console(width=200)


@app.command("list")
def list_groups(
    bootstrap: str | None = BOOTSTRAP, state_dir: Path | None = STATE_DIR, as_json: bool = JSON
) -> None:
    """Groups with committed offsets on MemQ topics or members reading them: their state,
    group protocol (classic or consumer), members and topics."""
    with _admin(bootstrap, state_dir) as admin:
        groups = admin.list_groups()
    if as_json:
        typer.echo(json.dumps(groups, indent=2))
        return
    t = Table(title="consumer groups")
    for col in ("group", "state", "protocol", "members", "topics"):
        t.add_column(col)
    for g in groups:
        t.add_row(g["group"], g["state"], g["protocol"], str(g["members"]), ", ".join(g["topics"]))
    _console().print(t)


@app.command("describe")
def describe(
    group: str = typer.Argument(..., help="Consumer group."),
    topic: str | None = typer.Option(None, "--topic", "-t", help="Only this topic."),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = JSON,
) -> None:
    """State, group protocol (classic or consumer), members and, per partition, the
    committed notification offset, the end offset and the lag in objects, records (from
    the pending notifications) and seconds (since the oldest pending record)."""
    with _admin(bootstrap, state_dir) as admin:
        d = admin.describe(group, topic)
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    c = _console()
    c.print(f"group [bold]{escape(group)}[/bold] ({d['state']}, {d['protocol']} protocol): "
            f"{len(d['members'])} member(s), lag {d['lag_objects']:,} objects / "
            f"{d['lag_records']:,} records")  # fmt: skip
    for m in d["members"]:
        parts = ", ".join(f"{t}[{p}]" for t, p in m["partitions"]) or "-"
        c.print(f"  member {escape(m['client_id'])} ({escape(m['host'])}): {parts}")
    t = Table()
    for col in ("topic", "partition", "committed", "end", "lag objects", "lag records", "lag s"):
        t.add_column(col, justify="right")
    for name, parts in d["topics"].items():
        for p in parts:
            records = f"{p['lag_records']:,}" + ("~" if p["records_estimated"] else "")
            committed = "-" if p["committed"] is None else str(p["committed"])  # (as Kafka's)
            t.add_row(name, str(p["partition"]), committed, str(p["end"]),
                      f"{p['lag_objects']:,}", records, str(p["lag_seconds"] or 0))  # fmt: skip
    c.print(t)


def _to_ms(text: str) -> int:
    from memq.cli.options import parse_time

    return parse_time(text)


@app.command("reset-offsets")
def reset_offsets(
    group: str = typer.Argument(..., help="Consumer group (it must have no active member)."),
    topic: str = typer.Option(..., "--topic", "-t", help="Topic whose offsets to reset."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="The oldest objects."),
    to_latest: bool = typer.Option(False, "--to-latest", help="Skip everything published."),
    to_datetime: str | None = typer.Option(
        None, "--to-datetime", help="The first object reaching this time (ISO-8601 or ms)."
    ),
    shift_by: int | None = typer.Option(
        None, "--shift-by", help="Move each partition by N objects (negative: back)."
    ),
    to_message_id: str | None = typer.Option(
        None,
        "--to-message-id",
        help="partition:offset:block:record: that partition, from that very record (where "
        "the Kafka keeps commit metadata; else from the start of its object).",
    ),
    execute: bool = typer.Option(False, "--execute", help="Apply (default: --dry-run)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show the plan (default)."),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = JSON,
) -> None:
    """Rewind or advance a stopped group, as kafka-consumer-groups does: prints the plan
    (partition, current, new); --execute applies it."""
    chosen = [
        (name, value)
        for name, value, given in (
            ("earliest", None, to_earliest),
            ("latest", None, to_latest),
            ("datetime", to_datetime, to_datetime is not None),
            ("shift", shift_by, shift_by is not None),
            ("message-id", to_message_id, to_message_id is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        raise typer.BadParameter(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --shift-by, "
            "--to-message-id"
        )
    if execute and dry_run:
        raise typer.BadParameter("--execute and --dry-run exclude each other")
    to, value = chosen[0]
    if to == "datetime":
        value = _to_ms(str(value))
    with _admin(bootstrap, state_dir) as admin:
        plan = admin.reset_offsets(group, topic, to=to, value=value, execute=execute)
    if as_json:
        parts: dict[str, dict[str, Any]] = {}
        for p, (c, n) in sorted(plan.moves.items()):
            parts[str(p)] = {"current": c, "new": n}
            if p in plan.positions:  # block:record inside the new object
                parts[str(p)]["position"] = "{}:{}".format(*plan.positions[p])
        doc = {"group": group, "topic": topic, "executed": plan.executed,
               "partitions": parts, "positions_dropped": plan.positions_dropped}  # fmt: skip
        typer.echo(json.dumps(doc, indent=2))
        _say_dropped(plan)
        return
    t = Table(
        title=f"{group} on {topic}: reset to {to}" + (f" {value}" if value is not None else "")
    )
    for col in ("partition", "current", "new"):
        t.add_column(col, justify="right")
    for p, (cur, new) in sorted(plan.moves.items()):
        at = plan.positions.get(p)
        new_at = f"{new} (block {at[0]} record {at[1]})" if at else str(new)
        t.add_row(str(p), "-" if cur is None else str(cur), new_at)
    _console().print(t)
    err.print("applied" if plan.executed else "dry run: nothing changed (add --execute to apply)")
    _say_dropped(plan)


def _say_dropped(plan: Any) -> None:
    if plan.positions_dropped:
        err.print(
            "warning: the notification Kafka dropped the commit metadata that holds the "
            "block:record: the group reads those objects again from their first record",
            highlight=False,
        )


@app.command("delete")
def delete(
    group: str = typer.Argument(..., help="Consumer group (it must have no active member)."),
    yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation."),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Delete a stopped group and its committed offsets."""
    if not yes and not typer.confirm(f"delete group {group!r} and its committed offsets?"):
        err.print(f"group {group} not deleted")
        raise typer.Exit(1)
    with _admin(bootstrap, state_dir) as admin:
        admin.delete(group)
    err.print(f"group {group} deleted ({datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC)")


@app.command("exporter")
def exporter(
    port: int = typer.Option(9400, min=0, max=65535, help="Port of /metrics."),
    host: str = typer.Option("0.0.0.0", help="Interface to listen on."),
    interval: float = typer.Option(
        30.0, min=5.0, help="Seconds between lag measurements (each reads notifications)."
    ),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Serve consumer lag as Prometheus metrics (memq_group_lag_objects, _records,
    _seconds per group, topic and partition) for every group with committed offsets on a
    MemQ topic, measured every --interval seconds. Runs until interrupted."""
    import threading

    from prometheus_client import CollectorRegistry, start_http_server

    from memq.consumer.groups import LagCollector

    admin = _admin(bootstrap, state_dir)
    registry = CollectorRegistry()
    collector = LagCollector(admin)
    registry.register(collector)
    collector.refresh()
    start_http_server(port, addr=host, registry=registry)
    err.print(f"serving consumer lag on http://{host}:{port}/metrics (every {interval:.0f} s)")
    stop = threading.Event()
    try:
        while not stop.wait(interval):
            collector.refresh()
    except KeyboardInterrupt:
        pass
    finally:
        admin.close()
