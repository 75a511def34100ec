"""The foundation demo: a batch object through real S3 and Kafka, verified."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from memq.demo import run_demo
from memq.devstack import StackState
from memq.devstack.procs import ProcessRef, is_alive


def test_demo_round_trip(memq_stack: StackState) -> None:
    res = run_demo(memq_stack, records=5_000, block_records=700, say=lambda _m: None)
    assert res.records == 5_000 and res.blocks == 8
    assert len(res.checks) == 4
    # The object is really in S3, with exactly the size the demo reported.
    bucket, key = res.key.removeprefix("s3://").split("/", 1)
    head = memq_stack.s3_client().head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == res.object_size


def test_memq_demo_command_starts_and_stops_its_stack(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memq.cli.main", "demo", "--state-dir", str(d), "--records", "3000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert "DEMO OK" in out and "3,000" in out
    assert not (d / "stack.json").exists()
    # Every server it started is gone: their pid files name dead processes.
    refs = [ProcessRef(int(p.read_text()), None) for p in d.glob("*/*.pid")]
    assert len(refs) == 4  # moto, Tansu, ZooKeeper and the broker
    assert not any(is_alive(r) for r in refs)
