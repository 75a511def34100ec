"""``memq topic ...`` and ``memq cluster status``: topic admin and cluster state."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from memq.cli.options import BOOTSTRAP, JSON, STATE_DIR, positive, topic_name
from memq.errors import AuthorizationError

topic_app = typer.Typer(
    help="Create, inspect, change and delete topics (clustered brokers).", no_args_is_help=True
)
cluster_app = typer.Typer(
    help="Cluster state: brokers, governor, assignments, capacity.", no_args_is_help=True
)
err = Console(stderr=True, soft_wrap=True)

SET = typer.Option(
    [], "--set", help="Topic setting KEY=VALUE with a dotted key, e.g. batch.ms=500 (repeatable)."
)


def _console() -> Console:
    c = Console()
    return c if c.is_terminal else Console(width=200)


def _admin(bootstrap: str | None, state_dir: Path | None) -> Any:
    from memq.client.admin import AdminClient

    if state_dir is not None:
        os.environ["MEMQ_STATE_DIR"] = str(state_dir)
    return AdminClient(bootstrap)


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """``["batch.ms=500", "expected_mbps=20"]`` -> ``{"batch.ms": 500, "expected_mbps": 20}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--set {pair!r}: use KEY=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


@topic_app.command("create")
def create(
    name: str = typer.Argument(..., callback=topic_name, help="Topic name."),
    settings: list[str] = SET,
    expected_mbps: float | None = typer.Option(
        None, callback=positive, help="Expected ingest (MB/s): sizes the writer set."
    ),
    partitions: int | None = typer.Option(
        None, min=1, help="Notification topic partitions (read parallelism)."
    ),
    if_not_exists: bool = typer.Option(
        False, "--if-not-exists", help="Succeed if the topic exists."
    ),
    wait: float = typer.Option(
        30.0, min=0.0, help="Seconds to wait for the governor to assign its writers."
    ),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = JSON,
) -> None:
    """Create a topic: the cluster's topic defaults plus --set overrides, validated by the
    broker; then wait for the governor to assign its writers. Exit 1 when no broker can
    write it (not enough capacity or buffer memory for --expected-mbps) or no writer was
    assigned in time; a warning when only part of its expected load could be placed."""
    s = parse_settings(settings)
    if expected_mbps is not None:
        s["expected_mbps"] = expected_mbps
    if partitions is not None:
        s["notification.partitions"] = partitions
    admin = _admin(bootstrap, state_dir)
    existed = if_not_exists and name in admin.list_topics()
    cfg = admin.create_topic(name, s, if_not_exists=if_not_exists)
    try:
        placed = admin.placement(name, wait)
    except AuthorizationError:  # (the cluster's placement is for cluster admins)
        if as_json:
            typer.echo(json.dumps({**cfg, "placement": None}, indent=2))
        err.print(
            f"topic {name} created; its writers are shown to cluster admins (memq cluster "
            "status needs admin on *)",
            highlight=False,
        )
        return
    expected = f"expected {cfg.get('expected_mbps')} MB/s"
    fix = (
        "add brokers, raise their capacity_mbps / memory_limit_bytes, or lower "
        f"expected_mbps (memq topic update {name} --set expected_mbps=...)"
    )
    if placed is None:
        if as_json:  # (the topic exists: its config, no placement yet)
            typer.echo(json.dumps({**cfg, "placement": None}, indent=2))
        err.print(
            f"[red]topic {name} created, but the governor assigned no writer within "
            f"{wait:g} s: check `memq cluster status` (is a governor elected?)[/red]",
            highlight=False,
        )
        raise typer.Exit(1)
    writers = ", ".join(placed["writers"])
    if not writers:
        # A topic nobody can write is not left behind by the command that failed (as
        # Kafka's topic create fails whole); one that existed before is left as it was.
        if not existed:
            admin.delete_topic(name)
            admin.forget_topic(name)
            fix = "add brokers, raise their capacity_mbps / memory_limit_bytes, or lower --expected-mbps"
        err.print(
            f"[red]topic {name} {'unchanged' if existed else 'not created'}: no broker can "
            f"write it ({expected}; the cluster cannot place {placed['shortfall_mbps']:g} "
            f"MB/s): {fix}[/red]",
            highlight=False,
        )
        raise typer.Exit(1)
    if as_json:
        typer.echo(json.dumps({**cfg, "placement": placed}, indent=2))
    if placed.get("shortfall_mbps") or placed.get("unplaced_writers"):
        err.print(
            f"[yellow]topic {name} ready on {writers}, short of capacity ({expected}; "
            f"the cluster cannot place {placed['shortfall_mbps']:g} MB/s): {fix}[/yellow]",
            highlight=False,
        )
    elif not as_json:
        err.print(f"topic {name} ready: writers {writers} ({expected})", highlight=False)


