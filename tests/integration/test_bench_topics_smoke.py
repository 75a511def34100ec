"""`benchmarks/bench_topics.py --quick` (one broker with 1 and 20 topics) runs end to end:
every trickle record is acknowledged, the hot topic moves data, figures are written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # 20 s or more: run first, not in `make check`

ROOT = Path(__file__).parent.parent.parent


def test_bench_topics_quick(tmp_path: Path) -> None:
    out = tmp_path / "topics.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_topics.py"), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [r["topics"] for r in doc["runs"]] == [1, 20]
    for r in doc["runs"]:
        assert r["hot_MBps"] > 0 and r["broker_peak_rss_MB"] > 0 and r["pool_allocated_MB"] > 0
        assert r["trickle_failed"] == 0
    assert doc["runs"][1]["trickle_records"] >= 19  # every trickle topic acked in the window
    assert [row["topics"] for row in doc["summary"]] == [1, 20]
    assert doc["summary"][0]["hot_vs_1_topic"] == {"min": 1.0, "median": 1.0, "max": 1.0}
    assert "target rss_under_1GiB_at_max_topics" in proc.stdout
