"""MemQ brokers of the local stack: config generation, start, health."""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from memq.audit.emitter import DEFAULT_AUDIT_TOPIC
from memq.devstack import procs
from memq.devstack.services import ServiceState
from memq.errors import DevStackError

__all__ = [
    "BROKER_READY_TIMEOUT",
    "DEV_CHROOT",
    "DEV_CLUSTER",
    "DEV_KAFKA_PARTITIONS",
    "broker_health",
    "dev_broker_config",
    "start_broker",
    "start_component",
]

BROKER_READY_TIMEOUT = 60.0
DEV_CLUSTER = "dev"
#: Partitions the dev brokers' Kafka port shows for every topic (a routing label only).
DEV_KAFKA_PARTITIONS = 64
#: Where the dev brokers keep their cluster in the stack's own ZooKeeper.
DEV_CHROOT = f"/memq/{DEV_CLUSTER}"


def dev_broker_config(
    name: str,
    s3: ServiceState,
    kafka: ServiceState,
    zookeeper: ServiceState | None = None,
    tls: dict[str, str] | None = None,
    chroot: str = DEV_CHROOT,
    kafka_listener_port: int = 0,
) -> dict[str, Any]:
    """A clustered dev broker (through ``zookeeper`` under ``chroot``; standalone without
    it) writing to the stack's S3; with ``tls`` (from :func:`dev_tls`), TLS on both ports
    and token/mTLS auth. ``kafka_listener_port``: the port Kafka producers write to (0:
    a free one)."""
    cfg: dict[str, Any] = {
        "broker_id": name,
        "cluster": DEV_CLUSTER,
        "host": "127.0.0.1",
        "port": 0,
        "http_port": 0,
        # Kafka producers write here (docs/ingest.md); ``kafka`` (the notification
        # Kafka) only holds MemQ's pointers to objects. 64 partitions: the Java client
        # puts one batch per partition (16 KiB by default) in a request, so its defaults
        # make 1 MiB requests here (max.request.size) instead of 64 KiB ones.
        "kafka_listener": {"port": kafka_listener_port, "partitions": DEV_KAFKA_PARTITIONS},
        # HTTP and Kafka-port writes reported to the auditor, as the clients' are here
        "audit": {"topic": DEFAULT_AUDIT_TOPIC},
        "auto_create_topics": True,
        "memory_limit_bytes": 512 << 20,
        "topic_defaults": {
            "storage": {
                "type": "s3",
                "s3": {
                    "bucket": s3.details["bucket"],
                    "endpoint_url": s3.endpoint,
                    "region": s3.details.get("region", "us-east-1"),
                },
            },
            "notification": {"bootstrap_servers": kafka.endpoint, "partitions": 4},
            "batch": {"bytes": 8 << 20, "ms": 1000},
            "ring_size": 3,
        },
    }
    if zookeeper is not None:
        cfg["zookeeper"] = {"connect": zookeeper.endpoint, "chroot": chroot}
    if tls is not None:
        cfg["tls"] = {
            "cert_file": tls["server_cert"],
            "key_file": tls["server_key"],
            "ca_file": tls["ca_file"],
            "client_auth": "optional",
        }
        cfg["auth"] = {
            "enabled": True,
            "token_secret_file": tls["secret_file"],
            # the dev token's principal and the dev client certificate's CN
            "superusers": ["dev", "memq-dev-client"],
        }
    return cfg


def dev_tls(state_dir: Path) -> dict[str, str]:
    """Throwaway CA, certificates, token secret and a 7-day client token under
    ``<state_dir>/tls`` (files readable by the owner only)."""
    import secrets

    from memq.devstack.certs import make_dev_certs
    from memq.security import make_token

    d = state_dir / "tls"
    certs = make_dev_certs(d)
    secret = secrets.token_urlsafe(32)
    secret_file, token_file = d / "token_secret", d / "dev.token"
    for path, text in (
        (secret_file, secret),
        (token_file, make_token(secret.encode(), "dev", 7 * 86400)),
    ):
        path.write_text(text)
        path.chmod(0o600)
    return {
        "ca_file": str(certs.ca_file),
        "server_cert": str(certs.server_cert),
        "server_key": str(certs.server_key),
        "client_cert": str(certs.client_cert),
        "client_key": str(certs.client_key),
        "secret_file": str(secret_file),
        "token_file": str(token_file),
    }


