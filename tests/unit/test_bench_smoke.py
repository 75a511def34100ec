"""Smoke runs of the benchmark scripts (--quick), so they cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent


def test_bench_formats_quick(tmp_path: Path) -> None:
    out = tmp_path / "formats.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_formats.py"),
            "--quick",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    combos = {(r["record_size"], r["compression"]) for r in doc["results"]}
    assert combos == {(s, c) for s in (100, 1024) for c in ("none", "gzip", "zstd", "lz4")}
    for r in doc["results"]:
        assert r["encode_MBps"] > 0 and r["decode_MBps"] > 0 and r["copy_ceiling_MBps"] > 0
        assert r["encode_vs_copy"] > 0 and r["decode_vs_copy"] > 0
    assert "target" in proc.stdout and "enc/copy" in proc.stdout


#: A latency section as suite.json keeps it, with no points (enough for report.md).
LATENCY = {
    "setup": {"rate_MBps": 2.0, "rate_records_per_s": 2000, "record_bytes": 1024, "window_s": 5},
    "points": [],
}


def test_suite_merge_keeps_the_other_sections_with_their_times(tmp_path: Path) -> None:
    """``suite.py --merge`` re-runs the sections asked for and keeps the others of the
    saved suite.json, each with the time it was measured (named in report.md)."""
    old = {
        "benchmark": "suite",
        "quick": True,
        "reps": 1,
        "time": "2026-01-01T00:00:00Z",
        "machine": {},
        "sections": {"latency": LATENCY},
        "seconds": {"latency": 1.0, "total": 1.0},
    }
    (tmp_path / "suite.json").write_text(json.dumps(old))
    script = ROOT / "benchmarks" / "suite.py"
    # The backfill section (skipped in --quick) re-runs in no time: the merge is the point
    # here; the formats section's own smoke is test_bench_formats_quick.
    args = [sys.executable, str(script), "--quick", "--reps", "1", "--only", "backfill"]

    def merge() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*args, "--out", str(tmp_path), "--merge"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    proc = merge()
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "suite.json").read_text())
    assert set(doc["sections"]) == {"latency", "backfill"}
    assert doc["sections"]["latency"] == LATENCY
    assert doc["section_times"]["latency"] == "2026-01-01T00:00:00Z"
    assert doc["section_times"]["backfill"] == doc["time"] != old["time"]
    assert "latency 2026-01-01T00:00:00Z" in (tmp_path / "report.md").read_text()
    # the total covers every section shown, the kept ones too
    assert doc["seconds"]["total"] == round(1.0 + doc["seconds"]["backfill"], 1)

    # A saved run of another kind (here: not quick) is not mixed in.
    (tmp_path / "suite.json").write_text(json.dumps({**old, "quick": False, "reps": 3}))
    proc = merge()
    assert proc.returncode != 0 and "run them alike" in proc.stderr
