"""`benchmarks/bench_kafka_ingest.py --quick` runs end to end on this session's servers:
both targets acknowledge records, nothing fails, the figures are written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memq.devstack import StackState

pytestmark = pytest.mark.slow  # 20 s or more: run first, not in `make check`

ROOT = Path(__file__).parent.parent.parent


def test_bench_kafka_ingest_quick(tmp_path: Path, memq_stack: StackState) -> None:
    out = tmp_path / "kafka_ingest.json"
    env = {**os.environ, "MEMQ_S3_ENDPOINT": memq_stack.s3_endpoint,
           "MEMQ_KAFKA_BOOTSTRAP": memq_stack.kafka_bootstrap,
           "MEMQ_ZK_CONNECT": memq_stack.zk_connect}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_kafka_ingest.py"), "--quick",
         "--reps", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    for name in ("memq_kafka_listener", "memq_kafka_listener_16p", "kafka_direct",
                 "defaults_memq_kafka_listener", "defaults_kafka_direct"):  # fmt: skip
        r = doc[name]
        assert r["records_acked"] > 0 and r["MBps"] > 0 and r["failed"] == 0, r
        assert r["ack_p99_ms"] >= r["ack_p50_ms"] > 0
    assert doc["memq_kafka_listener"]["server_cpu_s_per_GiB"] > 0
    # Kafka's Java producer (ProducerPerformance) into both; a --quick run is too short
    # for two of its 5 s reporting lines, so each is measured over the whole run
    for name, server in (("java_memq_kafka_listener", "broker"), ("java_kafka_direct", "kafka"),
                         ("java_defaults_memq_kafka_listener", "broker"),
                         ("java_defaults_kafka_direct", "kafka")):  # fmt: skip
        r = doc[name]
        assert r["records_acked"] == r["num_records"] and r["failed"] == 0, r
        assert r["window"] == "whole run" and r["MBps"] > 0, r
        assert r["tool_summary"]["lat_p99_ms"] >= r["tool_summary"]["lat_p50_ms"] >= 0, r
        assert r["cpu_s_per_GiB"]["client"] > 0 and r["server_cpu_s_per_GiB"] > 0, r
        assert r["cpu_s_per_GiB"][server] == r["server_cpu_s_per_GiB"]
    # the session's Kafka and moto are on this machine: each path's CPU total is formed
    for name in ("memq_kafka_listener", "java_memq_kafka_listener"):
        assert doc[name]["cpu_vs_kafka"] > 0 and doc[name]["cpu_total"]["total"] > 0
    assert "MemQ / direct throughput" in proc.stdout
    assert "Java ProducerPerformance into" in proc.stdout
    # two repetitions, each with its own ratio; the summary spans them
    assert len(doc["runs"]) == 2
    ratios = [r["ratio_MBps"] for r in doc["runs"]]
    assert doc["ratios"]["ratio_MBps"] == {
        "min": min(ratios),
        "median": sum(ratios) / 2,
        "max": max(ratios),
    }
    assert doc["ratio_MBps"] == doc["ratios"]["ratio_MBps"]["median"]
    java = [r["ratio_MBps_java"] for r in doc["runs"]]
    assert doc["ratio_MBps_java"] == sum(java) / 2 and all(x > 0 for x in java)
    # the clients' defaults into a dev-stack broker: its settings, and each row's spread
    assert doc["dev_broker"]["batch"]["ms"] == 1000 and doc["java_defaults_producer"] == {}
    for name in ("ratio_MBps_defaults", "ratio_MBps_java_defaults"):
        assert all(r[name] > 0 for r in doc["runs"]), name
    q = doc["rows"]["java_defaults_memq_kafka_listener"]
    assert q["MBps"]["min"] <= q["MBps"]["median"] <= q["MBps"]["max"]
    assert q["cpu_s_per_GiB"]["broker"]["min"] > 0
