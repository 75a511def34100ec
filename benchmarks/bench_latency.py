"""End-to-end latency vs batch settings: the latency / PUT-cost trade-off MemQ is built on.

A producer writes 1 KiB records at a fixed rate (acks=all) through one broker (its own
process, S3 storage on moto) while a ``memq.Consumer`` group reads them; each record's
latency is hand-out time minus its timestamp (set at ``produce()``; one host, one
clock). One topic per setting point, each with its own ``batch.ms`` / ``batch.bytes``:

- ``batch.ms`` sweep with ``batch.bytes`` large (age seals every batch);
- ``batch.bytes`` sweep with ``batch.ms`` large (size seals every batch).

For each point, ``--reps`` windows of ``--window`` seconds are measured one after the
other (one consumer group for all, joined once): p50/p99 latency per window, and the
objects written, which give PUTs per hour and the S3 PUT cost per day of each MB/s
ingested at list price ($0.005 per 1,000 PUTs). Writes ``benchmarks/results/latency.json``.

    python benchmarks/bench_latency.py [--quick] [--reps 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib
from benchlib import eprint, percentile, spread

RECORD = 1024
PUT_PRICE_PER_1K = 0.005
GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "auto.offset.reset": "latest"}


def points(quick: bool) -> list[dict[str, Any]]:
    """(sweep, batch.ms, batch.bytes) per topic."""
    if quick:
        return [
            {"sweep": "batch.ms", "ms": 200, "bytes": 8 << 20},
            {"sweep": "batch.bytes", "ms": 2_000, "bytes": 128 << 10},
        ]
    return [
        *({"sweep": "batch.ms", "ms": ms, "bytes": 8 << 20} for ms in (100, 250, 1000, 3000)),
        *({"sweep": "batch.bytes", "ms": 5_000, "bytes": b} for b in (256 << 10, 1 << 20, 4 << 20)),
    ]


def broker_cfg(state: Any, topics: list[dict[str, Any]]) -> dict[str, Any]:
    store = benchlib.storage_config("s3", bucket=state.bucket, endpoint=state.s3_endpoint)
    return benchlib.broker_config(state, "bench-latency", store, topics, partitions=2)


def _point(
    producer: Any, consumer: Any, topic: str, rate: int, seconds: float, reps: int, tail_s: float
) -> list[dict[str, Any]]:
    """Produce ``rate`` records/s continuously while consuming; windows ``0..reps-1`` of
    ``seconds`` each are measured (a steady stream: every batch of a window is sealed by
    its usual trigger, never by the end of the test). Latencies in ms per window."""
    counts = [0] * reps
    futs: list[list[Any]] = [[] for _ in range(reps)]
    lat: list[list[float]] = [[] for _ in range(reps)]
    stop = threading.Event()
    window = [0]  # the producer's current window (reps and beyond: the tail)
    pad = b"x" * (RECORD - 4)

    def produce() -> None:
        t0 = time.monotonic()
        sent = 0
        while not stop.is_set():
            w = int((time.monotonic() - t0) / seconds)
            window[0] = w
            if w < reps:
                counts[w] += 1
                futs[w].append(producer.produce(topic, b"%03d|" % w + pad))
            else:
                producer.produce(topic, b"end|" + pad)
            sent += 1
            delay = t0 + sent / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing the offered load, not synchronisation

    t = threading.Thread(target=produce, name="paced-producer", daemon=True)
    t.start()
    deadline = time.monotonic() + reps * seconds + tail_s + 30
    try:
        while time.monotonic() < deadline:
            if window[0] >= reps and all(len(lat[w]) == counts[w] for w in range(reps)):
                break
            for m in consumer.consume(1000, 0.2):
                tag = m.value[:4]
                if m.topic == topic and tag[3:] == b"|" and tag != b"end|":  # not warm-up/tail
                    lat[int(m.value[:3])].append(time.time() * 1000 - m.timestamp)
        else:
            raise RuntimeError(
                f"{topic}: consumed {[len(x) for x in lat]} of {counts} records in time"
            )
    finally:
        stop.set()
        t.join()
    producer.flush(60)
    return [
        {
            "records": counts[w],
            "p50_ms": percentile(lat[w], 0.5),
            "p99_ms": percentile(lat[w], 0.99),
            "max_ms": max(lat[w]),
            "objects": len({f.result(0).key for f in futs[w]}),
            "seconds": seconds,
        }
        for w in range(reps)
    ]


def run(quick: bool, reps: int = 3, window: float | None = None) -> dict[str, Any]:
    from memq import Consumer, Producer

    rate = 500 if quick else 2000  # records/s of 1 KiB: 0.5 or 2 MB/s
    window = window or (1.5 if quick else 5.0)
    pts = points(quick)
    run_id = uuid.uuid4().hex[:6]
    for i, p in enumerate(pts):
        p["topic"] = f"lat-{run_id}-{i}"
    topics = [{"name": p["topic"], "batch": {"ms": p["ms"], "bytes": p["bytes"]}} for p in pts]
    out: list[dict[str, Any]] = []
    with (
        benchlib.private_stack() as state,
        benchlib.broker_process(state, "bench-latency", broker_cfg(state, topics)) as info,
    ):
        assigned = threading.Event()
        consumer = Consumer(
            {"bootstrap.servers": info["endpoint"], "group.id": f"lat-{run_id}", **GROUP}
        )
        consumer.subscribe([p["topic"] for p in pts], on_assign=lambda _tp: assigned.set())
        deadline = time.monotonic() + 60
        while not assigned.is_set() and time.monotonic() < deadline:
            consumer.consume(100, 0.2)
        if not assigned.is_set():
            raise RuntimeError("the latency consumer group was not assigned within 60 s")
        producer = Producer(
            {
                "bootstrap.servers": info["endpoint"],
                "acks": "all",
                "linger.ms": 5,
                "compression.type": "none",  # batch.bytes counts stored bytes
                # acks=all requests wait for their batch: at 2 MB/s a 4 MiB batch holds ~400
                # small blocks, more than the default 256 in flight (which would stall the
                # producer until batch.ms seals a partial batch).
                "max.in.flight": 4096,
            }
        )
        try:
            for p in pts:
                producer.produce(p["topic"], b"warm-up").result(60)
                eprint(f"latency: {p['sweep']} ms={p['ms']} bytes={p['bytes']}")
                tail = min(p["ms"] / 1000, p["bytes"] / (rate * RECORD)) + 2
                wins = _point(producer, consumer, p["topic"], rate, window, reps, tail)
                objects_per_s = [w["objects"] / w["seconds"] for w in wins]
                mbps = rate * RECORD / 1e6
                out.append(
                    {
                        "sweep": p["sweep"],
                        "batch_ms": p["ms"],
                        "batch_bytes": p["bytes"],
                        "windows": wins,
                        "p50_ms": spread([w["p50_ms"] for w in wins]),
                        "p99_ms": spread([w["p99_ms"] for w in wins]),
                        "puts_per_hour": round(statistics.median(objects_per_s) * 3600),
                        "put_usd_per_day_per_MBps": round(
                            statistics.median(objects_per_s)
                            * 86_400
                            / 1000
                            * PUT_PRICE_PER_1K
                            / mbps,
                            3,
                        ),
                    }
                )
        finally:
            producer.close()
            consumer.close()
    return {
        "benchmark": "latency",
        "quick": quick,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": benchlib.machine(),
        "setup": {
            "record_bytes": RECORD,
            "rate_records_per_s": rate,
            "rate_MBps": rate * RECORD / 1e6,
            "window_s": window,
            "reps": reps,
            "storage": "s3 (moto)",
            "acks": "all",
        },
        "points": out,
    }


def print_table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    s = doc["setup"]
    t = Table(title=f"end-to-end latency at {s['rate_MBps']} MB/s ({s['reps']} windows each)")
    for c in ("sweep", "batch.ms", "batch.bytes", "p50 ms (min/med/max)", "p99 ms", "PUTs/h",
              "PUT $/day per MB/s"):  # fmt: skip
        t.add_column(c, justify="right")
    for p in doc["points"]:
        a, b = p["p50_ms"], p["p99_ms"]
        t.add_row(
            p["sweep"], f"{p['batch_ms']:,}", f"{p['batch_bytes']:,}",
            f"{a['min']:.0f}/{a['median']:.0f}/{a['max']:.0f}",
            f"{b['min']:.0f}/{b['median']:.0f}/{b['max']:.0f}",
            f"{p['puts_per_hour']:,}", f"{p['put_usd_per_day_per_MBps']:.2f}",
        )  # fmt: skip
    Console().print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke mode: 2 points, short windows")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--window", type=float, default=None, help="seconds per window")
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "latency.json")
    a = ap.parse_args(argv)
    doc = run(a.quick, a.reps, a.window)
    print_table(doc)
    benchlib.write_result(doc, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
