"""Per-topic access control lists (pure: no I/O).

An entry grants a principal some operations on the topics a pattern matches:

- ``principal``: a token subject or client-certificate common name; ``*`` is any
  authenticated principal;
- ``topic``: a topic name, a prefix ending in ``*`` (``logs.*``), or ``*`` for every
  topic. Cluster-wide admin requests (topic list, cluster status, ACL changes) need
  ``admin`` on ``*``;
- ``ops``: ``produce`` (WRITE), ``consume`` (reading the topic's metadata: where its
  objects and notifications are), ``admin`` (create, update, delete the topic).
  ``produce`` also allows reading the topic's metadata (producers need its writers).

Superusers (``auth.superusers``) may do everything. Nothing is allowed by default:
with authentication on, a principal without an entry can only PING and authenticate.
Brokers enforce ACLs only when ``auth.enabled``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memq.errors import AuthorizationError, InvalidRequestError

__all__ = ["OPS", "AclEntry", "AclTable", "Op"]

Op = Literal["produce", "consume", "admin"]
OPS: tuple[Op, ...] = ("produce", "consume", "admin")


class AclEntry(BaseModel):
    """``principal`` may do ``ops`` on topics matching ``topic``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Token subject or certificate CN; ``*``: any authenticated principal.
    principal: str = Field(min_length=1, max_length=256)
    #: Topic name, prefix ending in ``*``, or ``*``.
    topic: str = Field(min_length=1, max_length=250, pattern=r"^(\*|[A-Za-z0-9._-]{1,249}\*?)$")
    #: Operations granted.
    ops: tuple[Op, ...] = Field(min_length=1)

    def matches(self, principal: str, topic: str) -> bool:
        if self.principal not in ("*", principal):
            return False
        if self.topic == "*":
            return True
        if self.topic.endswith("*"):
            return topic != "*" and topic.startswith(self.topic[:-1])
        return topic == self.topic


class AclTable:
    """The entries in force and the superusers; answers "may P do OP on T"."""

    def __init__(self, entries: Iterable[AclEntry] = (), superusers: Iterable[str] = ()) -> None:
        self.entries = tuple(entries)
        self.superusers = frozenset(superusers)

    def allowed(self, principal: str | None, op: Op, topic: str) -> bool:
        if principal is None:
            return False
        if principal in self.superusers:
            return True
        for e in self.entries:
            if e.matches(principal, topic) and (
                op in e.ops or (op == "consume" and "produce" in e.ops)
            ):
                return True
        return False

    def check(self, principal: str | None, op: Op, topic: str) -> None:
        """Raise :class:`AuthorizationError` (naming what to grant) unless allowed."""
        if not self.allowed(principal, op, topic):
            what = "the cluster (topic *)" if topic == "*" else f"topic {topic!r}"
            raise AuthorizationError(
                f"principal {principal!r} may not {op} on {what}: ask an admin for "
                f"`memq acl add --principal {shlex.quote(str(principal))} --topic "
                f"{shlex.quote(topic)} --op {op}`"  # (an unquoted * is a shell glob)
            )


def add_entry(entries: list[AclEntry], new: AclEntry) -> list[AclEntry]:
    """Entries with ``new``'s ops merged into an entry for the same principal and topic."""
    out, merged = [], False
    for e in entries:
        if (e.principal, e.topic) == (new.principal, new.topic):
            ops = tuple(o for o in OPS if o in e.ops or o in new.ops)
            out.append(AclEntry(principal=e.principal, topic=e.topic, ops=ops))
            merged = True
        else:
            out.append(e)
    return out if merged else [*out, new]


def remove_entry(entries: list[AclEntry], gone: AclEntry) -> list[AclEntry]:
    """Entries without ``gone``'s ops for its principal and topic (emptied entries dropped).

    InvalidRequestError when no entry grants any of them: a mistyped principal or topic
    must not look like a revoked grant."""
    if not any(
        (e.principal, e.topic) == (gone.principal, gone.topic) and set(e.ops) & set(gone.ops)
        for e in entries
    ):
        raise InvalidRequestError(
            f"no ACL entry grants {gone.principal!r} {'/'.join(gone.ops)} on {gone.topic!r}: "
            "nothing removed (memq acl list shows the entries)"
        )
    out = []
    for e in entries:
        if (e.principal, e.topic) == (gone.principal, gone.topic):
            ops = tuple(o for o in e.ops if o not in gone.ops)
            if ops:
                out.append(AclEntry(principal=e.principal, topic=e.topic, ops=ops))
        else:
            out.append(e)
    return out
