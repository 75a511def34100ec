"""``memq audit``: the auditor service and the loss report."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memq.cli.options import STATE_DIR, grace_period, http_url, since_window, topic_name
from memq.client.profile import load_profile
from memq.errors import ConfigError, MemqError

app = typer.Typer(
    help="Audit: prove every acked record was consumed (auditor service, dashboard, report).",
    no_args_is_help=True,
)
out = Console(width=max(Console().width, 120))
err = Console(stderr=True)

#: Exit codes of ``memq audit report``.
EXIT_OK, EXIT_LOSS, EXIT_NO_DATA = 0, 1, 2


@app.command()
def serve(
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="Auditor YAML (kafka.bootstrap_servers, audit_topic, db_path, http_host, "
        "http_port, grace_period_s, ...). Default: the local stack's Kafka.",
    ),
    port: int | None = typer.Option(None, help="Override http_port (0: any free port)."),
    db_path: Path | None = typer.Option(None, help="Override db_path (the SQLite file)."),
    ready_file: Path | None = typer.Option(
        None, help="Write {url, port} as JSON here once serving (for supervisors)."
    ),
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Consume the audit topic into SQLite and serve the dashboard (/), the JSON API
    (/api/...), /healthz and /metrics until SIGTERM/SIGINT. Env overrides:
    MEMQ_AUDITOR__<KEY>=value."""
    from memq.audit.config import load_auditor_config
    from memq.run.auditor import run_auditor

    overrides: dict[str, Any] = {}
    if config is None:
        profile = load_profile(state_dir)
        if profile is None or not profile.kafka_bootstrap:
            raise ConfigError(
                "no --config and no local stack: pass --config auditor.yaml or run `memq dev up`"
            )
        overrides["kafka"] = {"bootstrap_servers": profile.kafka_bootstrap}
        if profile.auditor_db:
            overrides["db_path"] = profile.auditor_db
    if port is not None:
        overrides["http_port"] = port
    if db_path is not None:
        overrides["db_path"] = str(db_path)
    run_auditor(load_auditor_config(config, data=overrides), ready_file)


def _auditor_url(url: str | None, state_dir: Path | None) -> str:
    if url:
        return url.rstrip("/")
    profile = load_profile(state_dir)
    if profile is not None and profile.auditor_url:
        return profile.auditor_url
    return "http://127.0.0.1:8080"


def _get(url: str, path: str, params: dict[str, Any]) -> Any:
    q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    # An auditor with TLS/auth: MEMQ_SSL_CA_LOCATION and MEMQ_AUTH_TOKEN (as the admin CLI).
    token = os.environ.get("MEMQ_AUTH_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    ca = os.environ.get("MEMQ_SSL_CA_LOCATION")
    ctx = ssl.create_default_context(cafile=ca) if ca else None
    try:
        req = urllib.request.Request(f"{url}{path}?{q}", headers=headers)
        with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read()).get("error", "")
        except ValueError:
            detail = ""
        raise MemqError(f"auditor at {url} answered {e.code}: {detail or e.reason}") from None
    except OSError as e:
        raise MemqError(
            f"cannot reach the auditor at {url} ({e}): start it (`memq audit serve`, "
            "`memq dev up`) or pass --url, or read its file with --db"
        ) from None


def _fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


