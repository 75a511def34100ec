"""The foundation demo: a batch object through real S3 and Kafka, verified."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memq.demo import run_demo
from memq.devstack import StackState
from memq.devstack.procs import ProcessRef, is_alive

pytestmark = pytest.mark.slow  # 20 s or more: run first, not in `make check`


def test_demo_pipeline(memq_stack: StackState) -> None:
    res = run_demo(memq_stack, records=3_000, say=lambda _m: None, backfill=False)
    assert res.records == 3_000 and res.objects >= 1
    # produced, consumed by a group, read back from Kafka + S3, matched by the auditor
    assert len(res.checks) == 4 and res.consumed == 3_000
    g = res.audit["summary"]["topics"][0]["groups"][0]
    assert (g["consumed_records"], g["missing_records"], g["duplicate_blocks"]) == (3_000, 0, 0)
    assert res.bytes_stored > 3_000 * 50


def test_memq_demo_command_starts_and_stops_its_stack(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    tmp = tmp_path / "tmp"  # the demo's own temporary files go here
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memq.cli.main", "demo", "--state-dir", str(d), "--records", "3000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert "DEMO OK" in out and "3,000" in out
    assert not (d / "stack.json").exists()
    assert list(tmp.glob("memq-demo-backfill-*")) == []  # the backfill's Parquet is removed
    # Every server it started is gone: their pid files name dead processes.
    refs = [ProcessRef(int(p.read_text()), None) for p in d.glob("*/*.pid")]
    assert len(refs) == 7  # moto, Kafka, ZooKeeper, three brokers and the auditor
    assert not any(is_alive(r) for r in refs)
