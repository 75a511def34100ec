"""Topics at scale: one broker with 1, 100 and 1,000 topics, each trickling, plus a hot one.

For each topic count N, one broker (its own process, default 1 GiB buffer pool,
batch.bytes 8 MiB, batch.ms 1000) writes N-1 trickle topics, each receiving one record
per second (acks=all), and one hot topic receiving 1 KiB incompressible records as fast
as one producer process can send them (acks=all, default client settings). Measured over
the steady window (``--seconds``, after the topics exist and a warm-up):

- broker RSS (max sampled VmRSS in the window, and VmHWM) and CPU seconds;
- the buffer pool: bytes allocated and held (its Prometheus gauges);
- hot-topic throughput (MB/s acknowledged in the window) and its ratio to the same
  broker with 1 topic;
- the trickle topics' ack latency p50/p99 (acks=all: the record's batch is in storage
  and its notification acknowledged by Kafka: the moment a consumer can see it).

The window starts after a warm-up of 30 s (3 s with ``--quick``) of the same load: a
Kafka partition writes its first index entry after ``index.interval.bytes`` (4 KiB) of
appends, into index files preallocated sparse, and the first touch of those pages costs
a block allocation; 1,000 partitions created together and written at the same pace all
do it in the same second, while Kafka serves one request per connection at a time: all
notifications stalled for 6-20 s on this machine, about 10 s after the first ones
(measured with a plain librdkafka producer too: 1,000 new one-partition topics at one
message per second each stall at 25 s with 100-byte messages, at 7 s with
``index.interval.bytes=1024``). A one-time transient of new partitions, not the steady
state: the warm-up's own ack latency p99 is reported beside the window's
(``trickle_warmup_ack_p99_ms``).

Also per process CPU seconds in the window (broker, hot producer, this process as the
trickle generator, Kafka, S3, ZooKeeper), the broker's PING round trip (event-loop lag)
and the mean notification / ack=all latency from its metrics (scraped before the warm-up
and after the window: a scrape of 1,000 topics stalls the broker's loop).
``--notify-idempotence off|both`` runs the broker's notification producer without
idempotence: it isolates the local Kafka's per-write cost of idempotent producer state.

Targets: 1,000 topics under 1 GiB broker RSS; hot-topic throughput >= 0.9x the 1-topic
run. Storage is devnull by default (the broker and Kafka are measured, not moto's PUT
rate; ``--storage s3`` uses the local S3). Writes ``benchmarks/results/topics.json``.

    python benchmarks/bench_topics.py [--quick] [--topics 1,100,1000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib
from benchlib import eprint, percentile

MiB = 1 << 20
RECORD = 1024


def broker_cfg(state: Any, storage: str, idempotent: bool = True) -> dict[str, Any]:
    store = benchlib.storage_config(storage, bucket=state.bucket, endpoint=state.s3_endpoint)
    # Not idempotent: isolates the local Kafka's idempotent-produce cost (module docstring).
    producer = {} if idempotent else {"producer": {"enable.idempotence": False}}
    return benchlib.broker_config(
        # One read partition per topic: what a trickle topic's owner would choose.
        state, f"topics-{storage}", store, None, partitions=1, notification=producer,
        batch={"bytes": 8 * MiB, "ms": 1000},
        auto_create_topics=True, memory_limit_bytes=1 << 30,
    )  # fmt: skip


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def gauge(http: str, name: str) -> float:
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return float("nan")


def notify_stats(http: str) -> dict[str, float]:
    """Sums and counts of the notification and ack=all latency histograms: for the hot
    topic and for all trickle topics together."""
    out: dict[str, float] = {}
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            for metric in ("memq_notification_seconds", "memq_ack_seconds"):
                for part in ("_sum", "_count"):
                    if not line.startswith(metric + part + "{"):
                        continue
                    who = "hot" if 'topic="hot"' in line else "trickle"
                    key = f"{metric}{part}:{who}"
                    out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def mean_ms(a: dict[str, float], b: dict[str, float], metric: str, who: str) -> float | None:
    n = b.get(f"{metric}_count:{who}", 0.0) - a.get(f"{metric}_count:{who}", 0.0)
    total = b.get(f"{metric}_sum:{who}", 0.0) - a.get(f"{metric}_sum:{who}", 0.0)
    return round(total / n * 1000, 1) if n else None


def ping_probe(boot: str, stop: threading.Event, rtts: list[float]) -> None:
    """PING the broker every 20 ms on its own connection: the round trip is mostly how
    long the broker's event loop takes to get to a ready socket (its lag)."""
    import socket

    from memq.formats.frames import FrameReceiver, RequestType, encode_request

    host, port = boot.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        rx = FrameReceiver()
        rid = 0
        while not stop.is_set():
            rid += 1
            t0 = time.perf_counter()
            sock.sendall(encode_request(RequestType.PING, rid, b"p"))
            frames: list[Any] = []
            while not frames:
                buf = rx.get_buffer()
                n = sock.recv_into(buf)
                if n == 0:
                    return
                frames = rx.received(n)
            rtts.append(time.perf_counter() - t0)
            stop.wait(0.02)


