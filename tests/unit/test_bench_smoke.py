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