@topic_app.command("update")
def update(
    name: str = typer.Argument(..., callback=topic_name, help="Topic name."),
    settings: list[str] = SET,
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Change a topic's settings; its writers pick them up without a restart (open batches
    are sealed and uploaded first)."""
    if not settings:
        raise typer.BadParameter("nothing to change: pass --set KEY=VALUE")
    admin = _admin(bootstrap, state_dir)
    changes = parse_settings(settings)
    cfg = admin.update_topic(name, changes)
    err.print(
        f"topic {name} updated: "
        + ", ".join(settings)
        + f" (expected {cfg.get('expected_mbps')} MB/s)"
    )
    if "min_writers" not in changes:  # (a cluster default the user did not touch now)
        return
    try:
        brokers = len(admin.cluster_status().get("brokers", []))
    except AuthorizationError:  # (a topic admin, not a cluster admin: nothing to check)
        brokers = 0
    if brokers and int(cfg.get("min_writers") or 1) > brokers:  # (capped, silently)
        err.print(
            f"[yellow]min_writers {cfg['min_writers']} is more than the cluster's {brokers} "
            "broker(s): the topic gets one writer per broker, no more[/yellow]",
            highlight=False,
        )


@topic_app.command("delete")
def delete(
    name: str = typer.Argument(..., callback=topic_name, help="Topic name."),
    yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation."),
    purge: bool = typer.Option(
        False, "--purge", help="Also delete its objects (every prefix) and notification topic."
    ),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Delete a topic: its writers seal their open batches and stop. With --purge its
    objects and notification topic are deleted too (after the writers' last uploads);
    without, it prints exactly what stays (bucket and prefixes, notification topic)."""
    from memq.cli.retention import delete_topic

    if not yes and not typer.confirm(f"delete topic {name!r}{' and purge it' if purge else ''}?"):
        err.print(f"topic {name} not deleted")
        raise typer.Exit(1)
    delete_topic(_admin(bootstrap, state_dir), name, purge=purge)


@topic_app.command("list")
def list_topics(
    bootstrap: str | None = BOOTSTRAP, state_dir: Path | None = STATE_DIR, as_json: bool = JSON
) -> None:
    """List the cluster's topics with their writers."""
    status = _admin(bootstrap, state_dir).cluster_status()
    topics = status.get("topics", {})
    if as_json:
        typer.echo(json.dumps(topics, indent=2))
        return
    t = Table(title=f"topics of cluster {status.get('cluster')}")
    for col in ("topic", "writers", "expected MB/s", "shortfall MB/s"):
        t.add_column(col)
    for name, info in sorted(topics.items()):
        t.add_row(
            name,
            ", ".join(info.get("writers", [])) or "[red]none[/red]",
            str(info.get("expected_mbps", "-")),
            str(info.get("shortfall_mbps", 0) or ""),
        )
    _console().print(t)


@topic_app.command("describe")
def describe(
    name: str = typer.Argument(..., callback=topic_name, help="Topic name."),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = JSON,
) -> None:
    """A topic's writers, settings (batch.ms, batch.bytes, ring_size, ...), storage,
    notification topic and limits."""
    from memq.cli.retention import kafka_view

    d = _admin(bootstrap, state_dir).describe_topic(name)
    d["notification_kafka"] = kafka = kafka_view(d.get("notification") or {})
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    t = Table(title=f"topic {name}", show_header=False)
    for k in (
        "cluster",
        "writers",
        "expected_mbps",
        "min_writers",
        "shortfall_mbps",
        "unplaced_writers",
        "planned_mbps",
        "load_source",
        "max_block_bytes",
    ):
        if k in d:
            t.add_row(k, ", ".join(d[k]) if isinstance(d[k], list) else str(d[k]))
    for k, v in flatten(d.get("settings") or {}).items():
        if k not in d:
            t.add_row(k, "-" if v is None else str(v))
    t.add_row("storage", json.dumps(d.get("storage")))
    t.add_row("notification", json.dumps(d.get("notification")))
    parts, ret = kafka.get("partitions"), kafka.get("retention_ms")
    why = kafka.get("error") or kafka.get("retention_note")
    t.add_row("notification partitions (Kafka)", str(parts) if parts else f"unknown: {why}")
    t.add_row(
        "notification retention.ms (Kafka)", str(ret) if ret is not None else f"unknown: {why}"
    )
    _console().print(t)


def flatten(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"batch": {"ms": 500}}`` -> ``{"batch.ms": 500}`` (the keys ``--set`` takes)."""
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@cluster_app.command("status")
def status(
    bootstrap: str | None = BOOTSTRAP, state_dir: Path | None = STATE_DIR, as_json: bool = JSON
) -> None:
    """Brokers (address, rack, capacity, load, topics), the governor, assignments, capacity
    used and free, and any shortfall (topics the cluster cannot place)."""
    s = _admin(bootstrap, state_dir).cluster_status()
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    c = _console()
    mode = "standalone broker" if s.get("standalone") else f"governor {s.get('governor')}"
    c.print(
        f"cluster [bold]{s.get('cluster')}[/bold]: {mode}, assignment v{s.get('assignment_version', '-')}"
    )
    t = Table(title="brokers")
    for col in ("broker", "address", "rack", "capacity MB/s", "load MB/s", "topics"):
        t.add_column(col)
    for b in s.get("brokers", []):
        t.add_row(
            b["id"],
            f"{b['host']}:{b['port']}",
            str(b.get("rack") or "-"),
            str(b.get("capacity_mbps", "-")),
            str(b.get("load_mbps", "-")),
            ", ".join(b.get("topics", [])),
        )
    c.print(t)
    if "capacity_mbps" in s:
        c.print(f"capacity {s['capacity_mbps']} MB/s, used {s['used_mbps']}, free {s['free_mbps']}")
    if s.get("shortfall"):
        c.print(f"[red]shortfall (MB/s the cluster cannot place): {s['shortfall']}[/red]")
    if s.get("below_min_writers"):
        c.print(
            f"[yellow]writers short of the topic's min_writers (fewer brokers than it asks "
            f"for): {s['below_min_writers']}: add brokers or lower min_writers[/yellow]"
        )
    if s.get("unplaced"):
        c.print(
            f"[red]writers no broker can take (capacity or buffer memory): {s['unplaced']}: "
            "add brokers, raise capacity_mbps / memory_limit_bytes, or lower expected_mbps"
            "[/red]"
        )
