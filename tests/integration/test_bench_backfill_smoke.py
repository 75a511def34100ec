"""Smoke run of the backfill benchmark (--quick) on the session's stack, so it cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from memq.devstack import StackState
from tests.integration.helpers import external_stack_env

ROOT = Path(__file__).parent.parent.parent


def test_bench_backfill_quick(memq_stack: StackState, tmp_path: Path) -> None:
    out = tmp_path / "backfill.json"
    env = external_stack_env(memq_stack)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_backfill.py"),
            "--quick",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    res = doc["results"]
    assert res["ceiling_boto3_download"]["records_per_s"] > 0
    spark = res["spark_backfill_parquet"]
    assert spark["records_per_s"] > 0 and spark["vs_ceiling"] > 0
    assert 1 <= spark["partitions"] < doc["data"]["objects"]
    consumer = res["memq_consumer"]
    assert consumer["records_per_s"] > 0 and consumer["objects"] == doc["data"]["objects"]
    assert doc["target"]["ratio"] == spark["vs_ceiling"]
    assert "ceiling" in proc.stdout and "memq.Consumer" in proc.stdout
