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

  (da), (db), (jda), (jdb): both clients with their defaults (nothing set but
      bootstrap.servers: what a team's first benchmark runs), into a broker with the
      topic settings of a `memq dev up` broker (its batch.ms, batch.bytes, ring_size and
      notification partitions, which its Kafka port shows) and into Apache Kafka with a
      topic of as many partitions.

``ratio_MBps`` is (a) / (b); ``ratio_MBps_16p`` is (a16) / (b); ``ratio_MBps_java`` is
(ja) / (jb); ``ratio_MBps_defaults`` (da) / (db); ``ratio_MBps_java_defaults`` (jda) /
(jdb). ``--only`` runs some rows (a ratio needs both of its rows).

Writes ``benchmarks/results/kafka_ingest.json``.

    python benchmarks/bench_kafka_ingest.py [--quick] [--seconds S] [--reps N]
        [--partitions N] [--only ROW,...] [--out PATH]
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

#: The clients as a new user runs them: nothing set but where to write (confluent-kafka:
#: acks=all, no idempotence, linger.ms 5, batch.size 1 MB; Kafka's Java client 4.1:
#: acks=all, idempotent, linger.ms 5, batch.size 16 KiB, max.request.size 1 MiB,
#: buffer.memory 32 MiB, 5 requests in flight per connection).
DEFAULTS: dict[str, Any] = {}
JAVA_DEFAULTS: dict[str, Any] = {}

LIBRDKAFKA = ("memq_kafka_listener", "memq_kafka_listener_16p", "kafka_direct")
JAVA = ("java_memq_kafka_listener", "java_kafka_direct")
#: Both clients with their defaults into a broker set up as `memq dev up` sets it up
#: (its batch.ms, batch.bytes, ring_size and topic partitions), and into Kafka with a
#: topic of those partitions: what a team's first benchmark of the dev stack sees.
LIBRDKAFKA_DEFAULTS = ("defaults_memq_kafka_listener", "defaults_kafka_direct")
JAVA_DEFAULTS_ROWS = ("java_defaults_memq_kafka_listener", "java_defaults_kafka_direct")
VARIANTS = (*LIBRDKAFKA, *JAVA, *LIBRDKAFKA_DEFAULTS, *JAVA_DEFAULTS_ROWS)
#: (MemQ row, its Kafka row, the ratio's name)
PAIRS = (
    ("memq_kafka_listener", "kafka_direct", "ratio_MBps"),
    ("memq_kafka_listener_16p", "kafka_direct", "ratio_MBps_16p"),
    ("java_memq_kafka_listener", "java_kafka_direct", "ratio_MBps_java"),
    ("defaults_memq_kafka_listener", "defaults_kafka_direct", "ratio_MBps_defaults"),
    ("java_defaults_memq_kafka_listener", "java_defaults_kafka_direct",
     "ratio_MBps_java_defaults"),
)  # fmt: skip


def broker_cfg(
    state: Any,
    batch_ms: int,
    partitions: int | None = None,
    bucket: str | None = None,
    topic_partitions: int = PARTITIONS,
    dev: bool = False,
) -> dict[str, Any]:
    """The benchmark broker; ``dev``: with the topic settings of a `memq dev up` broker
    (:func:`dev_topic`) instead of ``batch_ms``, ``topic_partitions`` and ring_size 4."""
    store = benchlib.storage_config(
        "s3", bucket=bucket or state.bucket, endpoint=state.s3_endpoint, max_connections=8
    )
    batch: dict[str, Any] = {"bytes": 8 << 20, "ms": batch_ms}
    ring = 4
    if dev:
        d = dev_topic(state)
        batch, ring, topic_partitions = d["batch"], d["ring_size"], d["notification_partitions"]
        partitions = partitions or d["kafka_listener_partitions"]
    return benchlib.broker_config(
        state, "bench-kafka-listener", store, [{"name": "bench-kafka-ingest"}],
        partitions=topic_partitions, batch=batch, topic_defaults={"ring_size": ring},
        kafka_listener={"port": 0, **({"partitions": partitions} if partitions else {})},
        upload_threads=8,
    )  # fmt: skip


def dev_topic(state: Any) -> dict[str, Any]:
    """The topic settings of a `memq dev up` broker (memq/devstack/brokers.py): batch,
    ring_size, notification partitions, its Kafka port's partitions (None: the
    notification partitions) and the partitions that port shows."""
    from memq.devstack.brokers import dev_broker_config

    cfg = dev_broker_config("bench", state.s3, state.kafka)
    d = cfg["topic_defaults"]
    listener = cfg["kafka_listener"].get("partitions")
    return {"batch": d["batch"], "ring_size": d["ring_size"],
            "notification_partitions": d["notification"]["partitions"],
            "kafka_listener_partitions": listener,
            "partitions": listener or d["notification"]["partitions"]}  # fmt: skip


def drive(
    bootstrap: str,
    topic: str,
    pid: int | None,
    warmup: float,
    seconds: float,
    others: Mapping[str, int | None] | None = None,
    producer: Mapping[str, Any] = PRODUCER,
) -> dict[str, Any]:
    """One producer thread keeps the client buffer full; figures over the window.
    ``others``: more processes whose CPU seconds per GiB to report (this client, S3...);
    ``producer``: its settings."""
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
        {"bootstrap.servers": bootstrap, **producer,
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
    props: dict[str, Any] = JAVA_PRODUCER,
) -> dict[str, Any]:
    """Kafka's Java producer (``ProducerPerformance``) for about warm-up + ``seconds`` at
    ``rate_MBps``; ``server``: the label in ``procs`` of the process receiving."""
    records = kafka_perf.num_records(rate_MBps, RECORD, warmup, seconds)
    result = kafka_perf.run(
        bootstrap, topic, procs, records=records, record=RECORD, props=props,
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
    client: Mapping[str, Any] | None = None,
    dev: bool = False,
) -> Any:
    """One run into a fresh MemQ broker's Kafka port: confluent-kafka, or Kafka's Java
    producer sized for ``java_rate`` MB/s when that is given; ``client``: its settings
    (default: the tuned ones); ``dev``: the broker set up as `memq dev up`'s."""
    name = f"bench-kafka-listener-{partitions}"
    # each run on an empty moto: the objects of earlier runs (GiBs) slow it down
    cfg = broker_cfg(state, batch_ms, partitions, None, topic_partitions, dev=dev)
    with (
        benchlib.fresh_bucket(state, "bench-kafka-ingest") as bucket,
        benchlib.broker_process(
            state, name, broker_cfg(state, batch_ms, partitions, bucket, topic_partitions, dev)
        ) as info,
    ):
        shown = (cfg["kafka_listener"].get("partitions")
                 or cfg["topic_defaults"]["notification"]["partitions"])  # fmt: skip
        who = "confluent-kafka" if java_rate is None else "Java producer"
        eprint(f"{who} -> MemQ Kafka listener {info['kafka']} ({shown} partitions"
               f"{', dev broker' if dev else ''}): {seconds:.0f} s window")  # fmt: skip
        procs = {"broker": info["pid"], **benchlib.stack_pids(state)}
        topic = "bench-kafka-ingest"
        if java_rate is None:
            result = drive(info["kafka"], topic, info["pid"], warmup, seconds, procs,
                           PRODUCER if client is None else client)  # fmt: skip
        else:
            result = drive_java(info["kafka"], topic, "broker", procs, warmup, seconds, java_rate,
                                JAVA_PRODUCER if client is None else dict(client))  # fmt: skip
        sealed = _sealed_by_trigger(info["http"])
    result["batches_sealed_by_trigger"] = sealed
    result["cpu_total"] = benchlib.cpu_totals(result["cpu_s_per_GiB"], memq=True)
    return result


def _direct(
    state: Any,
    partitions: int,
    warmup: float,
    seconds: float,
    java_rate: float | None = None,
    client: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One run straight into the stack's Apache Kafka, into a new topic of
    ``partitions``: confluent-kafka, or the Java producer for ``java_rate`` MB/s;
    ``client``: its settings (default: the tuned ones)."""
    from memq.storage_handlers.kafka_sink import ensure_topic

    who = "confluent-kafka" if java_rate is None else "Java producer"
    eprint(f"{who} -> Apache Kafka {state.kafka_bootstrap} ({partitions} partitions): "
           f"{seconds:.0f} s window")  # fmt: skip
    procs = benchlib.stack_pids(state)
    # A new topic each time, deleted after: only to bound the disk a run uses (each
    # window writes GiBs of log segments into the stack's state dir).
    topic = f"bench-kafka-ingest-direct-{partitions}-{uuid.uuid4().hex[:8]}"
    ensure_topic(state.kafka_bootstrap, topic, partitions)
    try:
        if java_rate is None:
            bootstrap, pid = state.kafka_bootstrap, procs.get("kafka")
            result = drive(bootstrap, topic, pid, warmup, seconds, procs,
                           PRODUCER if client is None else client)  # fmt: skip
        else:
            result = drive_java(
                state.kafka_bootstrap, topic, "kafka", procs, warmup, seconds, java_rate,
                JAVA_PRODUCER if client is None else dict(client),
            )  # fmt: skip
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


#: The Java producer's rate for sizing its first run, when no confluent-kafka run of the
#: same target came before it in the repetition (MB/s).
JAVA_FIRST_GUESS = 30.0


def _row(
    name: str,
    state: Any,
    r: dict[str, Any],
    rate: dict[str, float],
    *,
    batch_ms: int,
    partitions: int,
    dev_partitions: int,
    warmup: float,
    seconds: float,
    java_guess: float = JAVA_FIRST_GUESS,
) -> dict[str, Any]:
    """One run of row ``name``; ``r``: this repetition's rows so far; ``rate``: each Java
    row's last rate; ``java_guess``: a Java row's rate when neither says one (MB/s)."""
    # A Java run's length comes from a rate: its own last one, or in the first
    # repetition twice that of the confluent-kafka row of the same target, so that a
    # faster Java client still fills a steady window (a slower one only runs longer; a
    # --quick run is measured whole and keeps its length).
    guess = 2.0 if seconds >= 2 * kafka_perf.REPORT_S else 1.0
    base = {"java_memq_kafka_listener": "memq_kafka_listener",
            "java_kafka_direct": "kafka_direct",
            "java_defaults_memq_kafka_listener": "defaults_memq_kafka_listener",
            "java_defaults_kafka_direct": "defaults_kafka_direct"}.get(name)  # fmt: skip
    java_rate = rate.get(name) or (
        guess * r[base]["MBps"] if base in r and r[base]["MBps"] else java_guess
    )
    args = (warmup, seconds)
    if name == "memq_kafka_listener":
        return _memq(state, batch_ms, None, *args, partitions)
    if name == "memq_kafka_listener_16p":
        return _memq(state, batch_ms, 16, *args, partitions)
    if name == "kafka_direct":
        return _direct(state, partitions, *args)
    if name == "java_memq_kafka_listener":
        return _memq(state, batch_ms, None, *args, partitions, java_rate=java_rate)
    if name == "java_kafka_direct":
        return _direct(state, partitions, *args, java_rate=java_rate)
    if name == "defaults_memq_kafka_listener":
        return _memq(state, batch_ms, None, *args, client=DEFAULTS, dev=True)
    if name == "defaults_kafka_direct":
        return _direct(state, dev_partitions, *args, client=DEFAULTS)
    if name == "java_defaults_memq_kafka_listener":
        return _memq(state, batch_ms, None, *args, java_rate=java_rate, client=JAVA_DEFAULTS,
                     dev=True)  # fmt: skip
    if name == "java_defaults_kafka_direct":
        return _direct(state, dev_partitions, *args, java_rate=java_rate, client=JAVA_DEFAULTS)
    raise ValueError(f"no row {name!r}")


def run(
    seconds: float,
    warmup: float,
    batch_ms: int,
    reps: int = 1,
    partitions: int = PARTITIONS,
    only: list[str] | None = None,
    java_guess: float = JAVA_FIRST_GUESS,
) -> dict[str, Any]:
    """Every variant (or those in ``only``) ``reps`` times in turn on one stack. The
    variants' entries are the last repetition's; ``rows`` has each one's min / median /
    max MB/s and CPU-s per GiB per process over the repetitions; each ratio is computed
    within a repetition, and the ``ratio_*`` keys are the medians (``ratios`` has min /
    median / max)."""
    chosen = [n for n in VARIANTS if only is None or n in only]
    runs: list[dict[str, Any]] = []
    with benchlib.private_stack() as state:
        server = benchlib.kafka_server(state)
        dev = dev_topic(state)
        rate: dict[str, float] = {}  # the Java producer's last rate per row
        for rep in range(reps):
            eprint(f"repetition {rep + 1}/{reps}")
            r: dict[str, Any] = {}
            for name in chosen:
                r[name] = _row(name, state, r, rate, batch_ms=batch_ms, partitions=partitions,
                               dev_partitions=dev["partitions"], warmup=warmup, seconds=seconds,
                               java_guess=java_guess)  # fmt: skip
            rate.update({n: r[n]["MBps"] for n in (*JAVA, *JAVA_DEFAULTS_ROWS) if n in r})
            for memq, direct, name in PAIRS:
                if memq not in r or direct not in r:
                    continue
                r[name] = _ratio(r[memq], r[direct])
                mine, theirs = r[memq]["cpu_total"], r[direct]["cpu_total"]
                if mine is not None and theirs is not None and theirs["total"] > 0:
                    r[memq]["cpu_vs_kafka"] = round(mine["total"] / theirs["total"], 3)
            runs.append(r)
    names = [name for memq, direct, name in PAIRS if memq in chosen and direct in chosen]
    ratios = {
        key: benchlib.spread([r[key] for r in runs])
        if all(r[key] is not None for r in runs)
        else None
        for key in names
    }
    shown = {name: ("MBps", "ack_p99_ms", "rtt_p99_ms")
             for name in (*LIBRDKAFKA, *LIBRDKAFKA_DEFAULTS)}  # fmt: skip
    shown.update({name: ("MBps", "window", "window_s") for name in (*JAVA, *JAVA_DEFAULTS_ROWS)})
    return {
        "benchmark": "kafka_ingest",
        "machine": benchlib.machine(),
        "kafka_server": server,
        "record_bytes": RECORD,
        "memq_batch_ms": batch_ms,
        "partitions": partitions,
        "dev_broker": dev,
        "producer": PRODUCER,
        "java_producer": JAVA_PRODUCER,
        "defaults_producer": DEFAULTS,
        "java_defaults_producer": JAVA_DEFAULTS,
        "cpu_total_method": benchlib.CPU_TOTAL_METHOD,
        "reps": reps,
        "variants": chosen,
        **{name: runs[-1][name] for name in chosen},
        **{key: (q["median"] if q else None) for key, q in ratios.items()},
        "ratios": ratios,
        "rows": {name: benchlib.spread_rows(runs, name) for name in chosen},
        "runs": [
            {
                **{name: {k: r[name][k] for k in shown[name]} for name in chosen},
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
    chosen = doc["variants"]
    print(f"Kafka: {doc['kafka_server']}; topic partitions: {doc['partitions']} "
          "(memq_kafka_listener_16p shows 16 on the Kafka port); defaults_* rows: "
          f"the clients' defaults into a dev-stack broker {doc['dev_broker']}")  # fmt: skip
    print(f"{'confluent-kafka into':34} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'rtt p50':>8} "
          f"{'rtt p99':>8} {'CPU s/GiB':>10} {'failed':>7}")  # fmt: skip
    for name in (n for n in (*LIBRDKAFKA, *LIBRDKAFKA_DEFAULTS) if n in chosen):
        r = doc[name]
        cpu = "-" if r["server_cpu_s_per_GiB"] is None else f"{r['server_cpu_s_per_GiB']:.2f}"
        print(f"{name:34} {r['MBps']:>8.2f} {r['ack_p50_ms']:>8.1f} {r['ack_p99_ms']:>8.1f} "
              f"{r['rtt_p50_ms'] or 0:>8.1f} {r['rtt_p99_ms'] or 0:>8.1f} {cpu:>10} "
              f"{r['failed']:>7}")  # fmt: skip
    print(f"{'Java ProducerPerformance into':34} {'MB/s':>8} {'window':>10} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'tool MB/s':>10} {'CPU s/GiB':>10} {'failed':>7}")  # fmt: skip
    for name in (n for n in (*JAVA, *JAVA_DEFAULTS_ROWS) if n in chosen):
        r = doc[name]
        t = r["tool_summary"]
        cpu = "-" if r["server_cpu_s_per_GiB"] is None else f"{r['server_cpu_s_per_GiB']:.2f}"
        window = f"{r['window_s']:.0f} s" + (" (run)" if r["window"] != "steady" else "")
        print(f"{name:34} {r['MBps']:>8.2f} {window:>10} {t['lat_p50_ms']:>8.0f} "
              f"{t['lat_p99_ms']:>8.0f} {t['MBps']:>10.2f} {cpu:>10} {r['failed']:>7}")  # fmt: skip
    for name in chosen:
        sealed = doc[name].get("batches_sealed_by_trigger")
        print(f"{name:34} CPU s/GiB: {_cpu(doc[name])}"
              + (f"; batches sealed by {sealed}" if sealed else ""))  # fmt: skip
    print(f"CPU totals: {doc['cpu_total_method']}.")
    names = list(doc["ratios"])
    if doc["reps"] > 1:
        for i, r in enumerate(doc["runs"], 1):
            print(f"repetition {i}: " + ", ".join(f"{n} {r[n]['MBps']:.1f} MB/s" for n in chosen)
                  + "; " + ", ".join(f"{k} {r[k]}" for k in names))  # fmt: skip
        for name in chosen:
            q = doc["rows"][name]["MBps"]
            print(f"{name:34} MB/s min / median / max: {q['min']} / {q['median']} / {q['max']}")
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
    ap.add_argument("--only", default=None,
                    help=f"comma-separated rows to run (default: all of {', '.join(VARIANTS)})")  # fmt: skip
    ap.add_argument("--java-guess-mbps", type=float, default=JAVA_FIRST_GUESS,
                    help="the rate that sizes a Java row's first run when no confluent-kafka "
                    f"row of its target ran before it ({JAVA_FIRST_GUESS:.0f})")  # fmt: skip
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "kafka_ingest.json")
    args = ap.parse_args(argv)
    if args.reps < 1:
        raise SystemExit("--reps must be at least 1")
    if not 1 <= args.partitions <= 1000:
        raise SystemExit("--partitions must be 1-1000")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    unknown = sorted(set(only or ()) - set(VARIANTS))
    if unknown or only == []:
        raise SystemExit(f"--only: no row {', '.join(unknown) or '(empty)'}: use some of "
                         f"{', '.join(VARIANTS)}")  # fmt: skip
    seconds = args.seconds or (3.0 if args.quick else 20.0)
    doc = run(seconds, warmup=1.0 if args.quick else 5.0, batch_ms=args.batch_ms, reps=args.reps,
              partitions=args.partitions, only=only, java_guess=args.java_guess_mbps)  # fmt: skip
    print_table(doc)
    benchlib.write_result(doc, args.out)
    failed = sum(doc[n]["failed"] for n in doc["variants"] if not n.endswith("kafka_direct"))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
