"""Ingest scaling: 1, 2 and 4 producer processes against 1 and 3 brokers.

Each producer is its own process (its own GIL), writing ``--records`` 1 KiB records
(acks=all, uncompressed, filesystem storage so S3's single-process server is not the
bottleneck) to a topic every broker hosts; producer ``i`` talks to broker ``i mod
brokers``. The brokers are separate processes. Throughput is the payload of all
producers divided by the time from the common start to the last ack (CLOCK_MONOTONIC is
shared by processes). ``--reps`` repetitions per cell; ratios are against the same
repetition's 1-producer / 1-broker cell. Note the machine's core count: with 2 cores, 4
producers and 3 brokers compete for the same CPUs, which is what this measures.
Writes ``benchmarks/results/scaling.json``.

    python benchmarks/bench_scaling.py [--quick] [--reps 3] [--records N] [--out PATH]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib
from benchlib import eprint, spread

RECORD = 1024
PRODUCERS = (1, 2, 4)
BROKERS = (1, 3)


def broker_cfg(state: Any, name: str, root: str) -> dict[str, Any]:
    return {
        "broker_id": name,
        "cluster": "bench",
        "port": 0,
        "http_port": 0,
        "topic_defaults": {
            "storage": {"type": "filesystem", "filesystem": {"root": root}},
            "notification": {"bootstrap_servers": state.kafka_bootstrap, "partitions": 4},
            "batch": {"bytes": 8 << 20, "ms": 500},
            "ring_size": 4,
        },
        "topics": [{"name": "scale"}],
    }


def _producer(endpoint: str, records: int, seed: int, barrier: Any, q: Any) -> None:
    """One producer process: wait for the others, produce, report (start, end)."""
    from memq import Producer

    values = benchlib.log_records(records, RECORD, seed=seed)
    p = Producer(
        {
            "bootstrap.servers": endpoint,
            "acks": "all",
            "compression.type": "none",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "buffer.memory": 32 << 20,
        }
    )
    try:
        p.produce("scale", b"warm-up").result(60)
        barrier.wait(120)
        t0 = time.monotonic()
        for v in values:
            p.produce("scale", v)
        left = p.flush(600)
        q.put({"start": t0, "end": time.monotonic(), "left": left, "bytes": sum(map(len, values))})
    except BaseException as e:  # reported to the parent, which fails the run
        q.put({"error": f"{type(e).__name__}: {e}"})
    finally:
        p.close()


def _cell(endpoints: list[str], producers: int, records: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(producers)
    q = ctx.Queue()
    procs = [
        ctx.Process(
            target=_producer,
            args=(endpoints[i % len(endpoints)], records, i + 1, barrier, q),
            daemon=True,
        )
        for i in range(producers)
    ]
    for p in procs:
        p.start()
    try:
        reports = [q.get(timeout=900) for _ in procs]
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    errors = [r["error"] for r in reports if "error" in r]
    if errors or any(r["left"] for r in reports):
        raise RuntimeError(f"scaling cell failed: {errors or 'records left unacknowledged'}")
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    total = sum(r["bytes"] for r in reports)
    return {"seconds": seconds, "MBps": total / 1e6 / seconds, "payload_MB": total / 1e6}


def run(quick: bool, reps: int = 3, records: int | None = None) -> dict[str, Any]:
    records = records or (2_000 if quick else 32_768)
    producers = (1, 2) if quick else PRODUCERS
    cells: dict[str, list[dict[str, Any]]] = {}
    cpu: dict[str, float] = {}
    with benchlib.private_stack() as state:
        for nb in BROKERS:
            root = tempfile.mkdtemp(prefix="memq-bench-scale-")
            with ExitStack() as stack:
                infos = [
                    stack.enter_context(
                        benchlib.broker_process(
                            state, f"scale-{nb}-{i}", broker_cfg(state, f"scale-{nb}-{i}", root)
                        )
                    )
                    for i in range(nb)
                ]
                endpoints = [i["endpoint"] for i in infos]
                cpu0 = sum(benchlib.cpu_seconds(i["pid"]) for i in infos)
                for rep in range(reps):
                    for npr in producers:
                        eprint(f"scaling: {npr} producer(s), {nb} broker(s), rep {rep + 1}")
                        cells.setdefault(f"{npr}p-{nb}b", []).append(_cell(endpoints, npr, records))
                cpu[f"{nb}b"] = sum(benchlib.cpu_seconds(i["pid"]) for i in infos) - cpu0
    base = cells["1p-1b"]
    out: dict[str, Any] = {}
    for name, runs in cells.items():
        npr, nb = name.split("-")
        out[name] = {
            "producers": int(npr[:-1]),
            "brokers": int(nb[:-1]),
            "MBps": spread([r["MBps"] for r in runs]),
            "vs_1p_1b": spread([r["MBps"] / b["MBps"] for r, b in zip(runs, base, strict=True)]),
            "runs": runs,
        }
    return {
        "benchmark": "scaling",
        "quick": quick,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": benchlib.machine(),
        "setup": {
            "record_bytes": RECORD,
            "records_per_producer": records,
            "reps": reps,
            "storage": "filesystem",
            "acks": "all",
        },
        "cells": out,
        "broker_cpu_s": cpu,
    }


def print_table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"ingest scaling ({doc['machine']['cpus']} CPUs)")
    for c in ("producers", "brokers", "MB/s (min/med/max)", "vs 1 producer, 1 broker"):
        t.add_column(c, justify="right")
    for c in doc["cells"].values():
        m, r = c["MBps"], c["vs_1p_1b"]
        t.add_row(str(c["producers"]), str(c["brokers"]),
                  f"{m['min']:.0f}/{m['median']:.0f}/{m['max']:.0f}", f"{r['median']:.2f}x")  # fmt: skip
    Console().print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--records", type=int, default=None, help="per producer (default 32768)")
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "scaling.json")
    a = ap.parse_args(argv)
    doc = run(a.quick, a.reps, a.records)
    print_table(doc)
    benchlib.write_result(doc, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