@app.command()
def report(
    topic: str = typer.Option(
        ..., "--topic", "-t", callback=topic_name, help="Topic to report on."
    ),
    since: str = typer.Option(
        "1h", callback=since_window, help="Window start: 10m, 2h, 1d, ISO-8601 or epoch ms."
    ),
    group: str | None = typer.Option(None, "--group", "-g", help="Only this consumer group."),
    grace: str | None = typer.Option(
        None,
        callback=grace_period,
        help="Override the grace period (e.g. 0s: count every unconsumed block).",
    ),
    strict: bool = typer.Option(
        False,
        help="Every block acked in the window must be consumed by each group (groups that "
        "read from the beginning). Default: from the oldest block a group consumed.",
    ),
    url: str | None = typer.Option(
        None,
        help="Auditor URL (default: the local stack's, else http://127.0.0.1:8080).",
        callback=http_url,
    ),
    db: Path | None = typer.Option(
        None,
        help="Read this auditor SQLite file directly instead of asking a running auditor "
        "(with the grace period that auditor served with).",
    ),
    limit: int = typer.Option(20, min=0, help="Missing blocks to list per group."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    state_dir: Path | None = STATE_DIR,
) -> None:
    """Produced, consumed, missing, pending, duplicates (handed out twice), duplicates the
    consumers dropped, mismatches and latency for a topic. Exit 0 when nothing is
    missing, 1 when records are missing or mismatched, 2 when there is no audit data for
    the topic (no block acked in the window, or no consumer group reported consuming it),
    or --group names a group that consumed none of it (nothing can be proven). A table
    per topic, or one group after another where the terminal is too narrow for it (names
    and figures are never cut)."""
    params = {
        "since": since,
        "topic": topic,
        "group": group,
        "grace_s": grace,
        "strict": "1" if strict else None,
    }
    if db is not None:
        doc, missing = _from_db(db, params, limit, strict)
    else:
        base = _auditor_url(url, state_dir)
        doc = _get(base, "/api/summary", params)
        missing = {
            g["group"]: _get(
                base,
                "/api/missing",
                {**params, "group": g["group"], "limit": limit},
            )["blocks"]
            for t in doc["topics"]
            for g in t["groups"]
            if g["missing_blocks"]
        }
    t = doc["topics"][0] if doc["topics"] else None
    if as_json:
        typer.echo(json.dumps({**doc, "missing": missing}, indent=2))
    else:
        _print(doc, t, missing)
    if t is None or t["produced_blocks"] == 0:  # nothing acked in the window: nothing proven
        raise typer.Exit(EXIT_NO_DATA)
    if not t["groups"]:  # acked, and no consumer reported: a dead consumer is not "ok"
        err.print(
            f"no consumer group has reported consuming topic {topic!r}: nothing is proven "
            "(do its consumers run with audit.enable=true and a group.id?)",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(EXIT_NO_DATA)
    if group is not None and all(g["status"] == "unconsumed" for g in t["groups"]):
        err.print(
            f"group {group!r} has consumed nothing of topic {topic!r} (that the auditor "
            "knows of): nothing is proven for it; check the name (memq group list)",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(EXIT_NO_DATA)
    if any(g["missing_blocks"] or g["mismatches"] for g in t["groups"]):
        raise typer.Exit(EXIT_LOSS)
    if stale := _ingest_problem(doc):  # "ok" from figures that stopped moving is no proof
        err.print(
            f"the auditor is not reading its audit topic ({stale}): these figures are not "
            "current, nothing is proven; see `memq audit serve`'s log and /healthz",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(EXIT_NO_DATA)


def _ingest_problem(doc: dict[str, Any]) -> str | None:
    """Why the serving auditor's intake is failing or stalled (None: it is fine, or the
    figures come from a file: --db)."""
    ingest = doc.get("ingest") or {}
    if ingest.get("error"):
        return str(ingest["error"]).splitlines()[0]
    idle = ingest.get("seconds_since_loop")
    if idle is not None and idle > 30:
        return f"no ingest loop for {idle:.0f} s"
    return None


def _from_db(
    db: Path, params: dict[str, Any], limit: int, strict: bool
) -> tuple[dict[str, Any], Any]:
    """The report's figures straight from an auditor SQLite file (no server needed)."""
    from memq.audit.config import AuditKafkaConfig, AuditorConfig
    from memq.audit.service import Auditor

    if not db.exists():
        raise ConfigError(f"audit database {db} does not exist")
    # Only the query side is used: nothing is started.
    cfg = AuditorConfig(kafka=AuditKafkaConfig(bootstrap_servers="unused:0"), db_path=db)
    auditor = Auditor(cfg)
    try:
        served = auditor.store.meta("grace_period_s")
        if params.get("grace_s") is None and served is not None:  # the auditor's own grace
            params = {**params, "grace_s": f"{float(served):g}s"}
        doc = auditor.summary(params)
        doc.pop("ingest", None)  # (nothing ingests here: the file is read as it is)
        missing = {
            g["group"]: auditor.store.missing(
                params["topic"],
                g["group"],
                now_ms=doc["now_ms"],
                since_ms=doc["since_ms"],
                grace_ms=int(doc["grace_period_s"] * 1000),
                limit=limit,
                strict=strict,
            )
            for t in doc["topics"]
            for g in t["groups"]
            if g["missing_blocks"]
        }
    finally:
        auditor.executor.shutdown(wait=False)
        auditor.store.close()
    return doc, missing


def print_report(console: Console, doc: dict[str, Any], missing: dict[str, Any]) -> None:
    """The report of ``doc`` (an /api/summary answer for one topic) on ``console``."""
    _print(doc, doc["topics"][0] if doc["topics"] else None, missing, console)


_REPORT_COLUMNS = ("group", "consumed", "missing", "pending", "expired", "duplicates",
                   "dups dropped", "mismatches", "unaudited", "p50", "p99", "status")  # fmt: skip


def _print(
    doc: dict[str, Any], t: dict[str, Any] | None, missing: dict[str, Any], out: Console = out
) -> None:
    window = f"since {_when(doc['since_ms'])} UTC, grace {doc['grace_period_s']:g} s"
    if doc.get("strict"):
        window += ", strict"
    if t is None or (t["produced_blocks"] == 0 and not t["groups"]):
        out.print(f"[yellow]no audit records for this topic ({window})[/yellow]")
        return
    if t["produced_blocks"] == 0:
        out.print(
            f"[yellow]no block of {escape(t['topic'])} was acked in this window ({window}): "
            "nothing is proven; widen it with --since[/yellow]"
        )
    out.print(
        f"[bold]{t['topic']}[/bold]: {t['produced_records']:,} records in "
        f"{t['produced_blocks']:,} blocks acked ({window})"
    )
    if not t["groups"]:
        out.print("[yellow]no consumer group has reported consuming this topic[/yellow]")
        return
    colour = {"ok": "green", "warn": "yellow", "missing": "red", "unconsumed": "dim"}
    rows = [
        (
            escape(g["group"]),
            f"{g['consumed_records']:,}",
            f"{g['missing_records']:,}",
            f"{g['pending_records']:,}",
            f"{g['expired_records']:,}",  # never handed out, past the topic's retention
            f"{g['duplicate_records']:,} ({g['duplicate_blocks']} blocks)",
            f"{g['dropped_duplicate_records']:,} ({g['dropped_duplicate_blocks']} copies)",
            str(g["mismatches"]),
            f"{g['unaudited_records']:,}",
            _fmt_ms(g["latency_p50_ms"]),
            _fmt_ms(g["latency_p99_ms"]),
            f"[{colour.get(g['status'], 'white')}]{g['status']}[/]",
        )
        for g in t["groups"]
    ]
    table = Table()
    for col in _REPORT_COLUMNS:
        # (figures and names are never cut: a terminal too narrow for them all gets
        # one group after another instead)
        table.add_column(col, justify="left" if col in {"group", "status"} else "right",
                         no_wrap=True)  # fmt: skip
    for row in rows:
        table.add_row(*row)
    if out.measure(table, options=out.options.update_width(1 << 16)).maximum <= out.width:
        out.print(table)
    else:
        for row in rows:
            out.print(f"[bold]{row[0]}[/bold]")
            for col, value in zip(_REPORT_COLUMNS[1:], row[1:], strict=True):
                out.print(f"  {col + ':':<14}{value}")
    for g in t["groups"]:  # what makes a status other than ok, in words
        if g.get("reason") and g["status"] != "ok":
            out.print(
                f"[{colour.get(g['status'], 'white')}]{g['status']}[/] for group "
                f"{escape(g['group'])}: {escape(g['reason'])}"
            )
    for grp, blocks in missing.items():
        out.print(f"[red]missing for group {escape(grp)}[/red] (first {len(blocks)}):")
        for b in blocks:
            out.print(
                f"  producer {b['producer_id']} epoch {b['epoch']} sequence {b['sequence']}: "
                f"{b['records']} records acked {_when(b['acked_ms'])} UTC -> "
                f"{escape(b['object_key'] or '(object unknown: acks=' + str(b['acks']) + ')')}"
            )
