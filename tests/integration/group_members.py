"""Consumer group members in their own processes (``consumer_worker.py``), and the
accounting of what they handed out: missing records, duplicates, and the duplicates a
killed member may cause (the records it handed out after its last commit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("consumer_worker.py")
#: (partition, offset, block, record) of a record handed out.
Position = tuple[int, int, int, int]


@dataclass
class Member:
    """One worker process and its event log."""

    name: str
    out: Path
    proc: subprocess.Popen[bytes]
    #: How it ended: None (alive), "closed" (SIGTERM, close()) or "killed" (SIGKILL).
    ended: str | None = None
    #: Records it handed out but had not committed when it was killed.
    uncommitted: list[bytes] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        # Complete lines only: the worker may be writing the last one right now (or was
        # killed in the middle of it: those records were never handed out, to the test).
        lines = self.out.read_text().split("\n")[:-1] if self.out.exists() else []
        return [json.loads(x) for x in lines]

    def assignment(self) -> set[int]:
        a = [e["assignment"] for e in self.events() if "assignment" in e]
        return set(a[-1]) if a else set()

    def records(self) -> list[tuple[Position, bytes]]:
        return [
            ((p, o, b, r), bytes.fromhex(v))
            for e in self.events()
            if "got" in e
            for p, o, b, r, v in e["got"]
        ]

    def closed(self) -> bool:
        return any("closed" in e for e in self.events())

    def terminate(self, timeout: float = 60) -> None:
        """Leave gracefully: SIGTERM, which the worker handles with close()."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout) == 0, f"{self.name} exited with {self.proc.returncode}"
        assert self.closed(), f"{self.name} did not close its consumer"
        self.ended = "closed"

    def not_committed(self) -> list[bytes]:
        """The records it handed out after its last commit."""
        out: list[bytes] = []
        for e in self.events():
            if "committed" in e:
                out = []
            out += [bytes.fromhex(v) for *_, v in e.get("got", [])]
        return out

    def kill(self) -> None:
        """Die without a goodbye; remember what it held uncommitted."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.ended = "killed"
        self.uncommitted = self.not_committed()


def spawn(
    bootstrap: str,
    topic: str,
    group: str,
    out: Path,
    *,
    protocol: str = "classic",
    session_ms: int | None = None,
    delay: float = 0.0,
) -> Member:
    args = [sys.executable, str(WORKER), bootstrap, topic, group, str(out)]
    args += ["--protocol", protocol, "--delay", str(delay)]
    if session_ms is not None:
        args += ["--session-ms", str(session_ms)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    with out.with_suffix(".log").open("ab") as log:  # its stderr: the consumer's log
        proc = subprocess.Popen(args, env=env, stderr=log)
    return Member(out.stem, out, proc)


def stop_all(members: Iterable[Member]) -> None:
    for m in members:
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait(30)


@dataclass
class Accounting:
    """What a group handed out, against what was acknowledged."""

    #: Every record handed out, with its number of copies.
    delivered: Counter[bytes]
    #: Acknowledged records never handed out.
    missing: set[bytes]
    #: Copies beyond the first, per record.
    duplicates: Counter[bytes]
    #: Per record, how many killed members held it uncommitted: the most copies beyond
    #: the first it may have (each killed member's records after its last commit are
    #: read again by the partition's next owner).
    allowed: Counter[bytes]

    @property
    def unexplained(self) -> Counter[bytes]:
        """Duplicates no killed member accounts for (e.g. after a graceful leave)."""
        return self.duplicates - self.allowed


def account(members: Iterable[Member], acked: set[bytes]) -> Accounting:
    members = list(members)
    delivered: Counter[bytes] = Counter(v for m in members for _, v in m.records())
    allowed: Counter[bytes] = Counter(v for m in members if m.ended == "killed"
                                      for v in set(m.uncommitted))  # fmt: skip
    return Accounting(
        delivered=delivered,
        missing=acked - set(delivered),
        duplicates=Counter({v: n - 1 for v, n in delivered.items() if n > 1}),
        allowed=allowed,
    )
