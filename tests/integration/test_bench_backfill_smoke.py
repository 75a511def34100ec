"""Smoke run of the backfill benchmark (--quick) on the session's stack, so it cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memq.devstack import StackState
from tests.integration.helpers import external_stack_env

pytestmark = pytest.mark.slow  # 20 s or more: run first, not in `make check`

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
        timeout=300,  # (Spark, and S3A loading its 690 MB SDK bundle once)
        check=False,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    res = doc["results"]
    readers = ("spark_parquet_s3a_noop", "spark_parquet_local_noop",
               "spark_python_source_floor_noop", "spark_memq_source_noop",
               "spark_backfill_parquet", "ceiling_boto3_download")  # fmt: skip
    filtered = ("spark_parquet_s3a_where_noop", "spark_memq_source_where_noop",
                "spark_memq_source_where_pushdown_noop")  # fmt: skip
    assert set(res) == set(readers + filtered)
    hits = doc["data"]["where_records"]
    assert 0 < hits < doc["data"]["records"] // 4
    for name in readers + filtered:
        r = res[name]
        assert 0 < r["records_per_s"]["min"] <= r["records_per_s"]["max"], name
        (w,) = r["windows"]  # one repetition in --quick: a 2 s smoke window
        assert w["smoke"] is True and w["runs"] >= 1 and w["window_s"] >= 2.0, name
        each = hits if name in filtered else doc["data"]["records"]
        assert w["records"] == w["runs"] * each, name
        assert w["cpu_s_per_GiB"]["client"] >= 0, name
    # the baseline: Spark's Parquet reader over S3A from the same S3 (moto) as the source
    assert res["spark_parquet_s3a_noop"]["vs_parquet_s3a"]["median"] == 1.0
    assert res["spark_parquet_s3a_where_noop"]["vs_parquet_s3a"]["median"] == 1.0
    assert res["spark_parquet_local_noop"]["vs_parquet_local"]["median"] == 1.0
    for name in readers:
        assert res[name]["vs_parquet_s3a"]["median"] > 0 < res[name]["vs_parquet_local"]["median"]
    (s3a,) = res["spark_parquet_s3a_noop"]["windows"]
    assert s3a["cpu_s_per_GiB"]["s3_moto"] > 0, s3a  # its bytes came from moto
    base = doc["data"]["baseline_parquet_s3a"]
    assert base["stream"] == "analytics" and base["settings"]["fs.s3a.path.style.access"] == "true"
    assert any(j.startswith("hadoop-aws-") for j in base["jars"])
    source = res["spark_memq_source_noop"]["vs_parquet_s3a"]["median"]
    assert doc["target"]["ratio"] == round(source, 3) and "S3A" in doc["target"]["what"]
    assert 1 <= res["spark_backfill_parquet"]["partitions"] < doc["data"]["objects"]
    assert "vs Parquet S3A" in proc.stdout and "SMOKE" in proc.stdout
