"""Consumer CPU per GiB: load ~1 GiB of 1 KiB incompressible records once, consume it
with ``memq.Consumer`` (defaults) as often as wanted, and report the consumer process's
CPU seconds per GiB of record payload and its MB/s, beside raw boto3 GETs of the same
objects (4 threads, like ``fetch.concurrency``).

The stack (S3, Kafka, ZooKeeper, one broker) is left running under ``--dir`` between
runs so a profile (``py-spy record -o out.svg -- python benchmarks/profile_consume.py
consume``) measures consuming only::

    python benchmarks/profile_consume.py load [--records N] [--block-version 1|2]
    python benchmarks/profile_consume.py consume [--batch [count|values|arrow]]
    python benchmarks/profile_consume.py raw                  # boto3 GETs of the objects
    python benchmarks/profile_consume.py down                 # stop the stack

CPU is ``/proc/self/stat`` utime+stime from the first record to the last (group joins
are not counted), so it includes every thread of the process (fetch pool, Kafka client).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import benchlib

from memq.devstack import DevStack

TOPIC = "profile-consume"
RECORD = 1024
GiB = 1 << 30


def _cpu() -> float:
    return benchlib.cpu_seconds(os.getpid())


def _proc() -> tuple[float, float, int]:
    """(user s, system s, minor page faults) of this process so far."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks, int(fields[7])


