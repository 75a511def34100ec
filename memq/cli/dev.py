"""``memq dev``: the local stack of real servers (S3, Kafka protocol, ZooKeeper)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from memq.cli.options import STATE_DIR

app = typer.Typer(
    help="Run the local stack: moto S3, Apache Kafka (KRaft) and ZooKeeper on 127.0.0.1.",
    no_args_is_help=True,
)
out = Console()
err = Console(stderr=True)


@app.command()
def up(
    state_dir: Path | None = STATE_DIR,
    s3_port: int | None = typer.Option(
        None, min=1, max=65535, help="Fixed port for S3 (default: a free one)."
    ),
    notification_kafka_port: int | None = typer.Option(
        None,
        "--notification-kafka-port",
        min=1,
        max=65535,
        help="Fixed port for MemQ's internal notification Kafka, which holds the pointers "
        "to stored objects (default: a free one). Not where Kafka producers write: that "
        "is --kafka-listener-port.",
    ),
    kafka_port: int | None = typer.Option(
        None,
        "--kafka-port",
        min=1,
        max=65535,
        hidden=True,
        help="The old name of --notification-kafka-port.",
    ),
    kafka_listener_port: int | None = typer.Option(
        None,
        "--kafka-listener-port",
        min=1,
        max=65535,
        help="Fixed Kafka-protocol port of the MemQ brokers: what Kafka producers use as "
        "bootstrap.servers. broker-1 gets this port, broker-2 the next one, and so on "
        "(default: free ones, new on every up).",
    ),
    zk_port: int | None = typer.Option(
        None, min=1, max=65535, help="Fixed port for ZooKeeper (default: a free one)."
    ),
    brokers: int | None = typer.Option(
        None,
        min=0,
        max=16,
        show_default="1",
        help="MemQ brokers to start, clustered through the ZooKeeper (0: servers only). On "
        "a running stack with another count: an error saying what to do.",
    ),
    auditor: bool = typer.Option(
        True, "--auditor/--no-auditor", help="Start the auditor and its dashboard."
    ),
    auditor_port: int | None = typer.Option(
        None, min=1, max=65535, help="Fixed port for the audit dashboard (default: a free one)."
    ),
    tls: bool = typer.Option(
        False,
        "--tls",
        help="TLS and authentication on the brokers: a throwaway CA, certificates and a "
        "client token under <state dir>/tls, which local clients pick up by themselves.",
    ),
) -> None:
    """Start the servers (skipping any named by MEMQ_S3_ENDPOINT, MEMQ_KAFKA_BOOTSTRAP,
    MEMQ_ZK_CONNECT), wait until each is ready, then start the MemQ broker(s), clustered
    through the ZooKeeper (`memq topic ...` works) with auto_create_topics on, and the
    auditor (dashboard URL in the table; a new Kafka gets a new audit database). Clients
    (memq produce, memq.Producer) find them through the state dir when no bootstrap is
    given, and then emit audit records by default; the brokers report the records
    written over HTTP and their Kafka port (docs/audit.md)."""
    from memq.devstack import DevStack

    if kafka_port is not None:
        if notification_kafka_port is not None and notification_kafka_port != kafka_port:
            raise typer.BadParameter(
                "--kafka-port is the old name of --notification-kafka-port: give one of them",
                param_hint="'--kafka-port'",
            )
        err.print(
            f"note: --kafka-port {kafka_port} pins MemQ's internal notification Kafka (its "
            "name is now --notification-kafka-port); Kafka producers write to the brokers' "
            "Kafka port: --kafka-listener-port"
        )
        notification_kafka_port = kafka_port
    count = 1 if brokers is None else brokers
    last = (kafka_listener_port or 0) + count - 1
    if kafka_listener_port is not None and last > 65535:
        raise typer.BadParameter(
            f"{kafka_listener_port} with {count} broker{'s' if count != 1 else ''} needs "
            f"ports up to {last} (one per broker, consecutive): pick a lower port",
            param_hint="'--kafka-listener-port'",
        )
    s = DevStack(state_dir)
    t0 = time.monotonic()
    with err.status("starting the local stack...") as status:
        state = s.up(
            ports={
                "s3": s3_port,
                "kafka": notification_kafka_port,
                "kafka_listener": kafka_listener_port,
                "zookeeper": zk_port,
                "auditor": auditor_port,
            },
            progress=status.console.log,
            brokers=brokers,
            auditor=auditor,
            tls=tls,
        )
    if tls:
        t = state.extra["tls"]
        err.print(
            f"TLS on: CA {t['ca_file']}, client token in {t['token_file']} (other clients: "
            f"-X ssl.ca.location={t['ca_file']} -X auth.token=$(cat {t['token_file']}))"
        )
    err.print(f"local stack up in {time.monotonic() - t0:.1f} s (state: {state.state_dir})")
    _print_table(s)


#: How ``status`` names each server: the notification Kafka is not where records go.
_LABELS = {"kafka": "kafka (internal notifications)"}


def _kafka_listeners(brokers: list[dict[str, Any]]) -> dict[str, str]:
    """Each broker's Kafka port (where Kafka producers write), by broker name."""
    out = {}
    for b in brokers:
        addr = b.get("kafka_listener") or b.get("kafka")  # (stack files before the new key)
        if addr:
            out[b["name"]] = addr
    return out