def start_component(
    state_dir: Path,
    name: str,
    command: list[str],
    config: dict[str, Any],
    env: dict[str, str],
    *,
    config_name: str,
    timeout: float = BROKER_READY_TIMEOUT,
) -> tuple[dict[str, Any], procs.ProcessRef, Path, Path]:
    """Start ``memq <command> --config <dir>/<config_name> --ready-file ...`` detached.

    Waits for the ready file (a JSON object); returns it with the process, log and config
    paths. A process that exits first fails fast with the tail of its log.
    """
    d = state_dir.absolute() / name
    d.mkdir(parents=True, exist_ok=True)
    cfg_path = d / config_name
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    cfg_path.chmod(0o600)  # may hold a client token (the auditor's lag client with --tls)
    ready = d / "ready.json"
    ready.unlink(missing_ok=True)
    log = d / f"{name}.log"
    argv = [
        sys.executable,
        "-m",
        "memq.cli.main",
        "--log-level",
        "INFO",
        *command,
        "--config",
        str(cfg_path),
        "--ready-file",
        str(ready),
    ]
    proc, ref = procs.spawn(argv, log, env={**os.environ, **env}, cwd=d)

    def died() -> str | None:
        rc = proc.poll()
        if rc is None:
            return None
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        return f"exited with code {rc}: " + " | ".join(tail)

    try:
        info = procs.wait_for(
            lambda: json.loads(ready.read_text()) if ready.exists() else None,
            timeout=timeout,
            what=name,
            abort=died,
        )
    except DevStackError:
        procs.stop(ref, timeout=5)
        raise
    (d / f"{name}.pid").write_text(f"{ref.pid}\n")
    return info, ref, log, cfg_path


def start_broker(
    state_dir: Path, name: str, config: dict[str, Any], env: dict[str, str]
) -> dict[str, Any]:
    """Start ``memq broker`` as a detached process and wait until it serves."""
    info, ref, log, cfg_path = start_component(
        state_dir, name, ["broker"], config, env, config_name="broker.yaml"
    )
    tls = config.get("tls")
    return {
        "name": name,
        "endpoint": f"127.0.0.1:{info['port']}",
        "http": f"{'https' if tls else 'http'}://127.0.0.1:{info['http_port']}",
        "ingest": f"{'https' if tls else 'http'}://127.0.0.1:{info['http_port']}"
        "/v1/topics/{topic}/records",
        # (``kafka``: the same address, the key older stack files and scripts read)
        **(
            {
                "kafka_listener": f"127.0.0.1:{info['kafka_port']}",
                "kafka": f"127.0.0.1:{info['kafka_port']}",
            }
            if info.get("kafka_port")
            else {}
        ),
        **({"tls_ca": tls["ca_file"]} if tls else {}),
        "pid": ref.pid,
        "start_time": ref.start_time,
        "log": str(log),
        "config": str(cfg_path),
    }


def broker_health(b: dict[str, Any], timeout: float = 2.0) -> tuple[bool, str | None]:
    """(running, problem) from the process and its /readyz."""
    ref = procs.ProcessRef(b["pid"], b.get("start_time"))
    if not procs.is_alive(ref):
        return False, "process is not running"
    ctx = ssl.create_default_context(cafile=b["tls_ca"]) if b.get("tls_ca") else None
    try:
        with urllib.request.urlopen(f"{b['http']}/readyz", timeout=timeout, context=ctx) as r:
            return True, None if r.status == 200 else f"/readyz answered {r.status}"
    except OSError as e:
        return True, f"/readyz: {e}"
