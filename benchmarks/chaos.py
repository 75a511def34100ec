"""Chaos suite: acks=all load on a 3-broker cluster while faults are injected; the audit
proves zero loss.

Starts its own stack (moto S3, ZooKeeper, and an Apache Kafka that advertises a fault
proxy so that every Kafka connection crosses it), an S3 fault proxy in front of moto, three
clustered brokers (separate processes, S3 through the proxy), an in-process auditor,
``--producers`` producer threads (acks=all, auditing on) and a consumer group (auditing
on). A scheduler with a fixed ``--seed`` injects, at random times, faults drawn from:

- ``kill9``: SIGKILL a broker, restart it 2 s later under the same id;
- ``sigstop``: SIGSTOP a broker for 3 s, then SIGCONT;
- ``s3_503``: the next 30 S3 connections get 503 SlowDown;
- ``s3_reset``: the next 15 S3 connections are reset;
- ``s3_latency``: +100 ms per 64 KiB relayed for 3 s;
- ``s3_stall``: the next 3 S3 connections never answer (the brokers' read timeout cuts them);
- ``zk_restart``: ZooKeeper restarted (sessions survive: tickTime 500 ms, restart < timeout);
- ``kafka_outage``: every Kafka connection refused for 3 s (notifications, consumers,
  audit records).

At the end: producers flush; the consumer must have every acknowledged record (exact
set); with the consumer's default dedup, none twice, and the auditor must count no
duplicate delivery (copies the consumer dropped are reported apart); with ``--no-dedup``
every record consumed twice must come from one block identity (a retried block, not a
second write) and the auditor's duplicate count must show them; the auditor must report,
for the consumer group, zero missing blocks and zero content mismatches over the whole
run (strict); no process started
here may outlive it; each broker's peak RSS must stay under its idle RSS plus its batch
memory plus a fixed overhead. The report lists every fault with the recovery time seen
after it (from injection to the first ack of a record produced after the injection).

``block_copies`` says whether dedup had anything to do: the copies of blocks that reached
the consumer group after the block's first delivery (a retried block stored twice, or a
notification read again after a rebalance), as the consumer dropped them
(``dropped``, its ``duplicate_blocks_dropped`` counter) plus as the application got them
(``delivered``, counted by block id from the records handed out). The ``copies_accounted``
check: with dedup on, none delivered, and the auditor's dropped-copy count equals the
consumer's; with ``--no-dedup``, none dropped, and the auditor's duplicate blocks and extra
records equal what the application got (when audit records were lost on the way, the
auditor's figures may fall short, never exceed). A quick run may see no copy at all (a
kill -9 does not always catch a block in flight): the check holds with zeros too.

    python benchmarks/chaos.py [--quick] [--seconds 90] [--faults 12] [--seed 7] [--no-dedup]

Writes ``benchmarks/results/chaos.json``; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib
from benchlib import eprint

from memq.devstack import DevStack
from memq.devstack.brokers import start_broker
from memq.devstack.faultproxy import FaultProxy
from memq.devstack.kafka import KafkaService
from memq.devstack.procs import ProcessRef, free_port, is_alive, stop, wait_for

KINDS = ["kill9", "sigstop", "s3_503", "s3_reset", "s3_latency", "s3_stall", "zk_restart",
         "kafka_outage"]  # fmt: skip
MiB = 1 << 20
RING_BYTES = 3 * 4 * MiB  # ring_size x batch.bytes


def broker_cfg(name: str, state: Any, s3_url: str, chroot: str) -> dict[str, Any]:
    store = benchlib.storage_config(
        "s3", bucket=state.bucket, endpoint=s3_url, attempts=5, backoff_ms=50,
        backoff_max_ms=1000, deadline_ms=20_000, connect_timeout_ms=2_000,
        read_timeout_ms=4_000,
    )  # fmt: skip
    return benchlib.broker_config(
        state, name, store, None, cluster="chaos",
        partitions=4, notification={"delivery_timeout_ms": 20_000},
        batch={"bytes": 4 * MiB, "ms": 300}, topic_defaults={"ring_size": 3},
        shutdown_timeout_s=20,
        zookeeper={"connect": state.zk_connect, "chroot": chroot, "session_timeout_ms": 6000},
    )  # fmt: skip


class Load:
    """Producer threads (acks=all) recording every ack and failure."""

    def __init__(self, bootstrap: str, topic: str, audit: dict[str, Any], n: int) -> None:
        self.bootstrap, self.topic, self.audit, self.n = bootstrap, topic, audit, n
        self.acked: dict[bytes, float] = {}
        self.produced_at: dict[bytes, float] = {}
        self.failed: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(n)]

    def _run(self, i: int) -> None:
        from memq import Producer

        conf = {"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                "delivery.timeout.ms": 90_000, "request.timeout.ms": 15_000,
                "metadata.max.age.ms": 1000, "producer.id": 7000 + i, **self.audit}  # fmt: skip
        with Producer(conf) as p:
            k = 0
            while not self.stop.is_set():
                v = b"c%d-%08d-" % (i, k) + b"x" * 180
                t = time.monotonic()
                with self.lock:
                    self.produced_at[v] = t

                def cb(err: Any, _md: Any, v: bytes = v) -> None:
                    with self.lock:
                        if err:
                            self.failed.append(f"{type(err).__name__}: {err}")
                        else:
                            self.acked[v] = time.monotonic()

                p.produce(self.topic, v, on_delivery=cb)
                k += 1
                if k % 50 == 0:
                    time.sleep(0.05)  # ~1000 records/s per thread: pacing, not synchronisation
            p.flush(120)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(180)


class Reader:
    """One consumer group member (auditing on) collecting every record it is handed."""

    def __init__(self, bootstrap: str, topic: str, audit: dict[str, Any], dedup: bool) -> None:
        self.got: list[tuple[bytes, int, int, int]] = []
        self.stop = threading.Event()
        self.error: str | None = None
        self.transient: list[str] = []  # retriable errors the application saw and retried
        self.dropped: dict[str, int] = {}  # the consumer's dedup counters
        self.audit_dropped = 0  # audit records the consumer could not deliver
        self.conf = {"bootstrap.servers": bootstrap, "group.id": "chaos-readers",
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 1000, "dedup.enable": dedup, **audit}  # fmt: skip
        self.topic = topic
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        from memq import Consumer
        from memq.errors import MemqError

        c = Consumer(self.conf)
        try:
            c.subscribe(self.topic)
            while not self.stop.is_set():
                try:
                    batch = c.consume(2000, 0.5)
                except MemqError as e:
                    if not e.retriable:
                        raise
                    self.transient.append(type(e).__name__)  # re-fetched on the next poll
                    continue
                for m in batch:
                    self.got.append((m.value, m.producer_id, m.epoch, m.sequence))
        except Exception as e:  # reported as a failed check
            self.error = f"{type(e).__name__}: {e}"
        finally:
            names = ("duplicate_blocks_dropped", "duplicate_records_dropped", "dedup_out_of_window")
            self.dropped = {n: int(getattr(c.stats, n, 0)) for n in names}
            c.close()
            self.audit_dropped = int(c.audit_stats().get("audit_dropped", 0))


def run(
    quick: bool, seconds: float, faults: int, seed: int, producers: int, dedup: bool = True
) -> dict[str, Any]:
    from memq.audit.config import AuditorConfig
    from memq.client.admin import AdminClient
    from memq.run.auditor import AuditorThread

    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="memq-chaos-"))
    started: list[ProcessRef] = []
    # Kafka behind a proxy: it advertises the proxy's port, so every client crosses it.
    kproxy_port = free_port()
    kstate = KafkaService(advertised_port=kproxy_port).start(tmp / "kafka-own")
    assert kstate.process is not None
    started.append(kstate.process)
    kproxy = FaultProxy("127.0.0.1", kstate.port, listen_port=kproxy_port).start()
    os.environ["MEMQ_KAFKA_BOOTSTRAP"] = f"127.0.0.1:{kproxy_port}"
    for k in ("MEMQ_S3_ENDPOINT", "MEMQ_ZK_CONNECT"):
        os.environ.pop(k, None)  # our own S3 and ZooKeeper (ZooKeeper gets restarted)
    stack = DevStack(tmp / "stack")
    state = stack.up(brokers=0, auditor=False)
    os.environ.update({k: v for k, v in state.aws_env().items() if not os.environ.get(k)})
    host, port = state.s3_endpoint.removeprefix("http://").rsplit(":", 1)
    s3proxy = FaultProxy(host, int(port)).start()
    chroot = f"/memq-chaos/{uuid.uuid4().hex[:8]}"
    topic = "chaos"
    audit_topic = f"chaos-audit-{uuid.uuid4().hex[:6]}"
    audit = {"audit.enable": True, "audit.topic": audit_topic,
             "audit.bootstrap.servers": state.kafka_bootstrap}  # fmt: skip
    brokers: dict[str, dict[str, Any]] = {}
    log: list[dict[str, Any]] = []
    doc: dict[str, Any] = {"benchmark": "chaos", "quick": quick, "seed": seed,
                           "machine": benchlib.machine(), "seconds": seconds,
                           "consumer_dedup": dedup}  # fmt: skip
    auditor = AuditorThread(AuditorConfig(kafka={"bootstrap_servers": state.kafka_bootstrap},
                                          audit_topic=audit_topic, db_path=tmp / "audit.db",
                                          http_port=0, grace_period_s=10))  # fmt: skip
    load: Load | None = None
    reader: Reader | None = None
    rss: dict[str, dict[str, int]] = {}

    def start(name: str) -> None:
        info = start_broker(tmp, name, broker_cfg(name, state, s3proxy.url, chroot),
                            state.aws_env())  # fmt: skip
        brokers[name] = info
        started.append(ProcessRef(info["pid"], info.get("start_time")))
        rss[name] = {"idle": benchlib.peak_rss_bytes(info["pid"]), "peak": 0}

    def note_rss() -> None:
        for name, b in brokers.items():
            ref = ProcessRef(b["pid"], b.get("start_time"))
            if is_alive(ref):
                rss[name]["peak"] = max(rss[name]["peak"], benchlib.peak_rss_bytes(b["pid"]))

    try:
        for i in range(3):
            start(f"c{i}")
        boot = ",".join(b["endpoint"] for b in brokers.values())
        AdminClient(boot).create_topic(topic, {"expected_mbps": 2, "min_writers": 2})
        auditor.start()
        reader = Reader(boot, topic, audit, dedup)
        reader.thread.start()
        load = Load(boot, topic, audit, producers)
        load.start()
        wait_for(lambda: True if len(load.acked) > 500 else None, timeout=60, what="load running")
        t_start = time.monotonic()
        times = sorted(rng.uniform(2, seconds - 8) for _ in range(faults))
        kinds = [KINDS[i % len(KINDS)] for i in range(faults)]
        rng.shuffle(kinds)
        for at, kind in zip(times, kinds, strict=True):
            delay = t_start + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the schedule: when to inject, not synchronisation
            note_rss()
            t0 = time.monotonic()
            detail = inject(kind, rng, brokers, start, stack, s3proxy, kproxy)
            log.append({"at_s": round(t0 - t_start, 2), "kind": kind, "detail": detail, "t0": t0})
            eprint(f"chaos t+{t0 - t_start:5.1f}s {kind}: {detail}")
        rest = t_start + seconds - time.monotonic()
        if rest > 0:
            time.sleep(rest)  # steady load after the last fault
        note_rss()
        load.finish()
        acked = set(load.acked)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not acked <= {g[0] for g in reader.got}:
            time.sleep(0.5)  # polling the consumer's progress, with a deadline
        reader.stop.set()
        reader.thread.join(60)
        got = Counter(g[0] for g in reader.got)
        idents: dict[bytes, set[tuple[int, int, int]]] = defaultdict(set)
        for v, pid, ep, seq in reader.got:
            idents[v].add((pid, ep, seq))
        missing = acked - set(got)
        dupes = {v: n for v, n in got.items() if n > 1}
        copies = block_copies(reader.got, reader.dropped)
        summary = audit_summary(auditor.url, topic, seconds, copies, sum(got.values()))
        for f in log:
            after = [load.acked[v] for v, p in load.produced_at.items()
                     if p > f["t0"] and v in load.acked]  # fmt: skip
            f["recovery_s"] = round(min(after) - f["t0"], 2) if after else None
            del f["t0"]
        note_rss()
    finally:
        if load is not None:
            load.finish()
        if reader is not None:
            reader.stop.set()
        auditor.stop()
        for b in brokers.values():
            ref = ProcessRef(b["pid"], b.get("start_time"))
            if is_alive(ref):
                os.kill(b["pid"], signal.SIGCONT)  # in case it is still stopped
                stop(ref, timeout=30)
        s3proxy.stop()
        stack.down()
        kproxy.stop()
        stop(kstate.process, timeout=10)
    leaked = [r.pid for r in started if is_alive(r)]
    bound = {n: r["idle"] + RING_BYTES + 160 * MiB for n, r in rss.items()}
    g = summary.get("group") or {}
    doc.update(
        faults=log,
        acked_records=len(acked),
        failed_records=len(load.failed),
        failure_examples=sorted(set(load.failed))[:5],
        consumed_records=sum(got.values()),
        duplicates={"records": len(dupes), "extra_copies": sum(n - 1 for n in dupes.values())},
        audit=summary,
        broker_rss_MB={
            n: {
                "idle": round(r["idle"] / 1e6, 1),
                "peak": round(r["peak"] / 1e6, 1),
                "bound": round(bound[n] / 1e6, 1),
            }
            for n, r in rss.items()
        },
        dropped=reader.dropped,
        block_copies={
            **copies,
            "audit_dropped": g.get("dropped_duplicate_blocks"),
            "audit_duplicate_blocks": g.get("duplicate_blocks"),
            "audit_duplicate_records": g.get("duplicate_records"),
            "consumer_audit_records_dropped": reader.audit_dropped,
        },
        checks={
            "every_acked_record_consumed": not missing,
            "duplicates_are_retried_blocks": all(len(idents[v]) == 1 for v in dupes),
            # Default (dedup on): nothing handed out twice, and the auditor agrees. With
            # --no-dedup the copies reach the application and the auditor counts them.
            "duplicates_as_configured": (
                not dupes and g.get("duplicate_blocks") == 0
                if dedup
                else (g.get("duplicate_blocks", 0) > 0) == bool(dupes)
            ),
            "copies_accounted": copies_accounted(copies, g, dedup, reader.audit_dropped),
            "audit_zero_missing": g.get("missing_blocks") == 0 and g.get("consumed_records", 0) > 0,
            "audit_zero_mismatch": g.get("mismatches") == 0,
            "consumer_without_error": reader.error is None,
            "no_process_leaked": not leaked,
            "broker_memory_bounded": all(r["peak"] <= bound[n] for n, r in rss.items()),
        },
        missing_examples=[v[:14].decode() for v in list(missing)[:5]],
        consumer_error=reader.error,
        consumer_transient_errors=dict(Counter(reader.transient)),
    )
    doc["ok"] = all(doc["checks"].values())
    return doc


def block_copies(got: list[tuple[bytes, int, int, int]], dropped: dict[str, int]) -> dict[str, int]:
    """Copies of blocks that reached the group beyond each block's first delivery: the
    ones the consumer dropped (its counters) plus the ones the application got (by block
    id: a block delivered n times hands out each of its records n times)."""
    values: dict[tuple[int, int, int], set[bytes]] = defaultdict(set)
    handed: Counter[tuple[int, int, int]] = Counter()
    for v, pid, ep, seq in got:
        values[(pid, ep, seq)].add(v)
        handed[(pid, ep, seq)] += 1
    times = {b: n // len(values[b]) for b, n in handed.items()}
    delivered = sum(t - 1 for t in times.values())
    dropped_blocks = int(dropped.get("duplicate_blocks_dropped", 0))
    return {
        "total": dropped_blocks + delivered,
        "dropped": dropped_blocks,
        "dropped_records": int(dropped.get("duplicate_records_dropped", 0)),
        "delivered": delivered,
        "delivered_records": sum(n - len(values[b]) for b, n in handed.items()),
        "delivered_blocks": sum(1 for t in times.values() if t > 1),
        "out_of_window": int(dropped.get("dedup_out_of_window", 0)),
    }


def copies_accounted(
    copies: dict[str, int], g: dict[str, Any], dedup: bool, audit_dropped: int
) -> bool:
    """Dedup on: no copy delivered, and the auditor counts the copies the consumer dropped.
    Off: none dropped, and the auditor's duplicates are exactly the copies the application
    got. When audit records were lost (the consumer dropped some, or blocks consumed have
    no produced record) the auditor's figures may only fall short, never exceed."""
    exact = audit_dropped == 0 and not g.get("unaudited_blocks")

    def agree(audited: Any, seen: int) -> bool:
        return audited == seen if exact else isinstance(audited, int) and audited <= seen

    if dedup:
        return copies["delivered"] == 0 and agree(
            g.get("dropped_duplicate_blocks"), copies["dropped"]
        )
    return (
        copies["dropped"] == 0
        and agree(g.get("duplicate_blocks"), copies["delivered_blocks"])
        and agree(g.get("duplicate_records"), copies["delivered_records"])
    )


