"""Smoke run of the backfill benchmark (--quick) on the session's stack, so it cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from memq.devstack import StackState

ROOT = Path(__file__).parent.parent.parent


def test_bench_backfill_quick(memq_stack: StackState, tmp_path: Path) -> None:
    out = tmp_path / "backfill.json"
    env = {
        **os.environ,
        **memq_stack.aws_env(),
        # Reuse the running servers instead of starting a second stack.
        "MEMQ_S3_ENDPOINT": memq_stack.s3_endpoint,
        "MEMQ_KAFKA_BOOTSTRAP": memq_stack.kafka_bootstrap,
        "MEMQ_ZK_CONNECT": memq_stack.zk_connect,
    }
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