def _thread_cpu() -> dict[str, float]:
    """CPU seconds per thread group (fetch pool, main, Kafka client, other) so far."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        name = names.get(int(task.name), comm)
        group = (
            "fetch" if name.startswith("memq-fetch")
            else "main" if name == "MainThread"
            else "kafka" if comm.startswith("rdk:")
            else "other"
        )  # fmt: skip
        out[group] = out.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


def _info_path(d: Path) -> Path:
    return d / "profile-consume.json"


def load(d: Path, records: int, block_version: int = 2) -> None:
    d.mkdir(parents=True, exist_ok=True)
    state = DevStack(d).up(brokers=0, auditor=False)
    os.environ.update(state.aws_env())
    cfg = {
        "broker_id": "profile-consume",
        "cluster": "profile",
        "port": 0,
        "http_port": 0,
        "topic_defaults": {
            "storage": {
                "type": "s3",
                "s3": {
                    "bucket": state.bucket,
                    "endpoint_url": state.s3_endpoint,
                    "region": "us-east-1",
                },
            },
            "notification": {"bootstrap_servers": state.kafka_bootstrap, "partitions": 4},
            "batch": {"bytes": 8 << 20, "ms": 500},
        },
        "topics": [{"name": TOPIC}],
    }
    from memq.devstack.brokers import start_broker

    info = start_broker(d, "profile-consume", cfg, state.aws_env())
    from memq import Producer

    rng = random.Random(7)
    base = [rng.randbytes(RECORD) for _ in range(4096)]  # incompressible
    keys: set[str] = set()
    t0 = time.monotonic()
    with Producer(
        {
            "bootstrap.servers": info["endpoint"],
            "compression.type": "none",
            "linger.ms": 5,
            "block.version": block_version,
        }
    ) as p:
        futs = []
        for i in range(records):
            v = base[i % len(base)][:-8] + b"%08d" % i
            futs.append(p.produce(TOPIC, v))
            if len(futs) >= 20000:
                keys.update(f.result().key or "" for f in futs[::200])
                futs = [f for f in futs if not f.done()]
        if p.flush(1200):
            raise RuntimeError("load did not complete")
    benchlib.eprint(f"loaded {records} records in {time.monotonic() - t0:.1f} s")
    s3 = state.s3_client()
    objects = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=state.bucket):
        objects += [o["Key"] for o in page.get("Contents", []) if TOPIC in o["Key"]]
    _info_path(d).write_text(
        json.dumps(
            {
                "endpoint": info["endpoint"],
                "broker_pid": info["pid"],
                "broker_start_time": info.get("start_time"),
                "records": records,
                "objects": objects,
                "env": state.aws_env(),
                "bucket": state.bucket,
                "s3": state.s3_endpoint,
            }
        )
    )
    benchlib.eprint(f"{len(objects)} objects; info in {_info_path(d)}")


def consume(d: Path, batch: str | None, max_records: int, extra: dict[str, str]) -> dict[str, Any]:
    """``batch``: None (``consume()``), or ``consume_batch()`` with ``count`` (the values'
    bytes from ``value_bytes()``: no value touched), ``values`` (the ``values`` list) or
    ``arrow`` (``to_arrow()``, the bytes summed by Arrow)."""
    import pyarrow.compute as pc

    info = json.loads(_info_path(d).read_text())
    os.environ.update(info["env"])
    from memq import Consumer

    n = info["records"]
    c = Consumer(
        {
            "bootstrap.servers": info["endpoint"],
            "group.id": f"profile-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            **extra,
        }
    )
    c.subscribe(TOPIC)
    got = nbytes = 0
    t0 = cpu0 = 0.0
    threads0: dict[str, float] = {}
    proc0 = (0.0, 0.0, 0)
    deadline = time.monotonic() + 900
    while got < n and time.monotonic() < deadline:
        if batch:
            b = c.consume_batch(max_records, 1.0)
            k = len(b)
            if batch == "values":
                size = sum(map(len, b.values))
            elif batch == "arrow":
                size = pc.sum(pc.binary_length(b.to_arrow().column("value"))).as_py() or 0
            else:
                size = b.value_bytes()
        else:
            msgs = c.consume(max_records, 1.0)
            k = len(msgs)
            size = sum(len(m.value) for m in msgs)
        if k and not got:
            t0, cpu0, threads0, proc0 = time.perf_counter(), _cpu(), _thread_cpu(), _proc()
        got += k
        nbytes += size
    seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    threads = {k: round(v - threads0.get(k, 0.0), 2) for k, v in _thread_cpu().items()}
    user, system, faults = (b - a for a, b in zip(proc0, _proc(), strict=True))
    c.close()
    if got != n:
        raise RuntimeError(f"consumed {got} of {n}")
    return {
        "mode": f"consume_batch ({batch})" if batch else "consume",
        "records": got,
        "payload_MB": round(nbytes / 1e6, 1),
        "seconds": round(seconds, 2),
        "MBps": round(nbytes / 1e6 / seconds, 1),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_GiB": round(cpu / (nbytes / GiB), 2),
        "cpu_s_by_thread": threads,
        "user_s": round(user, 2),
        "system_s": round(system, 2),
        "minor_faults": faults,
    }


def down(d: Path) -> None:
    """Stop the broker ``load`` started (the stack does not know it), then the stack."""
    from memq.devstack.procs import ProcessRef, stop

    if _info_path(d).exists():
        info = json.loads(_info_path(d).read_text())
        stop(ProcessRef(info["broker_pid"], info.get("broker_start_time")), timeout=30)
    DevStack(d).down()


def raw(d: Path) -> dict[str, Any]:
    info = json.loads(_info_path(d).read_text())
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=info["s3"],
        region_name="us-east-1",
        aws_access_key_id=info["env"].get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=info["env"].get("AWS_SECRET_ACCESS_KEY"),
        config=Config(max_pool_connections=8),
    )

    def get(k: str) -> int:
        return len(client.get_object(Bucket=info["bucket"], Key=k)["Body"].read())

    t0, cpu0 = time.perf_counter(), _cpu()
    with ThreadPoolExecutor(4) as pool:
        total = sum(pool.map(get, info["objects"]))
    seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    return {
        "mode": "raw-get",
        "objects": len(info["objects"]),
        "MB": round(total / 1e6, 1),
        "seconds": round(seconds, 2),
        "MBps": round(total / 1e6 / seconds, 1),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_GiB": round(cpu / (total / GiB), 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("what", choices=["load", "consume", "raw", "down"])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/memq-profile-consume"))
    ap.add_argument("--records", type=int, default=1 << 20, help="default 1 GiB of records")
    ap.add_argument(
        "--batch", nargs="?", const="count", choices=["count", "values", "arrow"],
        help="use Consumer.consume_batch: count value_bytes() (default), the values, to_arrow()",
    )  # fmt: skip
    ap.add_argument("--block-version", type=int, default=2, choices=[1, 2], help="load: format")
    ap.add_argument("--max", type=int, default=2000, help="records per consume call")
    ap.add_argument("--set", action="append", default=[], help="consumer setting key=value")
    args = ap.parse_args(argv)
    if args.what == "load":
        load(args.dir, args.records, args.block_version)
    elif args.what == "down":
        down(args.dir)
    else:
        doc = (
            consume(args.dir, args.batch, args.max, dict(kv.split("=", 1) for kv in args.set))
            if args.what == "consume"
            else raw(args.dir)
        )
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