def inject(kind: str, rng: random.Random, brokers: dict[str, dict[str, Any]], start: Any,
           stack: DevStack, s3proxy: FaultProxy, kproxy: FaultProxy) -> str:  # fmt: skip
    name = rng.choice(sorted(brokers))
    b = brokers[name]
    if kind == "kill9":
        os.kill(b["pid"], signal.SIGKILL)
        wait_for(lambda: True if not is_alive(ProcessRef(b["pid"], b.get("start_time"))) else None,
                 timeout=10, what=f"{name} dead")  # fmt: skip
        time.sleep(2)  # the fault lasts 2 s before the broker comes back
        start(name)
        return f"{name} killed, restarted after 2 s"
    if kind == "sigstop":
        os.kill(b["pid"], signal.SIGSTOP)
        time.sleep(3)
        os.kill(b["pid"], signal.SIGCONT)
        return f"{name} stopped for 3 s"
    if kind == "s3_503":
        s3proxy.set_mode("http_503", count=30)
        return "next 30 S3 connections: 503 SlowDown"
    if kind == "s3_reset":
        s3proxy.set_mode("reset", count=15)
        return "next 15 S3 connections reset"
    if kind == "s3_latency":
        s3proxy.set_mode("pass", delay=0.1)
        time.sleep(3)
        s3proxy.set_mode("pass")
        return "S3 +100 ms per 64 KiB for 3 s"
    if kind == "s3_stall":
        s3proxy.set_mode("stall", count=3)
        return "next 3 S3 connections stalled"
    if kind == "zk_restart":
        stack.restart("zookeeper")
        return "ZooKeeper restarted"
    if kind == "kafka_outage":
        kproxy.set_mode("refuse")
        time.sleep(3)
        kproxy.set_mode("pass")
        return "Kafka refused for 3 s"
    raise ValueError(kind)


