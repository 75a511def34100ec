"""Kafka-protocol ingest: one Kafka producer into MemQ's Kafka listener, beside the same
producer straight into the local Apache Kafka, in one run; for two clients: confluent-kafka
(librdkafka) and Kafka's own Java client (its ``ProducerPerformance`` tool).

The producer is configured as confluent-kafka's docs recommend for throughput, the same
for both targets: one thread, ``linger.ms`` 10, ``batch.size`` 1 MB, no compression,
``acks=all`` with its default idempotence, 64 MiB of client buffer; records are 1 KiB of
random (incompressible) bytes. Each run has a warm-up, then a steady-state window
(default 20 s) in which the producer keeps the buffer full: throughput is the payload
acknowledged inside the window, latency (p50/p99) is librdkafka's own per-message
produce-to-ack time (``msg.latency()``, sampled: with the buffer kept full this is
mostly time queued in the client, about buffer / throughput), request latency (rtt
p50/p99) is librdkafka's ProduceRequest round trip from its statistics (the broker's
ack latency without the client's queue: mean of the per-second p50s, highest per-second
p99, in the window), CPU is each process's CPU seconds in the window per GiB
acknowledged (benchlib.cpu_seconds: this client, the MemQ broker, Kafka, moto), with
each write path's total (``cpu_total``, benchlib.CPU_TOTAL_METHOD: Kafka counted 3
times, for replication factor 3) and MemQ's over Kafka's (``cpu_vs_kafka``).

  (a) MemQ: a broker process with a ``kafka_listener``, S3 storage on the local moto,
      notifications to the local Apache Kafka (acks=-1: the object is stored
      and its pointer acknowledged), the topic with ``--partitions`` partitions (8 by
      default, MemQ's default ``notification.partitions``, which the Kafka port shows);
  (a16) the same with ``kafka_listener.partitions: 16`` (what docs/ingest.md recommends
      for Kafka-port topics: a MemQ partition is only a routing label, and librdkafka's
      idempotent producer keeps one request in flight per partition);
  (b) the local Apache Kafka itself (the stack's one KRaft node), into a topic with the
      same ``--partitions`` made with AdminClient (the dev Kafka does not auto-create).

  (ja) and (jb): Kafka's Java producer, ``ProducerPerformance`` from the stack's Kafka
      jars (one thread, ``--throughput -1``, 1 KiB records), into (a)'s MemQ broker
      set-up and into Apache Kafka, with the settings above in the Java client's names
      (``JAVA_PRODUCER``). The tool runs a fixed number of records, chosen to last the
      JVM's start, the warm-up and the window at the rate last measured for that target
      (the Java run before; in the first repetition twice the confluent-kafka run's
      rate, so that a faster Java client still fills the window); the window is
      cut from its 5 s reporting lines (benchmarks/kafka_perf.py), or is the whole run
      (CPU from JVM start to exit) when too short for two lines after the warm-up, as in
      ``--quick``. Its latency figures are the tool's summary over the whole run.

``ratio_MBps`` is (a) / (b); ``ratio_MBps_16p`` is (a16) / (b); ``ratio_MBps_java`` is
(ja) / (jb).

Writes ``benchmarks/results/kafka_ingest.json``.

    python benchmarks/bench_kafka_ingest.py [--quick] [--seconds S] [--reps N]
        [--partitions N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib
import kafka_perf
from benchlib import eprint, percentile

RECORD = 1024
#: MemQ's default notification.partitions (what its Kafka port shows unless set).
PARTITIONS = 8
GiB = 1 << 30
PRODUCER = {
    "linger.ms": 10,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "acks": "all",
    "enable.idempotence": True,
    "queue.buffering.max.kbytes": 64 * 1024,
}


#: The same producer settings in the Java client's names. docs/ingest.md's advice for
#: the Kafka port is on the broker's side (``kafka_listener.partitions`` 8 or more,
#: ``batch.ms`` 50-200, ``batch.bytes`` 8 MiB), which (a) has.
JAVA_PRODUCER = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 10,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "buffer.memory": 64 << 20,
}

LIBRDKAFKA = ("memq_kafka_listener", "memq_kafka_listener_16p", "kafka_direct")
JAVA = ("java_memq_kafka_listener", "java_kafka_direct")
VARIANTS = (*LIBRDKAFKA, *JAVA)
#: (MemQ row, its Kafka row, the ratio's name)
PAIRS = (
    ("memq_kafka_listener", "kafka_direct", "ratio_MBps"),
    ("memq_kafka_listener_16p", "kafka_direct", "ratio_MBps_16p"),
    ("java_memq_kafka_listener", "java_kafka_direct", "ratio_MBps_java"),
)


def broker_cfg(
    state: Any,
    batch_ms: int,
    partitions: int | None = None,
    bucket: str | None = None,
    topic_partitions: int = PARTITIONS,
) -> dict[str, Any]:
    store = benchlib.storage_config(
        "s3", bucket=bucket or state.bucket, endpoint=state.s3_endpoint, max_connections=8
    )
    return benchlib.broker_config(
        state, "bench-kafka-listener", store, [{"name": "bench-kafka-ingest"}],
        partitions=topic_partitions, batch={"bytes": 8 << 20, "ms": batch_ms},
        topic_defaults={"ring_size": 4},
        kafka_listener={"port": 0, **({"partitions": partitions} if partitions else {})},
        upload_threads=8,
    )  # fmt: skip


def drive(
    bootstrap: str,
    topic: str,
    pid: int | None,
    warmup: float,
    seconds: float,
    others: Mapping[str, int | None] | None = None,
) -> dict[str, Any]:
    """One producer thread keeps the client buffer full; figures over the window.
    ``others``: more processes whose CPU seconds per GiB to report (this client, S3...)."""
    procs: dict[str, int | None] = {"client": os.getpid(), **(others or {})}
    cpu_others0: dict[str, float] = {}
    from confluent_kafka import Producer

    pool = [os.urandom(RECORD) for _ in range(4096)]
    state = {"acked": 0, "failed": 0, "first_error": None, "measuring": False}
    lat: list[float] = []
    rtt: list[tuple[float, float]] = []  # per statistics interval: (p50, p99) seconds

    def stats(doc: str) -> None:
        if not state["measuring"]:
            return
        for b in json.loads(doc)["brokers"].values():
            r = b.get("rtt") or {}
            if b.get("nodeid", -1) >= 0 and r.get("cnt"):
                rtt.append((r["p50"] / 1e6, r["p99"] / 1e6))

    p = Producer(
        {"bootstrap.servers": bootstrap, **PRODUCER,
         "statistics.interval.ms": 1000, "stats_cb": stats}
    )  # fmt: skip

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            state["failed"] += 1
            state["first_error"] = state["first_error"] or str(err)
            return
        if state["measuring"]:
            state["acked"] += 1
            if state["acked"] % 16 == 0:
                lat.append(msg.latency())

    p.produce(topic, b"warm-up")
    assert p.flush(60) == 0, "the warm-up record was not acknowledged"
    t0 = time.monotonic()
    t_start = t0 + warmup
    t_end = t_start + seconds
    cpu0: float | None = None
    w0 = t_start
    i = 0
    while True:
        now = time.monotonic()
        if not state["measuring"] and now >= t_start:
            state["measuring"] = True
            cpu0 = benchlib.cpu_seconds(pid) if pid else None
            cpu_others0 = benchlib.cpu_now(procs)
            w0 = now
        if now >= t_end:
            break
        try:
            p.produce(topic, pool[i % len(pool)], on_delivery=report)
            i += 1
        except BufferError:
            p.poll(0.005)
            continue
        if i % 256 == 0:
            p.poll(0)
    window = time.monotonic() - w0
    state["measuring"] = False
    cpu = benchlib.cpu_seconds(pid) - cpu0 if pid and cpu0 is not None else None
    cpu_end = benchlib.cpu_now(procs)
    cpu_others = {k: cpu_end[k] - v for k, v in cpu_others0.items() if k in cpu_end}
    left = p.flush(120)
    acked_bytes = state["acked"] * RECORD
    return {
        "window_s": round(window, 2),
        "records_acked": state["acked"],
        "MBps": round(acked_bytes / window / 1e6, 2),
        "ack_p50_ms": round(percentile(lat, 0.5) * 1000, 1),
        "ack_p99_ms": round(percentile(lat, 0.99) * 1000, 1),
        "rtt_p50_ms": round(sum(x[0] for x in rtt) / len(rtt) * 1000, 1) if rtt else None,
        "rtt_p99_ms": round(max(x[1] for x in rtt) * 1000, 1) if rtt else None,
        "server_cpu_s_per_GiB": round(cpu / (acked_bytes / GiB), 2)
        if cpu is not None and acked_bytes
        else None,
        "cpu_s_per_GiB": {
            k: round(v / (acked_bytes / GiB), 2) for k, v in cpu_others.items() if acked_bytes
        },
        "failed": state["failed"] + left,
        "first_error": state["first_error"],
    }


def drive_java(
    bootstrap: str,
    topic: str,
    server: str,
    procs: dict[str, int],
    warmup: float,
    seconds: float,
    rate_MBps: float,  # noqa: N803
) -> dict[str, Any]:
    """Kafka's Java producer (``ProducerPerformance``) for about warm-up + ``seconds`` at
    ``rate_MBps``; ``server``: the label in ``procs`` of the process receiving."""
    records = kafka_perf.num_records(rate_MBps, RECORD, warmup, seconds)
    result = kafka_perf.run(
        bootstrap, topic, procs, records=records, record=RECORD, props=JAVA_PRODUCER,
        warmup=warmup,
    )  # fmt: skip
    result["server_cpu_s_per_GiB"] = result["cpu_s_per_GiB"].get(server)
    return result


def _memq(
    state: Any,
    batch_ms: int,
    partitions: int | None,
    warmup: float,
    seconds: float,
    topic_partitions: int = PARTITIONS,
    java_rate: float | None = None,
) -> Any:
    """One run into a fresh MemQ broker's Kafka port: confluent-kafka, or Kafka's Java
    producer sized for ``java_rate`` MB/s when that is given."""
    name = f"bench-kafka-listener-{partitions}"
    # each run on an empty moto: the objects of earlier runs (GiBs) slow it down
    with (
        benchlib.fresh_bucket(state, "bench-kafka-ingest") as bucket,
        benchlib.broker_process(
            state, name, broker_cfg(state, batch_ms, partitions, bucket, topic_partitions)
        ) as info,
    ):
        shown = partitions or topic_partitions
        client = "confluent-kafka" if java_rate is None else "Java producer"
        eprint(f"{client} -> MemQ Kafka listener {info['kafka']} ({shown} partitions): "
               f"{seconds:.0f} s window")  # fmt: skip
        procs = {"broker": info["pid"], **benchlib.stack_pids(state)}
        topic = "bench-kafka-ingest"
        if java_rate is None:
            result = drive(info["kafka"], topic, info["pid"], warmup, seconds, procs)
        else:
            result = drive_java(info["kafka"], topic, "broker", procs, warmup, seconds, java_rate)
        sealed = _sealed_by_trigger(info["http"])
    result["batches_sealed_by_trigger"] = sealed
    result["cpu_total"] = benchlib.cpu_totals(result["cpu_s_per_GiB"], memq=True)
    return result


def _direct(
    state: Any, partitions: int, warmup: float, seconds: float, java_rate: float | None = None
) -> dict[str, Any]:
    """One run straight into the stack's Apache Kafka, into a new topic of
    ``partitions``: confluent-kafka, or the Java producer for ``java_rate`` MB/s."""
    from memq.storage_handlers.kafka_sink import ensure_topic

    client = "confluent-kafka" if java_rate is None else "Java producer"
    eprint(f"{client} -> Apache Kafka {state.kafka_bootstrap}: {seconds:.0f} s window")
    procs = benchlib.stack_pids(state)
    # A new topic each time, deleted after: only to bound the disk a run uses (each
    # window writes GiBs of log segments into the stack's state dir).
    topic = f"bench-kafka-ingest-direct-{partitions}-{uuid.uuid4().hex[:8]}"
    ensure_topic(state.kafka_bootstrap, topic, partitions)
    try:
        if java_rate is None:
            bootstrap, pid = state.kafka_bootstrap, procs.get("kafka")
            result = drive(bootstrap, topic, pid, warmup, seconds, procs)
        else:
            result = drive_java(
                state.kafka_bootstrap, topic, "kafka", procs, warmup, seconds, java_rate
            )
    finally:
        benchlib.delete_kafka_topic(state.kafka_bootstrap, topic)
    result["cpu_total"] = benchlib.cpu_totals(result["cpu_s_per_GiB"], memq=False)
    return result


def _sealed_by_trigger(http: str) -> dict[str, int]:
    """memq_batches_sealed_total by trigger (age, size, waiting, ...) from /metrics."""
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, int] = {}
    for m in re.finditer(
        r'^memq_batches_sealed_total\{[^}]*trigger="(\w+)"[^}]*\} (\S+)$', text, re.M
    ):
        out[m[1]] = out.get(m[1], 0) + int(float(m[2]))
    return out


def run(
    seconds: float, warmup: float, batch_ms: int, reps: int = 1, partitions: int = PARTITIONS
) -> dict[str, Any]:
    """Every variant ``reps`` times in turn on one stack. The variants' entries are the
    last repetition's; each ratio is computed within a repetition, and ``ratio_MBps``,
    ``ratio_MBps_16p`` and ``ratio_MBps_java`` are the medians (``ratios`` has min /
    median / max)."""
    runs: list[dict[str, Any]] = []
    with benchlib.private_stack() as state:
        server = benchlib.kafka_server(state)
        rate: dict[str, float] = {}  # the Java producer's last rate per target
        for rep in range(reps):
            eprint(f"repetition {rep + 1}/{reps}")
            r: dict[str, Any] = {
                "memq_kafka_listener": _memq(state, batch_ms, None, warmup, seconds, partitions),
                "memq_kafka_listener_16p": _memq(state, batch_ms, 16, warmup, seconds, partitions),
                "kafka_direct": _direct(state, partitions, warmup, seconds),
            }  # fmt: skip
            # The Java run's length comes from a rate: its own last one, or in the first
            # repetition twice confluent-kafka's, so that a faster Java client still
            # fills a steady window (a slower one only runs longer; a --quick run is
            # measured whole and keeps its length).
            guess = 2.0 if seconds >= 2 * kafka_perf.REPORT_S else 1.0
            r["java_memq_kafka_listener"] = _memq(
                state, batch_ms, None, warmup, seconds, partitions,
                java_rate=rate.get("memq", guess * r["memq_kafka_listener"]["MBps"]),
            )  # fmt: skip
            r["java_kafka_direct"] = _direct(
                state, partitions, warmup, seconds,
                java_rate=rate.get("direct", guess * r["kafka_direct"]["MBps"]),
            )  # fmt: skip
            rate = {"memq": r["java_memq_kafka_listener"]["MBps"],
                    "direct": r["java_kafka_direct"]["MBps"]}  # fmt: skip
            for memq, direct, name in PAIRS:
                r[name] = _ratio(r[memq], r[direct])
                mine, theirs = r[memq]["cpu_total"], r[direct]["cpu_total"]
                if mine is not None and theirs is not None and theirs["total"] > 0:
                    r[memq]["cpu_vs_kafka"] = round(mine["total"] / theirs["total"], 3)
            runs.append(r)
    names = [name for _, _, name in PAIRS]
    ratios = {
        key: benchlib.spread([r[key] for r in runs])
        if all(r[key] is not None for r in runs)
        else None
        for key in names
    }
    shown = {name: ("MBps", "ack_p99_ms", "rtt_p99_ms") for name in LIBRDKAFKA}
    shown.update({name: ("MBps", "window", "window_s") for name in JAVA})
    return {
        "benchmark": "kafka_ingest",
        "machine": benchlib.machine(),
        "kafka_server": server,
        "record_bytes": RECORD,
        "memq_batch_ms": batch_ms,
        "partitions": partitions,
        "producer": PRODUCER,
        "java_producer": JAVA_PRODUCER,
        "cpu_total_method": benchlib.CPU_TOTAL_METHOD,
        "reps": reps,
        **{name: runs[-1][name] for name in VARIANTS},
        **{key: (q["median"] if q else None) for key, q in ratios.items()},
        "ratios": ratios,
        "runs": [
            {
                **{name: {k: r[name][k] for k in shown[name]} for name in VARIANTS},
                **{key: r[key] for key in names},
            }
            for r in runs
        ],
    }


def _ratio(memq: dict[str, Any], direct: dict[str, Any]) -> float | None:
    return round(memq["MBps"] / direct["MBps"], 2) if direct["MBps"] else None


def _cpu(r: dict[str, Any]) -> str:
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in (r.get("cpu_s_per_GiB") or {}).items())
    total = r.get("cpu_total")
    vs = f" ({r['cpu_vs_kafka']:.2f}x Kafka's)" if "cpu_vs_kafka" in r else ""
    return cpu + (f"; total {total['total']:.2f}{vs}" if total else "")


def print_table(doc: dict[str, Any]) -> None:
    print(f"Kafka: {doc['kafka_server']}; topic partitions: {doc['partitions']} "
          "(memq_kafka_listener_16p shows 16 on the Kafka port)")  # fmt: skip
    print(f"{'confluent-kafka into':31} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'rtt p50':>8} "
          f"{'rtt p99':>8} {'CPU s/GiB':>10} {'failed':>7}")  # fmt: skip
    for name in LIBRDKAFKA:
        r = doc[name]
        cpu = "-" if r["server_cpu_s_per_GiB"] is None else f"{r['server_cpu_s_per_GiB']:.2f}"
        print(f"{name:31} {r['MBps']:>8.2f} {r['ack_p50_ms']:>8.1f} {r['ack_p99_ms']:>8.1f} "
              f"{r['rtt_p50_ms'] or 0:>8.1f} {r['rtt_p99_ms'] or 0:>8.1f} {cpu:>10} "
              f"{r['failed']:>7}")  # fmt: skip
    print(f"{'Java ProducerPerformance into':31} {'MB/s':>8} {'window':>10} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'tool MB/s':>10} {'CPU s/GiB':>10} {'failed':>7}")  # fmt: skip
    for name in JAVA:
        r = doc[name]
        t = r["tool_summary"]
        cpu = "-" if r["server_cpu_s_per_GiB"] is None else f"{r['server_cpu_s_per_GiB']:.2f}"
        window = f"{r['window_s']:.0f} s" + (" (run)" if r["window"] != "steady" else "")
        print(f"{name:31} {r['MBps']:>8.2f} {window:>10} {t['lat_p50_ms']:>8.0f} "
              f"{t['lat_p99_ms']:>8.0f} {t['MBps']:>10.2f} {cpu:>10} {r['failed']:>7}")  # fmt: skip
    for name in VARIANTS:
        print(f"{name:31} CPU s/GiB: {_cpu(doc[name])}")
    print(f"CPU totals: {doc['cpu_total_method']}.")
    names = [name for _, _, name in PAIRS]
    if doc["reps"] > 1:
        for i, r in enumerate(doc["runs"], 1):
            print(f"repetition {i}: " + ", ".join(f"{n} {r[n]['MBps']:.1f} MB/s" for n in VARIANTS)
                  + "; " + ", ".join(f"{k} {r[k]}" for k in names))  # fmt: skip
        q = doc["ratios"]
        print("MemQ / direct throughput, min / median / max: "
              + "; ".join(f"{k} " + (f"{q[k]['min']} / {q[k]['median']} / {q[k]['max']}"
                                     if q[k] else "-") for k in names))  # fmt: skip
    else:
        print("MemQ / direct throughput: " + ", ".join(f"{k} {doc[k]}" for k in names))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke mode: a 3 s window")
    ap.add_argument("--seconds", type=float, default=None, help="steady-state window (20)")
    ap.add_argument("--batch-ms", type=int, default=50, help="MemQ's batch.ms (50)")
    ap.add_argument("--reps", type=int, default=1, help="repetitions of every variant (1)")
    ap.add_argument("--partitions", type=int, default=PARTITIONS,
                    help=f"partitions of the topic, in MemQ and in the direct run ({PARTITIONS})")  # fmt: skip
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "kafka_ingest.json")
    args = ap.parse_args(argv)
    if args.reps < 1:
        raise SystemExit("--reps must be at least 1")
    if not 1 <= args.partitions <= 1000:
        raise SystemExit("--partitions must be 1-1000")
    seconds = args.seconds or (3.0 if args.quick else 20.0)
    doc = run(seconds, warmup=1.0 if args.quick else 5.0, batch_ms=args.batch_ms, reps=args.reps,
              partitions=args.partitions)  # fmt: skip
    print_table(doc)
    benchlib.write_result(doc, args.out)
    failed = sum(doc[name]["failed"] for name in VARIANTS if not name.endswith("kafka_direct"))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
