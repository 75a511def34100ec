"""ACLs in ZooKeeper: one JSON node ``<chroot>/acls`` ``{"entries": [...]}`` (kazoo).

Every broker watches the node and swaps its :class:`memq.acl.AclTable` on change;
``memq acl add|remove`` go through any broker, which edits the node with a version
check (a concurrent edit is retried, never lost).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memq.acl import AclEntry, add_entry, remove_entry
from memq.errors import CoordinationError, InvalidRequestError
from memq.governor.zk import ZkClient

__all__ = ["acl_path", "edit_acls", "parse_acls", "watch_acls"]


def acl_path(root: str) -> str:
    return f"{root}/acls"


def parse_acls(raw: bytes | None) -> list[AclEntry]:
    if not raw:
        return []
    try:
        doc = json.loads(raw)
        return [AclEntry.model_validate(e) for e in doc.get("entries", [])]
    except (ValueError, TypeError, AttributeError) as e:
        raise CoordinationError(f"the ACL node holds invalid data: {e}") from e


def _dumps(entries: list[AclEntry]) -> bytes:
    data = {"entries": [e.model_dump(mode="json") for e in entries]}
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def watch_acls(zk: ZkClient, root: str, on_change: Callable[[list[AclEntry]], None]) -> None:
    """Call ``on_change`` with the entries now and on every change of the node."""
    path = acl_path(root)
    zk.ensure_path(path)

    def changed(data: bytes | None, _stat: Any, *_event: Any) -> bool:
        try:
            on_change(parse_acls(data))
        except CoordinationError:
            on_change([])  # unreadable ACLs grant nothing (superusers can repair them)
        return True

    zk.DataWatch(path, changed)


def edit_acls(zk: ZkClient, root: str, op: str, entry: AclEntry | None) -> list[AclEntry]:
    """``op`` = add | remove | list; returns the entries in force afterwards."""
    from kazoo.exceptions import BadVersionError

    path = acl_path(root)
    zk.ensure_path(path)
    for _ in range(10):
        raw, stat = zk.get(path)
        entries = parse_acls(raw)
        if op == "list":
            return entries
        if entry is None:
            raise InvalidRequestError(f"acl {op} needs principal, topic and ops")
        new = add_entry(entries, entry) if op == "add" else remove_entry(entries, entry)
        try:
            zk.set(path, _dumps(new), version=stat.version)
            return new
        except BadVersionError:
            continue  # someone else edited them: read again and reapply
    raise CoordinationError("the ACLs kept changing concurrently: retry")
