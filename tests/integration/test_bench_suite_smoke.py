"""Smoke run of the whole benchmark suite (`memq bench --quick`) on the session's servers,
so the scripts, the report and the plots cannot rot. Numbers are not checked beyond
being measured: the quick sizes are tiny. One repetition: the aggregation over
repetitions is tested on its own (tests/unit/test_bench_parts.py)."""

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


def _spread_ok(s: dict[str, float]) -> bool:
    return 0 < s["min"] <= s["median"] <= s["max"]


def test_memq_bench_quick_writes_report_plots_and_json(
    memq_stack: StackState, s3_bucket: str, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    env = external_stack_env(memq_stack, MEMQ_S3_BUCKET=s3_bucket)
    proc = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", "bench", "--quick", "--reps", "1", "--out",
         str(out)],
        capture_output=True, text=True, timeout=500, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads((out / "suite.json").read_text())
    assert doc["quick"] is True and doc["reps"] == 1
    sec = doc["sections"]
    assert set(sec) == {"formats", "ingest", "latency", "consume", "backfill", "scaling"}
    rows = sec["ingest"]["acks"]["all"]["rows"]
    for name in ("devnull", "devnull_batch", "filesystem", "filesystem_batch", "s3", "s3_batch"):
        assert _spread_ok(rows[name]["MBps"]) and _spread_ok(rows[name]["vs_kafka_direct"])
        cpu = rows[name]["cpu_s_per_GiB"]
        assert _spread_ok(cpu["client"]) and _spread_ok(cpu["broker"]), name
        assert rows[name]["broker_peak_rss_MB"]["min"] > 10
    for name in ("kafka_direct", "s3_raw_put"):
        assert _spread_ok(rows[name]["MBps"]) and _spread_ok(rows[name]["cpu_s_per_GiB"]["client"])
    # The session's Kafka and moto listen on this machine: their CPU is measured, and with
    # it each write path's total (Kafka's broker counted 3 times: replication factor 3).
    kafka = rows["kafka_direct"]
    assert _spread_ok(kafka["cpu_s_per_GiB"]["kafka"]), kafka["cpu_s_per_GiB"]
    assert _spread_ok(kafka["cpu_total_s_per_GiB"]["total"])
    for name in ("s3", "s3_batch"):
        total = rows[name]["cpu_total_s_per_GiB"]
        assert _spread_ok(total["total"]) and _spread_ok(rows[name]["cpu_vs_kafka"]), name
        assert total["without_s3"]["median"] < total["total"]["median"], name
    one = sec["ingest"]["acks"]["all"]["runs"][0]
    c, k = one["s3"]["cpu_s_per_GiB"], one["kafka"]["cpu_s_per_GiB"]
    memq_total = c["client"] + c["broker"] + c["s3_moto"] + 3 * c["kafka"]
    assert one["s3"]["cpu_total"]["total"] == pytest.approx(memq_total, abs=0.011)
    kafka_total = k["client"] + 3 * k["kafka"]
    assert one["kafka"]["cpu_total"]["total"] == pytest.approx(kafka_total, abs=0.011)
    runs = sec["ingest"]["acks"]["all"]["runs"]
    assert len(runs) == 1
    # the steady-state method, in smoke size: a 2 s window after the warm-up
    for r in runs[0].values():
        assert r["smoke"] is True and r["window_s"] >= 2.0 and r["records"] > 0, r["name"]
    for p in sec["latency"]["points"]:
        assert len(p["windows"]) == 1 and _spread_ok(p["p99_ms"])
        assert p["p50_ms"]["median"] <= p["p99_ms"]["median"] and p["puts_per_hour"] > 0
    con = sec["consume"]["rows"]
    assert _spread_ok(con["s3"]["vs_s3_raw_get"]) and _spread_ok(con["filesystem"]["MBps"])
    assert _spread_ok(con["s3"]["cpu_s_per_GiB"]["client"])
    assert _spread_ok(con["s3_arrow"]["vs_s3_raw_get"])
    assert "skipped" in sec["backfill"]
    cells = sec["scaling"]["cells"]
    assert set(cells) == {"1p-1b", "2p-1b", "1p-3b", "2p-3b"}
    assert cells["1p-1b"]["vs_1p_1b"]["median"] == 1.0
    assert doc["cost"]["memq_usd_per_day"] < doc["cost"]["kafka_usd_per_day"]
    report = (out / "report.md").read_text()
    for heading in ("## Ingest", "### acks=all", "## End-to-end latency", "## Consume",
                    "## Scaling", "## Cost model", "Quick (smoke) mode", "client CPU-s/GiB",
                    "linger.ms=5", "kafka CPU-s/GiB", "Total CPU per GiB ingested",
                    "Kafka total CPU-s/GiB (RF 3)", "lower bound"):  # fmt: skip
        assert heading in report, heading
    for png in ("ingest.png", "broker_resources.png", "latency.png", "consume.png", "scaling.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000, png
        assert f"![{png}]({png})" in report
