"""The local stack's client profile: how clients reach a running ``memq dev up`` stack.

``memq dev up`` writes ``<state dir>/client.json`` (state dir: ``MEMQ_STATE_DIR``, default
``.memq``); clients read it when they are given no ``bootstrap.servers`` (and no
``MEMQ_BOOTSTRAP``), or when the brokers they are given are the stack's own. It holds the
brokers, the stack's TLS CA and token (with ``--tls``), and the storage settings readers
need to fetch objects from the stack's S3 (endpoint, region, its throwaway credentials),
which clients pass to their storage readers. Nothing is written to the environment.

Product code reads this file only; the dev stack writes it (:func:`write_profile`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from memq.errors import ConfigError

__all__ = [
    "DEFAULT_STATE_DIR",
    "PROFILE_FILE",
    "StackProfile",
    "default_state_dir",
    "load_profile",
    "write_profile",
]

DEFAULT_STATE_DIR = ".memq"
PROFILE_FILE = "client.json"


def default_state_dir() -> Path:
    """``MEMQ_STATE_DIR``, else ``.memq`` (relative to the working directory)."""
    return Path(os.environ.get("MEMQ_STATE_DIR", DEFAULT_STATE_DIR))


class StackProfile(BaseModel):
    """What a client needs to use a local stack."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    #: The stack's MemQ brokers (host:port).
    bootstrap_servers: list[str]
    #: The cluster name the brokers write (part of every object key).
    cluster: str = "dev"
    #: The bucket the brokers write to.
    bucket: str | None = None
    #: Storage reader settings for the stack's objects: endpoint_url, region and, for the
    #: local S3 server, its throwaway access_key_id / secret_access_key.
    storage: dict[str, Any] = {}
    #: The Kafka the stack's notifications (and audit records) go to.
    kafka_bootstrap: str | None = None
    #: The stack's auditor: dashboard URL and SQLite file.
    auditor_url: str | None = None
    auditor_db: str | None = None
    #: PEM CA of the brokers' certificates (``memq dev up --tls``).
    ssl_ca_location: str | None = None
    #: File holding a client token for brokers with auth enabled (``--tls``).
    auth_token_file: str | None = None

    def matches(self, brokers: list[str]) -> bool:
        """Whether ``brokers`` are (some of) this stack's brokers."""
        return bool(brokers) and set(brokers) <= set(self.bootstrap_servers)

    def token(self) -> str | None:
        if self.auth_token_file is None:
            return None
        try:
            return Path(self.auth_token_file).read_text().strip()
        except OSError as e:
            raise ConfigError(
                f"the local stack's token {self.auth_token_file} is unreadable ({e}): "
                "run `memq dev down` and `memq dev up --tls` again"
            ) from None


def load_profile(state_dir: Path | str | None = None) -> StackProfile | None:
    """The profile of the stack under ``state_dir`` (default: :func:`default_state_dir`),
    or None when no stack was started there."""
    path = Path(state_dir if state_dir is not None else default_state_dir()) / PROFILE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"cannot read the local stack's client profile {path}: {e}") from None
    try:
        return StackProfile.model_validate_json(text)
    except ValidationError as e:
        raise ConfigError(
            f"the local stack's client profile {path} is invalid ({e.errors()[0]['msg']}): "
            "run `memq dev down` and `memq dev up` again"
        ) from None


def write_profile(state_dir: Path, profile: StackProfile | None) -> None:
    """Write (or, with None, remove) the profile of the stack under ``state_dir``."""
    path = state_dir / PROFILE_FILE
    if profile is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(profile.model_dump_json(indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
