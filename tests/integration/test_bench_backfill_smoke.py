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
        timeout=180,
        check=False,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    res = doc["results"]
    readers = ("spark_parquet_reader_noop", "spark_python_source_floor_noop",
               "spark_memq_source_noop", "spark_backfill_parquet", "ceiling_boto3_download")  # fmt: skip
    filtered = ("spark_parquet_reader_where_noop", "spark_memq_source_where_noop",
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
    assert res["spark_parquet_reader_noop"]["vs_parquet_reader"]["median"] == 1.0
    assert res["spark_parquet_reader_where_noop"]["vs_parquet_reader"]["median"] == 1.0
    source = res["spark_memq_source_noop"]["vs_parquet_reader"]["median"]
    assert doc["target"]["ratio"] == round(source, 3)
    assert 1 <= res["spark_backfill_parquet"]["partitions"] < doc["data"]["objects"]
    assert "Parquet reader" in proc.stdout and "SMOKE" in proc.stdout
