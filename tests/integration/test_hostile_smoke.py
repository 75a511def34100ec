"""Hostile clients and overload against a broker process (`bench_hostile.py --quick`):
it keeps serving, cuts or answers every hostile connection, stays under its connection
limit, and applies back-pressure with bounded memory when storage is too slow."""

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


def test_hostile_soak_and_overload_quick(
    memq_stack: StackState, s3_bucket: str, tmp_path: Path
) -> None:
    out = tmp_path / "hostile.json"
    scratch = tmp_path / "tmp"  # its TMPDIR: what it leaves there is seen below
    scratch.mkdir()
    env = external_stack_env(memq_stack, MEMQ_S3_BUCKET=s3_bucket, TMPDIR=str(scratch))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_hostile.py"), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert proc.returncode == 0 and doc["ok"], proc.stdout + proc.stderr[-3000:]
    soak, over = doc["soak"], doc["overload"]
    assert soak["checks"] == {
        "broker_serves_after": True,
        "connections_within_limit": True,
        "every_hostile_connection_answered_or_cut": True,
        "no_legit_failures": True,
    }
    # every behaviour was exercised, and connections past the limit were refused
    assert set(soak["attack"]) >= {"garbage", "bad_crc", "oversized", "truncated", "slowloris"}
    assert soak["outcomes"]["refused"] + soak["outcomes"]["cut"] > 0
    assert soak["attacked_MBps"] > 0 and "ratio" in soak
    assert over["checks"] == {"back_pressure_seen": True, "rss_within_bound": True,
                              "no_failures": True}  # fmt: skip
    assert "soak: legit" in proc.stdout and "overload:" in proc.stdout
    assert list(scratch.iterdir()) == []  # (the soak's storage held GiBs: it was kept once)
