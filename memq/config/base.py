"""What every config model shares: the frozen, strict pydantic base and name patterns."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["BROKER_ID", "NAME", "FrozenModel", "MiB"]

#: Topic, cluster and Kafka topic names: 1-249 of A-Z a-z 0-9 . _ -
NAME = r"^[A-Za-z0-9._-]{1,249}$"
#: Broker ids: 1-64 of A-Z a-z 0-9 . -
BROKER_ID = r"^[A-Za-z0-9.-]{1,64}$"
MiB = 1024 * 1024


# Immutable, and an unknown key is an error (never silently ignored). No docstring on
# purpose: configdoc shows an undocumented model's inherited docstring.
class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