def audit_summary(
    url: str, topic: str, seconds: float, copies: dict[str, int] | None = None,
    handed_out: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """The auditor's strict figures for the topic and group, once nothing is pending (and,
    given the consumer's ``copies``, once the audit records of those copies are in: up to
    30 s more, else the figures as they are)."""
    q = f"{url}/api/summary?topic={topic}&group=chaos-readers&since=2h&strict=true"
    doc: dict[str, Any] = {}

    def settled() -> bool | None:
        nonlocal doc
        with urllib.request.urlopen(q, timeout=10) as r:
            doc = json.loads(r.read())
        t = doc["topics"][0] if doc.get("topics") else None
        g = t["groups"][0] if t and t.get("groups") else None
        # (and once the audit records of every record handed out are in: they go through
        # a queue, so the figures could be read with the last ones still on their way)
        done = g and g.get("pending_records") == 0 and g.get("consumed_records", 0) >= handed_out
        return True if done else None

    def copies_in() -> bool | None:
        settled()
        g = doc["topics"][0]["groups"][0]
        assert copies is not None
        return (
            True
            if g.get("dropped_duplicate_blocks", 0) >= copies["dropped"]
            and g.get("duplicate_blocks", 0) >= copies["delivered_blocks"]
            else None
        )

    try:
        wait_for(settled, timeout=120, what="auditor settled")
    except Exception as e:  # reported: the check on its figures fails
        return {"error": str(e), "raw": doc}
    if copies is not None:
        try:
            wait_for(copies_in, timeout=30, what="auditor has the copies")
        except Exception as e:  # the copies_accounted check reports it
            eprint(f"chaos: {e}")
    t = doc["topics"][0]
    return {"produced_records": t.get("produced_records"), "produced_blocks": t.get("produced_blocks"),
            "group": t["groups"][0]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="30 s, 4 faults")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--faults", type=int, default=None)
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--no-dedup", action="store_true", help="consumer without dedup: copies are counted"
    )
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "chaos.json")
    a = ap.parse_args(argv)
    seconds = a.seconds or (30.0 if a.quick else 90.0)
    faults = a.faults or (4 if a.quick else 12)
    doc = run(a.quick, seconds, faults, a.seed, a.producers, dedup=not a.no_dedup)
    print(f"acked {doc['acked_records']:,} records, consumed {doc['consumed_records']:,} "
          f"({doc['duplicates']['extra_copies']} extra copies of {doc['duplicates']['records']} "
          f"retried records), {doc['failed_records']} failed deliveries; consumer dedup "
          f"{'on' if doc['consumer_dedup'] else 'off'}: {doc['dropped']}")  # fmt: skip
    c = doc["block_copies"]
    print(f"block copies stored more than once (reached the group again): {c['total']} "
          f"({c['dropped']} dropped by the consumer's dedup, {c['delivered']} delivered); "
          f"auditor: {c['audit_dropped']} dropped, {c['audit_duplicate_blocks']} "
          "blocks delivered twice")  # fmt: skip
    for f in doc["faults"]:
        print(
            f"  t+{f['at_s']:5.1f}s {f['kind']:<13} recovery {f['recovery_s']} s  ({f['detail']})"
        )
    print(f"audit: {json.dumps(doc['audit'].get('group', doc['audit']))}")
    for k, v in doc["checks"].items():
        print(f"  {'ok  ' if v else 'FAIL'} {k}")
    benchlib.write_result(doc, a.out)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
