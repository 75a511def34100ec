"""Shared benchmark plumbing: a private local stack, brokers as subprocesses, results I/O."""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memq.devstack import DevStack, StackState
from memq.devstack.brokers import start_broker
from memq.devstack.procs import ProcessRef, stop

RESULTS = Path(__file__).parent / "results"


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def write_result(doc: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def spread(values: list[float]) -> dict[str, float]:
    """min/median/max of repeated measurements."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def log_records(n: int, size: int, seed: int = 1) -> list[bytes]:
    """``n`` log-like values of ``size`` bytes (partly compressible, like real logs)."""
    rng = random.Random(seed)
    words = [b"GET", b"POST", b"/api/v1/items", b"/login", b"status=200", b"status=404", b"ms="]
    base = []
    for _ in range(min(n, 512)):
        parts: list[bytes] = []
        length = 0
        while length < size:
            w = rng.choice(words) if rng.random() < 0.6 else rng.randbytes(8).hex().encode()
            parts.append(w)
            length += len(w) + 1
        base.append(b" ".join(parts)[:size])
    return [base[i % len(base)][: size - 8] + b"%08d" % i for i in range(n)]


_shared: dict[str, StackState] = {}  # "state" while a suite shares one stack


@contextmanager
def shared_stack() -> Iterator[StackState]:
    """One stack for a whole suite run: :func:`private_stack` yields it meanwhile."""
    with private_stack() as state:
        _shared["state"] = state
        try:
            yield state
        finally:
            _shared.clear()


@contextmanager
def private_stack() -> Iterator[StackState]:
    """A local stack just for this benchmark run (started and stopped here), or the
    suite's shared one. Servers named by MEMQ_S3_ENDPOINT, MEMQ_KAFKA_BOOTSTRAP and
    MEMQ_ZK_CONNECT are used instead of starting them."""
    if "state" in _shared:
        yield _shared["state"]
        return
    d = Path(tempfile.mkdtemp(prefix="memq-bench-"))
    stack = DevStack(d)
    state = stack.up(brokers=0, auditor=False)
    os.environ.update({k: v for k, v in state.aws_env().items() if not os.environ.get(k)})
    try:
        yield state
    finally:
        stack.down()


@contextmanager
def broker_process(
    state: StackState, name: str, config: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """A broker in its own process (its own GIL and core), stopped with SIGTERM afterwards."""
    info = start_broker(Path(state.state_dir), name, config, state.aws_env())
    try:
        yield info
    finally:
        stop(ProcessRef(info["pid"], info.get("start_time")), timeout=60)


def scrape(http: str) -> dict[str, float]:
    """Sum every Prometheus sample by name from a broker's /metrics."""
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def now() -> float:
    return time.perf_counter()


def eprint(*a: Any) -> None:
    print(*a, file=sys.stderr, flush=True)