def _print_table(s: object) -> None:
    from memq.devstack import DevStack

    assert isinstance(s, DevStack)
    health = s.status()
    state = s.load()
    if not health or state is None:
        out.print(f"no local stack under {s.state_dir}: run `memq dev up`")
        raise typer.Exit(1)
    t = Table(title=f"MemQ local stack ({state.state_dir})")
    for col in ("service", "endpoint", "pid", "health"):
        t.add_column(col)
    for h in health:
        mark = "[green]healthy[/green]" if h.healthy else f"[red]{h.problem}[/red]"
        pid = "external" if h.external else str(h.pid)
        t.add_row(_LABELS.get(h.name, h.name), h.endpoint, pid, mark)
    out.print(t)
    out.print(f"S3 bucket: {state.bucket}    ZooKeeper: {state.zk_connect}")
    if state.extra.get("auditor"):
        out.print(f"Audit dashboard: {state.extra['auditor']['url']}")
    brokers = state.extra.get("brokers", [])
    if brokers:
        memq = ", ".join(f"{b['endpoint']} ({b['name']})" for b in brokers)
        out.print(f"MemQ clients (memq produce/consume, memq.Producer) use: {memq}", soft_wrap=True)
    listeners = _kafka_listeners(brokers)
    if listeners:
        shown = ", ".join(f"{addr} ({name})" for name, addr in listeners.items())
        out.print(f"Kafka producers write to MemQ at (bootstrap.servers): {shown}", soft_wrap=True)
    out.print(
        f"MemQ's internal notification Kafka (pointers to stored objects; records produced "
        f"there are not in MemQ): {state.kafka_bootstrap}",
        soft_wrap=True,
    )
    if not all(h.healthy for h in health):
        raise typer.Exit(1)


@app.command()
def status(
    state_dir: Path | None = STATE_DIR,
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Show each server, its endpoint, pid and live health (exit 1 if any is unhealthy)."""
    from memq.devstack import DevStack

    s = DevStack(state_dir)
    if not as_json:
        _print_table(s)
        return
    state = s.load()
    health = {h.name: h for h in s.status()}
    if state is None:
        out.print_json(json.dumps({"running": False, "state_dir": str(s.state_dir)}))
        raise typer.Exit(1)
    notification = {
        **health["kafka"].as_dict(),
        "bootstrap": state.kafka_bootstrap,
        "role": "MemQ's internal notification queue (pointers to stored objects); Kafka "
        "producers write to kafka_listener.bootstrap_servers",
    }
    listeners = _kafka_listeners(state.extra.get("brokers", []))
    doc = {
        "running": True,
        "state_dir": state.state_dir,
        "healthy": all(h.healthy for h in health.values()),
        "s3": {
            **health["s3"].as_dict(),
            "bucket": state.bucket,
            "region": state.s3.details.get("region"),
        },
        "kafka": notification,
        "notification_kafka": notification,
        "kafka_listener": (
            {
                "bootstrap_servers": ",".join(listeners.values()),
                "brokers": listeners,
                "role": "MemQ's Kafka port: Kafka producers write here (bootstrap.servers)",
            }
            if listeners
            else None
        ),
        "zookeeper": {**health["zookeeper"].as_dict(), "connect": state.zk_connect},
        "brokers": [
            {
                **b,
                **({"kafka_listener": listeners[b["name"]]} if b["name"] in listeners else {}),
                **health[b["name"]].as_dict(),
            }
            for b in state.extra.get("brokers", [])
            if b["name"] in health
        ],
        "auditor": (
            {**state.extra["auditor"], **health["auditor"].as_dict()}
            if state.extra.get("auditor") and "auditor" in health
            else None
        ),
    }
    typer.echo(json.dumps(doc, indent=2))
    if not doc["healthy"]:
        raise typer.Exit(1)


@app.command()
def down(
    state_dir: Path | None = STATE_DIR,
    timeout: float = typer.Option(
        10.0, min=0, help="Seconds to wait after SIGTERM before SIGKILL."
    ),
) -> None:
    """Stop every process the stack started (and only those)."""
    from memq.devstack import DevStack

    s = DevStack(state_dir)
    stopped = s.down(timeout=timeout, progress=err.print)
    err.print("local stack stopped" if stopped else f"no local stack under {s.state_dir}")


@app.command()
def logs(
    name: str = typer.Argument("all", help="s3, kafka, zookeeper, a broker name, or all."),
    state_dir: Path | None = STATE_DIR,
    lines: int = typer.Option(40, "--lines", "-n", min=0, help="Lines to show from the end."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
) -> None:
    """Show the log of one component (or the tail of all of them)."""
    from memq.devstack import DevStack

    s = DevStack(state_dir)
    names = s.log_names()
    if s.load() is None:
        err.print(
            f"no local stack running under {s.state_dir}: the logs its last run left",
            soft_wrap=True,
            highlight=False,
        )
    if name != "all" and name not in names:
        raise typer.BadParameter(f"{name!r} has no log here: one of all, {', '.join(names)}")
    chosen = names if name == "all" else [name]
    paths = {n: s.log_path(n) for n in chosen}
    for n, p in paths.items():
        if len(paths) > 1:
            out.rule(n)
        text = p.read_text(errors="replace").splitlines() if p.exists() else []
        for line in text[len(text) - lines :] if lines else []:
            typer.echo(line)
    if follow:
        handles = {n: open(p, errors="replace") for n, p in paths.items()}  # noqa: SIM115
        for h in handles.values():
            h.seek(0, 2)
        try:
            while True:
                idle = True
                for n, h in handles.items():
                    for line in h.readlines():
                        idle = False
                        typer.echo(f"[{n}] {line.rstrip()}" if len(handles) > 1 else line.rstrip())
                if idle:
                    time.sleep(0.2)
        finally:
            for h in handles.values():
                h.close()
