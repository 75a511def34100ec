"""The local stack's auditor (``memq audit serve``): config, start, health."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

from memq.audit.emitter import DEFAULT_AUDIT_TOPIC
from memq.devstack import procs
from memq.devstack.brokers import start_component
from memq.devstack.services import ServiceState

__all__ = [
    "AUDITOR",
    "DEV_GRACE_PERIOD_S",
    "auditor_db",
    "auditor_health",
    "dev_auditor_config",
    "remove_auditor_db",
    "start_auditor",
]

AUDITOR = "auditor"
#: Short, so a loss shows on the dev dashboard within a minute.
DEV_GRACE_PERIOD_S = 60


def auditor_db(state_dir: Path) -> Path:
    """The dev auditor's SQLite file."""
    return state_dir.absolute() / AUDITOR / "audit.db"


def remove_auditor_db(state_dir: Path) -> bool:
    """Delete the dev auditor's SQLite file (with its WAL): its figures and Kafka offsets
    belong to a Kafka that is gone. True when there was one."""
    db = auditor_db(state_dir)
    existed = db.exists()
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        path.unlink(missing_ok=True)
    return existed


def dev_auditor_config(
    state_dir: Path,
    kafka: ServiceState,
    port: int = 0,
    brokers: list[str] | None = None,
    client: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The dev auditor's settings; with ``brokers`` (and their ``client`` settings)
    it measures consumer-group lag every 5 s."""
    lag: dict[str, Any] = {}
    if brokers:
        lag = {"bootstrap_servers": ",".join(brokers), "client": client or {}, "interval_s": 5}
    return {
        "lag": lag,
        "kafka": {"bootstrap_servers": kafka.endpoint},
        "audit_topic": DEFAULT_AUDIT_TOPIC,
        "db_path": str(auditor_db(state_dir)),
        "http_host": "127.0.0.1",
        "http_port": port,
        "grace_period_s": DEV_GRACE_PERIOD_S,
        "metrics_interval_s": 10,
    }


def start_auditor(
    state_dir: Path,
    kafka: ServiceState,
    env: dict[str, str],
    port: int | None = None,
    brokers: list[str] | None = None,
    client: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Start ``memq audit serve`` for the stack and wait until it serves."""
    cfg = dev_auditor_config(state_dir, kafka, port or 0, brokers, client)
    info, ref, log, cfg_path = start_component(
        state_dir, AUDITOR, ["audit", "serve"], cfg, env, config_name="auditor.yaml"
    )
    return {
        "name": AUDITOR,
        "url": info["url"],
        "endpoint": info["url"].removeprefix("http://"),
        "pid": ref.pid,
        "start_time": ref.start_time,
        "log": str(log),
        "config": str(cfg_path),
        "db_path": cfg["db_path"],
    }


def auditor_health(a: dict[str, Any], timeout: float = 2.0) -> tuple[bool, str | None]:
    """(running, problem) from the process and its /healthz."""
    ref = procs.ProcessRef(a["pid"], a.get("start_time"))
    if not procs.is_alive(ref):
        return False, "process is not running"
    try:
        with urllib.request.urlopen(f"{a['url']}/healthz", timeout=timeout) as r:
            return True, None if r.status == 200 else f"/healthz answered {r.status}"
    except OSError as e:
        return True, f"/healthz: {e}"
