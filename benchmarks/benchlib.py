"""Shared benchmark plumbing: a private local stack, brokers as subprocesses, results I/O."""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
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


def storage_config(
    kind: str,
    *,
    bucket: str | None = None,
    endpoint: str | None = None,
    root: str | None = None,
    **s3: Any,
) -> dict[str, Any]:
    """A topic's ``storage`` section: ``s3`` (``bucket`` at ``endpoint``, region
    us-east-1, plus any other S3 keys), ``filesystem`` under ``root``, or ``devnull``."""
    store: dict[str, Any] = {"type": kind}
    if kind == "s3":
        store["s3"] = {"bucket": bucket, "endpoint_url": endpoint, "region": "us-east-1", **s3}
    elif kind == "filesystem":
        store["filesystem"] = {"root": root}
    return store


def broker_config(
    state: StackState,
    broker_id: str,
    storage: dict[str, Any],
    topics: list[dict[str, Any]] | None,
    *,
    partitions: int,
    batch: dict[str, Any] | None = None,
    cluster: str = "bench",
    notification: dict[str, Any] | None = None,
    topic_defaults: dict[str, Any] | None = None,
    **broker: Any,
) -> dict[str, Any]:
    """One benchmark broker's configuration: ephemeral ports, the stack's Kafka for
    notifications (``partitions`` each, plus ``notification`` keys), ``storage`` and
    ``batch`` (``{"bytes": .., "ms": ..}``) as topic defaults (plus ``topic_defaults``
    keys such as ``ring_size``), and any other broker keys."""
    defaults: dict[str, Any] = {
        "storage": storage,
        "notification": {
            "bootstrap_servers": state.kafka_bootstrap,
            "partitions": partitions,
            **(notification or {}),
        },
        **({"batch": batch} if batch is not None else {}),
        **(topic_defaults or {}),
    }
    return {
        "broker_id": broker_id,
        "cluster": cluster,
        "port": 0,
        "http_port": 0,
        **broker,
        "topic_defaults": defaults,
        **({"topics": topics} if topics is not None else {}),
    }


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


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def drop_bucket(client: Any, bucket: str) -> None:
    """Delete a bucket and its objects: frees moto's memory (a 20 s window at full speed
    leaves GiBs of objects, and a fuller moto is a slower one)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000]})
    client.delete_bucket(Bucket=bucket)


@contextmanager
def fresh_bucket(state: StackState, prefix: str) -> Iterator[str]:
    """A new, empty bucket on the stack's S3 for one run, dropped afterwards."""
    import uuid

    import boto3

    client = boto3.client("s3", endpoint_url=state.s3_endpoint, region_name="us-east-1")
    bucket = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    try:
        yield bucket
    finally:
        drop_bucket(client, bucket)


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
    # SIGTERM (timeout, kill) unwinds like Ctrl-C, so the servers below are stopped.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        state = stack.up(brokers=0, auditor=False)  # (a failed start stops what it started)
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    os.environ.update({k: v for k, v in state.aws_env().items() if not os.environ.get(k)})
    try:
        yield state
    finally:
        stack.down()
        shutil.rmtree(d, ignore_errors=True)  # logs and data of a finished run


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


def cpu_now(pids: Mapping[str, int | None]) -> dict[str, float]:
    """CPU seconds so far of each named process (the ones that still exist)."""
    out = {}
    for name, pid in pids.items():
        if pid is None:
            continue
        with suppress(OSError):
            out[name] = cpu_seconds(pid)
    return out


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def now() -> float:
    return time.perf_counter()


def eprint(*a: Any) -> None:
    print(*a, file=sys.stderr, flush=True)


# --- steady-state measurement ------------------------------------------------------------

GiB = 1 << 30
WINDOW_S = 20.0  # full mode: the measured window (issue 19: >= 20 s in steady state)
WARMUP_S = 5.0
QUICK_WINDOW_S = 2.0  # --quick: a smoke of the method, not a figure
QUICK_WARMUP_S = 0.5


def timing(quick: bool) -> tuple[float, float]:
    """(warm-up, window) seconds for full or quick (smoke) mode."""
    return (QUICK_WARMUP_S, QUICK_WINDOW_S) if quick else (WARMUP_S, WINDOW_S)


class Counter:
    """Bytes and records acknowledged (or handed out) so far, read at the window's edges:
    the bytes acknowledged inside the window are the difference, i.e. ack timestamps are
    windowed (an ack counts where it happened, not where its record was produced)."""

    __slots__ = ("_lock", "bytes", "errors", "records")

    def __init__(self) -> None:
        import threading

        self.bytes = 0
        self.records = 0
        self.errors = 0
        self._lock = threading.Lock()

    def add(self, nbytes: int, records: int = 1) -> None:
        with self._lock:
            self.bytes += nbytes
            self.records += records

    def add_one(self, nbytes: int) -> None:
        """One record, from the only thread that adds (a client's delivery callbacks:
        MemQ's run on its I/O thread, confluent-kafka's inside ``poll()`` on the one
        producing thread): no lock. A lock per record was ~9% of a producer's GIL
        time in the benchmark, the benchmark measuring itself."""
        self.bytes += nbytes
        self.records += 1

    def snap(self) -> tuple[float, int, int]:
        return now(), self.bytes, self.records


