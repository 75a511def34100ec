"""The chaos suite in quick mode (`benchmarks/chaos.py --quick`): a 3-broker cluster under
acks=all load survives S3 503s and resets, a SIGSTOPped and a SIGKILLed broker, and the
auditor proves that no acknowledged record was lost and none was delivered twice. Uses its own stack (it restarts
ZooKeeper and cuts Kafka in the full mode), never the session's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # 20 s or more: run first, not in `make check`

ROOT = Path(__file__).parent.parent.parent


def test_chaos_quick_proves_zero_loss(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    assert out.exists(), proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert proc.returncode == 0 and doc["ok"], proc.stdout + json.dumps(doc["checks"])
    assert all(doc["checks"].values())
    assert doc["acked_records"] > 10_000 and doc["failed_records"] == 0
    assert doc["consumed_records"] >= doc["acked_records"]
    assert [f["kind"] for f in doc["faults"]] and all(
        f["recovery_s"] is not None for f in doc["faults"]
    )
    g = doc["audit"]["group"]
    assert g["missing_blocks"] == 0 and g["mismatches"] == 0
    # Exactly-once to the application by default: no record handed out twice, and the
    # auditor saw no duplicate delivery (copies the consumer dropped are counted apart).
    assert doc["consumer_dedup"] and doc["duplicates"]["extra_copies"] == 0
    assert g["duplicate_blocks"] == 0
    assert g["consumed_records"] >= doc["acked_records"]
    # Whether dedup had anything to do: block copies that reached the group again (may be
    # 0 in a quick run), all dropped by the consumer and counted alike by the auditor.
    c = doc["block_copies"]
    assert c["total"] == c["dropped"] + c["delivered"] and c["delivered"] == 0
    assert c["dropped"] == doc["dropped"]["duplicate_blocks_dropped"]
    assert c["dropped_records"] >= c["dropped"]
    assert c["audit_duplicate_blocks"] == g["duplicate_blocks"] == 0
    assert c["audit_dropped"] == g["dropped_duplicate_blocks"] <= c["dropped"]
    if c["consumer_audit_records_dropped"] == 0 and not g.get("unaudited_blocks"):
        assert c["audit_dropped"] == c["dropped"]
    assert "block copies" in proc.stdout
    assert "recovery" in proc.stdout