def hot_loop(boot: str, topic: str, seconds: float, warmup: float, out: Any) -> None:
    """A producer process at full speed; puts (bytes acked in the window, window s)."""
    from memq import Producer

    # produce() may block through the warm-up's stall of new notification partitions
    # (1,000 topics: up to a minute here with a full page cache), not fail in it.
    block_ms = int((warmup + seconds + 120) * 1000)
    p = Producer({"bootstrap.servers": boot, "acks": "all", "audit.enable": False,
                  "max.block.ms": block_ms})  # fmt: skip
    # Distinct random records (more than fit in one 1 MiB block): incompressible.
    pool = [os.urandom(RECORD) for _ in range(2048)]
    acked = [0]
    t0 = time.monotonic()
    start, end = t0 + warmup, t0 + warmup + seconds

    def cb(err: object, _md: object) -> None:
        if err is None and start <= time.monotonic() <= end:
            acked[0] += RECORD

    i = 0
    while time.monotonic() < end:
        p.produce(topic, pool[i & 2047], on_delivery=cb)
        i += 1
    p.flush(120)
    p.close()
    out.put((acked[0], seconds))


def _result_of(proc: Any, q: Any, timeout: float) -> Any:
    """What ``proc`` put on ``q``; a clear error at once if it died without (its traceback
    is on stderr above), instead of waiting out ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=1.0)
        except queue.Empty:
            if not proc.is_alive():
                raise RuntimeError(
                    f"the hot producer exited ({proc.exitcode}) without a result"
                ) from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"the hot producer gave no result in {timeout:.0f} s") from None


def run_one(
    state: Any,
    n_topics: int,
    seconds: float,
    storage: str,
    idempotent: bool = True,
    warmup: float = 30.0,
) -> dict[str, Any]:
    from memq import Producer

    cfg = broker_cfg(state, storage, idempotent)
    with benchlib.broker_process(state, f"topics-{n_topics}", cfg) as b:
        boot, pid = b["endpoint"], b["pid"]
        names = [f"trickle-{i:04d}" for i in range(n_topics - 1)]
        p = Producer({"bootstrap.servers": boot, "acks": "all", "audit.enable": False,
                      "linger.ms": 5, "max.in.flight": 4096})  # fmt: skip
        t0 = time.monotonic()
        creating = [p.produce(name, b"create") for name in [*names, "hot"]]  # auto-created
        for f in creating:
            f.result(timeout=600)
        create_s = time.monotonic() - t0
        eprint(f"  {n_topics} topics created in {create_s:.1f} s")
        q: Any = mp.get_context("spawn").Queue()
        hot = mp.get_context("spawn").Process(
            target=hot_loop, args=(boot, "hot", seconds, warmup, q)
        )
        hot.start()
        latencies: list[float] = []
        warming: list[float] = []  # acks of the warm-up's records (first index entries)
        failed = [0]
        lock = threading.Lock()

        def cb(err: object, md: Any) -> None:
            with lock:
                if err is not None:
                    failed[0] += 1
                else:
                    latencies.append(time.time() * 1000 - md.timestamp)

        def warm_cb(err: object, md: Any) -> None:
            if err is None:
                with lock:
                    warming.append(time.time() * 1000 - md.timestamp)

        rss: list[int] = []
        procs = {
            "broker": pid,
            "hot_producer": hot.pid,
            "trickle_producer": os.getpid(),  # this process: the trickle loop + its client
            "kafka": state.services["kafka"].pid,
            "s3": state.services["s3"].pid,
            "zookeeper": state.services["zookeeper"].pid,
        }
        cpu0: dict[str, float] = {}
        stats0 = notify_stats(b["http"])  # before the window: a scrape stalls the broker
        pings: list[float] = []
        stop_ping = threading.Event()
        pinger = threading.Thread(target=ping_probe, args=(boot, stop_ping, pings), daemon=True)
        t_start = time.monotonic() + warmup
        tick = time.monotonic()
        while time.monotonic() < t_start + seconds:
            measuring = time.monotonic() >= t_start
            if measuring and not cpu0:
                cpu0 = benchlib.cpu_now(procs)
                pinger.start()
            for name in names:  # one record per trickle topic per second
                p.produce(name, b"x" * 100, on_delivery=cb if measuring else warm_cb)
            if measuring:
                rss.append(rss_bytes(pid))
            tick += 1.0
            time.sleep(max(0.0, tick - time.monotonic()))  # the trickle's pace
        cpu1 = benchlib.cpu_now(procs)
        stop_ping.set()
        pinger.join(30)
        stats1 = notify_stats(b["http"])
        cpu = {k: round(cpu1[k] - v, 2) for k, v in cpu0.items() if k in cpu1}
        p.flush(120)
        hot_bytes, hot_s = _result_of(hot, q, timeout=300)
        hot.join(60)
        pool_allocated = gauge(b["http"], "memq_pool_allocated_bytes")
        pool_held = gauge(b["http"], "memq_pool_held_bytes")
        peak = benchlib.peak_rss_bytes(pid)
        p.close()
    return {
        "topics": n_topics,
        "create_s": round(create_s, 2),
        "broker_rss_MB": round(max(rss) / 1e6, 1) if rss else None,
        "broker_peak_rss_MB": round(peak / 1e6, 1),
        "broker_cpu_s": cpu.get("broker"),
        "cpu_s_in_window": cpu,
        "pool_allocated_MB": round(pool_allocated / 1e6, 2),
        "pool_held_MB": round(pool_held / 1e6, 2),
        "hot_MBps": round(hot_bytes / hot_s / 1e6, 2),
        "trickle_records": len(latencies),
        "trickle_failed": failed[0],
        "trickle_ack_p50_ms": round(percentile(latencies, 0.5), 1) if latencies else None,
        "trickle_ack_p99_ms": round(percentile(latencies, 0.99), 1) if latencies else None,
        "trickle_warmup_ack_p99_ms": round(percentile(warming, 0.99), 1) if warming else None,
        "warmup_s": warmup,
        "notify_idempotent": idempotent,
        "ping_p50_ms": round(percentile(pings, 0.5) * 1000, 1) if pings else None,
        "ping_p99_ms": round(percentile(pings, 0.99) * 1000, 1) if pings else None,
        "hot_notify_mean_ms": mean_ms(stats0, stats1, "memq_notification_seconds", "hot"),
        "hot_ack_mean_ms": mean_ms(stats0, stats1, "memq_ack_seconds", "hot"),
        "trickle_notify_mean_ms": mean_ms(stats0, stats1, "memq_notification_seconds", "trickle"),
    }


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Min / median / max of the hot topic's MB/s and ratio per (idempotence, topics)."""
    out = []
    for idem in dict.fromkeys(r["notify_idempotent"] for r in runs):
        for n in dict.fromkeys(r["topics"] for r in runs):
            rows = [r for r in runs if r["topics"] == n and r["notify_idempotent"] == idem]
            if not rows or rows[0]["hot_vs_1_topic"] is None:
                continue
            out.append(
                {
                    "topics": n,
                    "notify_idempotent": idem,
                    "hot_MBps": benchlib.spread([r["hot_MBps"] for r in rows]),
                    "hot_vs_1_topic": benchlib.spread([r["hot_vs_1_topic"] for r in rows]),
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 and 20 topics, 4 s each")
    ap.add_argument("--topics", default=None, help="comma-separated topic counts")
    ap.add_argument("--seconds", type=float, default=None, help="steady window per count")
    ap.add_argument("--storage", choices=("devnull", "s3"), default="devnull")
    ap.add_argument(
        "--notify-idempotence",
        choices=("on", "off", "both"),
        default="on",
        help="the broker's notification producer: idempotent (the default, as shipped), "
        "not, or both runs per topic count (off isolates the local Kafka's per-write cost "
        "of idempotent producer state)",
    )
    ap.add_argument(
        "--reps",
        type=int,
        default=1,
        help="repetitions: each runs every topic count in turn, and each ratio is to the "
        "1-topic run of the same repetition; the summary gives min / median / max",
    )
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "topics.json")
    a = ap.parse_args(argv)
    if a.reps < 1:
        raise SystemExit("--reps must be at least 1")
    modes = {"on": [True], "off": [False], "both": [True, False]}[a.notify_idempotence]
    counts = [int(x) for x in (a.topics or ("1,20" if a.quick else "1,100,1000")).split(",")]
    seconds = a.seconds or (4.0 if a.quick else 20.0)
    warmup = 3.0 if a.quick else 30.0
    doc: dict[str, Any] = {"benchmark": "topics", "quick": a.quick, "storage": a.storage,
                           "seconds": seconds, "reps": a.reps, "machine": benchlib.machine(),
                           "runs": []}  # fmt: skip
    with benchlib.private_stack() as state:
        for rep in range(a.reps):
            for idem in modes:
                for n in counts:
                    eprint(f"bench_topics: rep {rep + 1}/{a.reps}, {n} topics ({a.storage}, "
                           f"{seconds:.0f} s, idempotent notifications {'on' if idem else 'off'})")  # fmt: skip
                    run = run_one(state, n, seconds, a.storage, idem, warmup)
                    doc["runs"].append({"rep": rep, **run})
    for r in doc["runs"]:
        base = next(
            (
                x
                for x in doc["runs"]
                if x["topics"] == 1
                and x["rep"] == r["rep"]
                and x["notify_idempotent"] == r["notify_idempotent"]
            ),
            None,
        )
        r["hot_vs_1_topic"] = round(r["hot_MBps"] / base["hot_MBps"], 3) if base else None
    doc["summary"] = summary(doc["runs"])
    big = max(doc["runs"], key=lambda r: r["broker_peak_rss_MB"])
    doc["targets"] = {
        "rss_under_1GiB_at_max_topics": big["broker_peak_rss_MB"] < (1 << 30) / 1e6,
        # None: no 1-topic run to compare with.
        # the median over the repetitions, for each topic count and idempotence
        "hot_ratio_at_least_0.9": (
            all(row["hot_vs_1_topic"]["median"] >= 0.9 for row in doc["summary"])
            if all(r["hot_vs_1_topic"] is not None for r in doc["runs"])
            else None
        ),
    }
    print(f"{'topics':>7} {'idem':>5} {'RSS MB':>8} {'peak MB':>8} {'pool MB':>8} "
          f"{'hot MB/s':>9} {'vs 1':>6} {'p50 ms':>7} {'p99 ms':>7} {'warm-up p99':>11} "
          f"{'hot notify ms':>13}  "
          "CPU s in window")  # fmt: skip
    for r in doc["runs"]:
        cpu = " ".join(f"{k}={v}" for k, v in r["cpu_s_in_window"].items())
        print(f"{r['topics']:>7} {'on' if r['notify_idempotent'] else 'off':>5} "
              f"{r['broker_rss_MB']!s:>8} {r['broker_peak_rss_MB']:>8} "
              f"{r['pool_allocated_MB']:>8} {r['hot_MBps']:>9} {r['hot_vs_1_topic']!s:>6} "
              f"{r['trickle_ack_p50_ms']!s:>7} {r['trickle_ack_p99_ms']!s:>7} "
              f"{r['trickle_warmup_ack_p99_ms']!s:>11} {r['hot_notify_mean_ms']!s:>13}  {cpu}")  # fmt: skip
    if a.reps > 1:
        print("hot topic vs 1 topic, min / median / max over the repetitions:")
        for row in doc["summary"]:
            h = row["hot_vs_1_topic"]
            print(f"{row['topics']:>7} {'on' if row['notify_idempotent'] else 'off':>5} "
                  f"{h['min']} / {h['median']} / {h['max']}")  # fmt: skip
    for k, v in doc["targets"].items():
        print(f"target {k}: {'n/a' if v is None else 'met' if v else 'NOT met'}")
    benchlib.write_result(doc, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