def process_tree(root: int) -> list[int]:
    """``root`` and its live descendants (for Spark: the JVM and its Python workers)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_cpu_seconds(root: int) -> float:
    total = 0.0
    for pid in process_tree(root):
        with suppress(OSError, IndexError, ValueError):  # exited meanwhile
            total += cpu_seconds(pid)
    return total


def listening_pid(endpoint: str) -> int | None:
    """The pid of this machine's process listening on ``endpoint``'s port (host:port or a
    URL on 127.0.0.1 / localhost), if it can be seen in /proc; else None."""
    rest = endpoint.split("://", 1)[-1].split("/", 1)[0]
    host, _, port_text = rest.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "[::1]") or not port_text.isdigit():
        return None
    want = f":{int(port_text):04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                f = line.split()
                if f[1].endswith(want) and f[3] == "0A":  # local address, state LISTEN
                    inodes.add(f"socket:[{f[9]}]")
    for d in Path("/proc").iterdir():
        if not inodes or not d.name.isdigit():
            continue
        with suppress(OSError):
            for fd in (d / "fd").iterdir():
                with suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(d.name)
    return None


def stack_pids(state: StackState) -> dict[str, int]:
    """The stack's Kafka (Apache Kafka, label ``kafka``) and S3 (moto, ``s3_moto``)
    processes: the ones this run started, or an external stack's when they listen on
    this machine (a test session's servers; their CPU then includes whatever else uses
    them meanwhile). Servers elsewhere are not reported."""
    out: dict[str, int] = {}
    for label, name in (("kafka", "kafka"), ("s3_moto", "s3")):
        st = state.services.get(name)
        if st is None:
            continue
        pid = st.pid if st.pid is not None else listening_pid(st.endpoint)
        if pid is not None and Path(f"/proc/{pid}/stat").exists():
            out[label] = pid
    return out


def kafka_server(state: StackState) -> str:
    """What the stack's Kafka is, for reports: the Apache Kafka this stack runs, or an
    external one named by its address."""
    from memq.devstack.kafka import KAFKA_VERSION

    st = state.services.get("kafka")
    if st is None or st.external:
        return f"an external Kafka at {state.kafka_bootstrap}"
    home = os.environ.get("KAFKA_HOME")
    version = f"from KAFKA_HOME={home}" if home else KAFKA_VERSION
    return f"Apache Kafka {version} (one KRaft node, broker and controller)"


def _cpu_all(procs: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in procs.items():
        try:
            out[name] = tree_cpu_seconds(pid) if name.endswith("_tree") else cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            out[name] = float("nan")
    return out


def steady_state(
    load: Any,
    counter: Counter,
    procs: dict[str, int],
    quick: bool,
    *,
    min_bytes: int = 0,
) -> dict[str, Any]:
    """Run ``load(stop_event)`` in a thread; after the warm-up (excluded), count only what
    ``counter`` gains during the window (>= 20 s, or 2 s with ``quick``), with CPU
    seconds (utime + stime from /proc) of every process in ``procs`` ({label: pid}; a
    label ending in ``_tree`` counts the pid's descendants too) sampled at the window's
    edges. ``load`` must return soon after the event is set (it may drain first)."""
    import threading

    warmup, window = timing(quick)
    stop_ev = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            load(stop_ev)
        except BaseException as e:  # reported below, on the measuring thread
            failure.append(e)

    procs = {"client": os.getpid(), **procs}
    t = threading.Thread(target=run, name="bench-load", daemon=True)
    t.start()
    stop_ev.wait(warmup)
    cpu0, (t0, b0, r0) = _cpu_all(procs), counter.snap()
    series: list[float] = []
    last_t, last_b = t0, b0
    deadline = t0 + window
    while not failure and t.is_alive():
        left = deadline - now()
        if left <= 0 and counter.bytes - b0 >= min_bytes:
            break
        stop_ev.wait(min(1.0, max(left, 0.05)))
        tn, bn = now(), counter.bytes
        series.append((bn - last_b) / 1e6 / (tn - last_t))
        last_t, last_b = tn, bn
    t1, b1, r1 = counter.snap()
    cpu1 = _cpu_all(procs)
    stop_ev.set()
    t.join(600)
    if failure:
        raise failure[0]
    if t.is_alive():
        raise RuntimeError("benchmark load did not stop within 600 s of the window's end")
    if counter.errors:
        raise RuntimeError(f"{counter.errors} errors during the benchmark load")
    seconds, nbytes = t1 - t0, b1 - b0
    if nbytes <= 0:
        raise RuntimeError(f"nothing acknowledged in the {seconds:.1f} s window")
    gib = nbytes / GiB
    return {
        "window_s": round(seconds, 2),
        "warmup_s": warmup,
        "window_MB": round(nbytes / 1e6, 1),
        "records": r1 - r0,
        "MBps": round(nbytes / 1e6 / seconds, 2),
        "records_per_s": round((r1 - r0) / seconds),
        # per-second rates inside the window: how steady the "steady state" was
        "MBps_1s": {"min": round(min(series), 1), "max": round(max(series), 1)} if series else None,
        "cpu_s_per_GiB": {k: round((cpu1[k] - cpu0[k]) / gib, 2) for k in procs},
        "smoke": quick,
    }


def repeat_window(
    job: Any, procs: dict[str, int], quick: bool, warmup_runs: int = 1
) -> dict[str, Any]:
    """For batch jobs (Spark, a bulk download): ``job()`` -> (bytes, records) is run
    ``warmup_runs`` times unmeasured, then back to back until the window (>= 20 s; 2 s
    quick) is over; the rate is the total over the total time of the measured runs."""
    for _ in range(warmup_runs):
        job()
    _, window = timing(quick)
    procs = {"client": os.getpid(), **procs}
    cpu0 = _cpu_all(procs)
    t0 = now()
    nbytes = records = runs = 0
    per_run: list[float] = []
    while runs == 0 or now() - t0 < window:
        s = now()
        b, r = job()
        per_run.append(now() - s)
        nbytes, records, runs = nbytes + b, records + r, runs + 1
    seconds = now() - t0
    cpu1 = _cpu_all(procs)
    gib = nbytes / GiB
    return {
        "window_s": round(seconds, 2),
        "runs": runs,
        "run_s": {"min": round(min(per_run), 3), "max": round(max(per_run), 3)},
        "window_MB": round(nbytes / 1e6, 1),
        "records": records,
        "MBps": round(nbytes / 1e6 / seconds, 2),
        "records_per_s": round(records / seconds),
        "cpu_s_per_GiB": {k: round((cpu1[k] - cpu0[k]) / gib, 2) for k in procs},
        "smoke": quick,
    }


#: Replicas per partition of a production Kafka topic: the CPU totals count the one
#: local broker's CPU this many times, for the Kafka baseline and for MemQ's
#: notification topic alike.
KAFKA_RF = 3

CPU_TOTAL_METHOD = (
    "MemQ: producer + MemQ broker + S3 server (moto) + 3 x the notification Kafka; "
    "Kafka: producer + 3 x the Kafka broker. The local Kafka is one node (replication "
    "factor 1): 3 x its CPU stands for replication factor 3 and is a lower bound of "
    "that, since a leader also serves its followers' fetches and each follower fetches "
    "and appends the same bytes"
)


def cpu_totals(cpu: dict[str, float], *, memq: bool) -> dict[str, float] | None:
    """CPU-s/GiB of a whole write path from one window's per-process figures (``cpu``:
    label -> CPU-s/GiB), by :data:`CPU_TOTAL_METHOD`: ``total``, and for MemQ also
    ``without_s3`` (no S3 server: on AWS that CPU is not the user's) and ``s3``. None
    when a process was not measured (a server on another machine)."""
    need = ("client", "broker", "s3_moto", "kafka") if memq else ("client", "kafka")
    if any(k not in cpu for k in need):
        return None
    if not memq:
        return {"total": round(cpu["client"] + KAFKA_RF * cpu["kafka"], 2)}
    without_s3 = cpu["client"] + cpu["broker"] + KAFKA_RF * cpu["kafka"]
    return {
        "total": round(without_s3 + cpu["s3_moto"], 2),
        "without_s3": round(without_s3, 2),
        "s3": cpu["s3_moto"],
    }


def spread_rows(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """min/median/max of a steady-state result's MB/s and CPU-s/GiB per process over
    repetitions (``runs``: one dict of results per repetition)."""
    rs = [r[key] for r in runs]
    out: dict[str, Any] = {"MBps": spread([r["MBps"] for r in rs])}
    procs = set.intersection(*(set(r["cpu_s_per_GiB"]) for r in rs))
    out["cpu_s_per_GiB"] = {p: spread([r["cpu_s_per_GiB"][p] for r in rs]) for p in sorted(procs)}
    return out


def delete_kafka_topic(bootstrap: str, topic: str) -> None:
    """Delete a baseline's Kafka topic and wait (best effort: reported, not fatal).

    Only to bound disk use: the local Kafka keeps a topic's log segments in the stack's
    state dir, and a 20 s window at full speed writes GiBs there (a suite run writes tens
    of GiB of baseline topics). Reads and writes of later topics do not depend on it.
    Kafka removes the files ``file.delete.delay.ms`` (60 s) after the delete."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for f in admin.delete_topics([topic], operation_timeout=60).values():
            f.result(90)
    except Exception as e:
        eprint(f"could not delete Kafka topic {topic}: {e}")
