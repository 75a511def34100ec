"""What every config model shares: the frozen, strict pydantic base and name patterns."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from memq.errors import ConfigError

__all__ = ["BROKER_ID", "NAME", "FrozenModel", "MiB", "check_timeout"]

#: Topic, cluster and Kafka topic names: 1-249 of A-Z a-z 0-9 . _ -
NAME = r"^[A-Za-z0-9._-]{1,249}$"
#: Broker ids: 1-64 of A-Z a-z 0-9 . -
BROKER_ID = r"^[A-Za-z0-9.-]{1,64}$"
MiB = 1024 * 1024


# Immutable, and an unknown key is an error (never silently ignored). No docstring on
# purpose: configdoc shows an undocumented model's inherited docstring.
class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


def check_timeout(timeout: float | None) -> None:
    """A client call's ``timeout``: seconds >= 0, or None for no limit (Kafka's -1 is
    refused, not read as "already expired")."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        raise ConfigError(
            f"timeout must be seconds >= 0, or None to wait without limit (Kafka's -1), "
            f"got {timeout!r}"
        )
