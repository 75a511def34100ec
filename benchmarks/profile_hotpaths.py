"""Where the time goes: py-spy samples of the broker, the producer and the consumer.

Starts a private stack and one broker process, then drives ``--seconds`` of ingest
(4 threads, 1 KiB records, acks=all) and a consumer group reading it back, while
``py-spy record`` samples the broker process and this process (producer and consumer
threads, native frames off). Writes per process the functions with the most samples on
top of the stack (self time) and the heaviest call paths, plus the raw collapsed
stacks (``*.folded``, load them in speedscope or ``flamegraph.pl``), to
``benchmarks/results/profile/``.

    python benchmarks/profile_hotpaths.py [--storage devnull|filesystem|s3] [--seconds 8]

Needs ``py-spy`` (``pip install py-spy``; in the dev extra) and ptrace rights (root, or
``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import bench_produce
import benchlib
from benchlib import eprint

OUT = benchlib.RESULTS / "profile"


def _pyspy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "250",
         "--format", "raw", "--output", str(out), "--nonblocking", "--threads"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def summarize(folded: Path, top: int = 15) -> dict[str, Any]:
    """Self time per function and the heaviest frames (inclusive), in % of samples."""
    self_t: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        count = int(n)
        frames = stack.split(";")
        total += count
        threads[frames[0]] += count
        names = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                 if " (" in f else f for f in frames[1:]]  # fmt: skip
        if names:
            self_t[names[-1]] += count
        for name in set(names):
            incl[name] += count

    def pct(c: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in c.most_common(top)]

    return {"samples": total, "threads": pct(threads), "self": pct(self_t), "inclusive": pct(incl)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--storage", default="s3", choices=("devnull", "filesystem", "s3"))
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    from memq import Consumer, Producer

    root = tempfile.mkdtemp(prefix="memq-profile-")
    values = benchlib.log_records(8192, bench_produce.RECORD)
    doc: dict[str, Any] = {
        "storage": a.storage,
        "seconds": a.seconds,
        "machine": benchlib.machine(),
    }
    with (
        benchlib.private_stack() as state,
        benchlib.broker_process(
            state, "profile", bench_produce.broker_cfg(state, a.storage, root, state.bucket)
        ) as info,
    ):
        p = Producer({"bootstrap.servers": info["endpoint"], "acks": "all", "linger.ms": 5,
                      "compression.type": "none", "buffer.memory": 32 << 20})  # fmt: skip
        p.produce("bench", b"warm-up").result(60)
        spies = {
            "broker_ingest": _pyspy(info["pid"], a.seconds, a.out / "broker_ingest.folded"),
            "producer": _pyspy(os.getpid(), a.seconds, a.out / "producer.folded"),
        }
        stop = threading.Event()
        sent = [0]

        def work() -> None:
            while not stop.is_set():
                for v in values:
                    p.produce("bench", v)
                sent[0] += len(values)

        threads = [threading.Thread(target=work) for _ in range(4)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for s in spies.values():
            s.wait(a.seconds + 60)
        stop.set()
        for t in threads:
            t.join()
        p.flush(120)
        elapsed = time.monotonic() - t0
        p.close()
        doc["ingest_MBps"] = round(sent[0] * bench_produce.RECORD / 1e6 / elapsed, 1)
        eprint(f"produced {sent[0]:,} records in {elapsed:.1f} s; now consuming")
        c = Consumer({"bootstrap.servers": info["endpoint"], "group.id": "profile",
                      "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 1000, "fetch.concurrency": 4})  # fmt: skip
        c.subscribe("bench")
        while not c.consume(100, 1.0):  # the group join is not profiled
            pass
        spy = _pyspy(os.getpid(), a.seconds, a.out / "consumer.folded")
        got, t0 = 0, time.monotonic()
        while spy.poll() is None and got < sent[0]:
            got += len(c.consume(5000, 0.5))
        spy.wait(60)
        doc["consume_records_per_s"] = round(got / (time.monotonic() - t0))
        c.close()
    for name in ("broker_ingest", "producer", "consumer"):
        folded = a.out / f"{name}.folded"
        if not folded.exists():
            raise SystemExit(f"py-spy wrote no {folded}: does this user have ptrace rights?")
        doc[name] = summarize(folded)
    (a.out / "profile.json").write_text(json.dumps(doc, indent=2) + "\n")
    for name in ("broker_ingest", "producer", "consumer"):
        print(f"\n== {name}: {doc[name]['samples']} samples; self time")
        for fn, pct in doc[name]["self"]:
            print(f"{pct:6.1f}%  {fn}")
    print(f"\nwrote {a.out / 'profile.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
