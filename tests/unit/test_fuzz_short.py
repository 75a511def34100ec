"""A short coverage-guided fuzzing run of every decoder (atheris), so the harness cannot
rot and shallow bugs are caught on every `make test`; `make chaos` runs it for longer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "fuzz" / "fuzz_decoders.py"
TARGETS = ["frame", "stream", "block", "batch", "notification", "audit", "kafka"]


@pytest.mark.parametrize("target", TARGETS)
def test_decoder_survives_fuzzing(target: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(HARNESS), target, "-runs=4000", "-seed=1", "-max_len=4096",
         "-timeout=10", "-rss_limit_mb=1024"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # (its seed corpus outlives the run)
    )  # fmt: skip
    log = proc.stderr[-3000:]
    assert proc.returncode == 0, log
    assert "Done 4000 runs" in proc.stderr, log
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*")), log
