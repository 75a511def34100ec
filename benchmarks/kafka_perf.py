"""Kafka's own Java producer benchmark (``org.apache.kafka.tools.ProducerPerformance``,
what ``kafka-producer-perf-test.sh`` runs), driven as a same-run row of a benchmark.

The tool sends ``--num-records`` records of ``--record-size`` bytes as fast as it can
(``--throughput -1``) from one thread, prints a line per ~5 s reporting window (records
acknowledged in it) and a final summary (records/s and MB/s from its first send to the
last acknowledgement, latency avg / max / p50 / p95 / p99 / p99.9 of every send). Kafka
4.1 has no ``--warmup-records``, so the steady window is cut here from the reporting
lines: CPU seconds of every process (the tool's JVM too) are read from /proc as each
line arrives, and the window runs from the first line at or after the warm-up to the
last one; only records acknowledged inside it count, as in ``benchlib.steady_state``.
A run too short for two lines after the warm-up (``--quick``) is measured over the whole
run instead: the records, MB/s and latency of the summary line, CPU from the tool's
start to its exit (its JVM's start and JIT included), and ``window`` says which.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import threading
import time
from typing import Any

import benchlib

MAIN = "org.apache.kafka.tools.ProducerPerformance"
#: A reporting window of the tool (Stats.reportingInterval).
REPORT_S = 5.0
#: The tool prints MB/sec of 1024 x 1024 bytes.
MIB = 1 << 20

_WINDOW = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency\.$"
)
_TOTAL = re.compile(
    r"^(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mibps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th\.$"
)


def parse_total(line: str) -> dict[str, float] | None:
    """The final summary line's figures (MB/s in 10^6 bytes, as every other row), or None."""
    m = _TOTAL.match(line.strip())
    if m is None:
        return None
    return {
        "records": int(m["records"]),
        "records_per_s": round(float(m["rps"])),
        "MBps": round(float(m["mibps"]) * MIB / 1e6, 2),
        "lat_avg_ms": float(m["avg"]),
        "lat_max_ms": float(m["max"]),
        "lat_p50_ms": float(m["p50"]),
        "lat_p95_ms": float(m["p95"]),
        "lat_p99_ms": float(m["p99"]),
        "lat_p999_ms": float(m["p999"]),
    }


def parse_window(line: str) -> int | None:
    """Records acknowledged in one reporting window, from its line, or None."""
    m = _WINDOW.match(line.strip())
    return int(m[1]) if m else None


def num_records(rate_MBps: float, record: int, warmup: float, window: float) -> int:  # noqa: N803
    """Records for a run at about ``rate_MBps`` that covers the JVM's start, the warm-up,
    then ``window`` of reporting lines (whose edges fall every ``REPORT_S``); a window
    shorter than two reporting windows cannot be cut from them, and the run then lasts
    only the warm-up and the window (measured whole)."""
    if window < 2 * REPORT_S:
        seconds = 1.0 + warmup + window
    else:
        seconds = 1.0 + max(warmup, REPORT_S) + window + REPORT_S
    return max(10_000, math.ceil(rate_MBps * 1e6 * seconds / record))


def steady_window(
    lines: list[tuple[float, int, dict[str, float]]], t0: float, warmup: float
) -> tuple[float, int, dict[str, float]] | None:
    """(seconds, records, CPU seconds per process) between the first reporting line at
    or after ``t0 + warmup`` and the last one (``lines``: (time, records in that window,
    CPU so far per process) per line); None with fewer than two such lines."""
    inside = [x for x in lines if x[0] >= t0 + warmup]
    if len(inside) < 2:
        return None
    (ta, _, ca), (tb, _, cb) = inside[0], inside[-1]
    records = sum(n for _, n, _ in inside[1:])
    return tb - ta, records, {k: cb[k] - ca[k] for k in ca if k in cb}


def run(
    bootstrap: str,
    topic: str,
    procs: dict[str, int],
    *,
    records: int,
    record: int,
    props: dict[str, Any],
    warmup: float,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Run the tool once into ``topic`` at ``bootstrap`` with producer ``props``;
    ``procs``: the servers whose CPU seconds per GiB to report ({label: pid}; the tool's
    JVM is ``client``)."""
    from memq.devstack.kafka import KAFKA_JVM_OPTS, kafka_java

    argv = kafka_java(
        MAIN,
        "--topic", topic,
        "--num-records", str(records),
        "--record-size", str(record),
        "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}",
        *(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in props.items()),
        jvm=KAFKA_JVM_OPTS,  # as kafka-producer-perf-test.sh runs it (kafka-run-class.sh)
    )  # fmt: skip
    cpu0 = benchlib.cpu_now(procs)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    every = {"client": proc.pid, **procs}
    lines: list[tuple[float, int, dict[str, float]]] = []
    out: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            n = parse_window(line)
            if n is not None:  # CPU at the window's edge, as soon as the line arrives
                lines.append((time.monotonic(), n, benchlib.cpu_now(every)))
            out.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, name="producer-perf-out", daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        # wait4, not wait(): the exit's resource usage is the JVM's whole CPU time
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu1 = benchlib.cpu_now(procs)
    run_s = time.monotonic() - t0
    reader.join(30)
    if proc.stdout is not None:
        proc.stdout.close()
    total = next((t for line in reversed(out) if (t := parse_total(line))), None)
    if proc.returncode != 0 or total is None:
        tail = "\n".join(out[-20:])
        raise RuntimeError(f"{MAIN} exited {proc.returncode} without a summary:\n{tail}")
    errors = sum("Exception" in line for line in out)
    steady = steady_window(lines, t0, warmup)
    if steady is not None:
        seconds, acked, cpu = steady
        window = "steady"
    else:  # too short for a steady window: the whole run, the JVM's start included
        acked = int(total["records"])
        seconds = acked / max(total["records_per_s"], 1)
        cpu = {k: cpu1[k] - cpu0[k] for k in cpu0 if k in cpu1}
        cpu["client"] = usage.ru_utime + usage.ru_stime
        window = "whole run"
    gib = acked * record / benchlib.GiB
    return {
        "window": window,
        "window_s": round(seconds, 2),
        "run_s": round(run_s, 2),
        "records_acked": acked,
        "MBps": round(acked * record / 1e6 / seconds, 2) if seconds > 0 else 0.0,
        "cpu_s_per_GiB": {k: round(v / gib, 2) for k, v in cpu.items()} if gib else {},
        "tool_summary": total,
        "client_cpu_s_whole_run": round(usage.ru_utime + usage.ru_stime, 2),
        "failed": records - total["records"],
        "errors_printed": errors,
        "num_records": records,
        "producer_props": props,
    }
