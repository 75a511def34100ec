"""Ingest scaling: 1, 2 and 4 producer processes against 1 and 3 brokers.

Each producer is its own process (its own GIL) producing 1 KiB records from one thread
(acks=all, uncompressed, filesystem storage so S3's single-process server is not the
bottleneck) to a topic every broker hosts; producer ``i`` talks to broker ``i mod
brokers``. The brokers are separate processes.

Method (issue 19): the producers start together (a barrier), run a 5 s warm-up (not
measured), then a >= 20 s window (2 s with ``--quick``: a smoke, not a figure); only
records acknowledged inside the window count, and each producer reads its own CPU
seconds (and the first one the brokers') from /proc at the window's edges. A cell's
MB/s is the sum over producers; CPU-s/GiB is per GiB acknowledged in the window.
``--reps`` repetitions per cell; ratios are against the same repetition's 1-producer /
1-broker cell. With 2 cores, 4 producers and 3 brokers compete for the same CPUs, which
is what this measures. Writes ``benchmarks/results/scaling.json``.

    python benchmarks/bench_scaling.py [--quick] [--reps 3] [--records N] [--out PATH]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
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
    return benchlib.broker_config(
        state, name, benchlib.storage_config("filesystem", root=root), [{"name": "scale"}],
        partitions=4, batch={"bytes": 8 << 20, "ms": 500}, topic_defaults={"ring_size": 4},
    )  # fmt: skip


def _producer(
    endpoint: str, pool: int, seed: int, barrier: Any, q: Any, timing: tuple[float, float],
    watch: list[int],
) -> None:  # fmt: skip
    """One producer process: wait for the others, then produce from one thread until the
    window is over; report what was acknowledged inside the window and the CPU seconds
    of this process (and of the ``watch`` pids: the brokers) at its edges."""
    import threading

    from memq import Producer
    from memq.producer.producer import BufferFullError

    values = benchlib.log_records(pool, RECORD, seed=seed)
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
    counter = benchlib.Counter()

    def cb(err: Any, md: Any) -> None:
        if err is not None:
            counter.errors += 1
        else:
            counter.add_one(RECORD)

    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            for _ in range(256):
                try:
                    p.produce("scale", values[i % pool], on_delivery=cb)
                except BufferFullError:  # saturated cores: back-pressure, not a failure
                    continue
                i += 1

    def cpu() -> list[float]:
        return [benchlib.cpu_seconds(pid) for pid in (os.getpid(), *watch)]

    try:
        p.produce("scale", b"warm-up").result(60)
        barrier.wait(120)
        warmup, window = timing
        t = threading.Thread(target=load, daemon=True)
        start = time.monotonic()
        t.start()
        stop.wait(warmup)  # a timer: the warm-up is not measured
        c0, (t0, b0, _) = cpu(), counter.snap()
        stop.wait(max(0.0, t0 + window - time.monotonic()))
        c1, (t1, b1, _) = cpu(), counter.snap()
        stop.set()
        t.join(600)
        left = p.flush(600)
        q.put({"start": start, "seconds": t1 - t0, "bytes": b1 - b0, "left": left,
               "errors": counter.errors, "cpu": [y - x for x, y in zip(c0, c1, strict=True)]})  # fmt: skip
    except BaseException as e:  # reported to the parent, which fails the run
        q.put({"error": f"{type(e).__name__}: {e}"})
    finally:
        p.close()


def _cell(
    endpoints: list[str], broker_pids: list[int], producers: int, pool: int, quick: bool
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(producers)
    q = ctx.Queue()
    timing = benchlib.timing(quick)
    procs = [
        ctx.Process(
            target=_producer,
            args=(
                endpoints[i % len(endpoints)],
                pool,
                i + 1,
                barrier,
                q,
                timing,
                broker_pids if i == 0 else [],
            ),
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
    if errors or any(r["left"] or r["errors"] for r in reports):
        raise RuntimeError(f"scaling cell failed: {errors or 'records not acknowledged'}")
    seconds = statistics.mean(r["seconds"] for r in reports)
    total = sum(r["bytes"] for r in reports)
    gib = total / benchlib.GiB
    return {
        "window_s": round(seconds, 2),
        "MBps": total / 1e6 / seconds,
        "window_MB": round(total / 1e6, 1),
        "cpu_s_per_GiB": {
            "producers": round(sum(r["cpu"][0] for r in reports) / gib, 2),
            "brokers": round(
                sum(next(r["cpu"][1:] for r in reports if len(r["cpu"]) > 1)) / gib, 2
            ),
        },
    }


def run(quick: bool, reps: int = 3, records: int | None = None) -> dict[str, Any]:
    records = records or 4_096
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
                pids = [i["pid"] for i in infos]
                cpu0 = sum(benchlib.cpu_seconds(i["pid"]) for i in infos)
                for rep in range(reps):
                    for npr in producers:
                        eprint(f"scaling: {npr} producer(s), {nb} broker(s), rep {rep + 1}")
                        cells.setdefault(f"{npr}p-{nb}b", []).append(
                            _cell(endpoints, pids, npr, records, quick)
                        )
                cpu[f"{nb}b"] = sum(benchlib.cpu_seconds(i["pid"]) for i in infos) - cpu0
            shutil.rmtree(root, ignore_errors=True)  # every window writes GiBs here
    base = cells["1p-1b"]
    out: dict[str, Any] = {}
    for name, runs in cells.items():
        npr, nb = name.split("-")
        out[name] = {
            "producers": int(npr[:-1]),
            "brokers": int(nb[:-1]),
            "MBps": spread([r["MBps"] for r in runs]),
            "vs_1p_1b": spread([r["MBps"] / b["MBps"] for r, b in zip(runs, base, strict=True)]),
            "cpu_s_per_GiB": {
                k: spread([r["cpu_s_per_GiB"][k] for r in runs]) for k in ("producers", "brokers")
            },
            "runs": runs,
        }
    return {
        "benchmark": "scaling",
        "quick": quick,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": benchlib.machine(),
        "setup": {
            "record_bytes": RECORD,
            "value_pool": records,
            "warmup_s": benchlib.timing(quick)[0],
            "window_s": benchlib.timing(quick)[1],
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

    st = doc["setup"]
    t = Table(
        title=f"ingest scaling ({doc['machine']['cpus']} CPUs), {st['window_s']:g} s steady "
        f"windows after {st['warmup_s']:g} s warm-up" + (" [SMOKE]" if doc["quick"] else "")
    )
    for c in ("producers", "brokers", "MB/s (min/med/max)", "vs 1 producer, 1 broker",
              "producers CPU-s/GiB", "brokers CPU-s/GiB"):  # fmt: skip
        t.add_column(c, justify="right")
    for c in doc["cells"].values():
        m, r, cpu = c["MBps"], c["vs_1p_1b"], c["cpu_s_per_GiB"]
        t.add_row(str(c["producers"]), str(c["brokers"]),
                  f"{m['min']:.0f}/{m['median']:.0f}/{m['max']:.0f}", f"{r['median']:.2f}x",
                  f"{cpu['producers']['median']:.2f}", f"{cpu['brokers']['median']:.2f}")  # fmt: skip
    Console().print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--records",
        type=int,
        default=None,
        help="distinct values cycled per producer (default 4096)",
    )
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "scaling.json")
    a = ap.parse_args(argv)
    doc = run(a.quick, a.reps, a.records)
    print_table(doc)
    benchlib.write_result(doc, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
