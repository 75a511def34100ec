"""``memq bench``: run the benchmark suite of a source checkout (``benchmarks/suite.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

import memq
from memq.errors import ConfigError

__all__ = ["SECTIONS", "bench", "suite_script"]

#: The suite's sections, in the order they run (``benchmarks/suite.py`` uses this list).
SECTIONS = ("formats", "ingest", "latency", "consume", "backfill", "scaling")


def suite_script() -> Path:
    """``benchmarks/suite.py`` next to the package (an editable install or a checkout)."""
    script = Path(memq.__file__).resolve().parent.parent / "benchmarks" / "suite.py"
    if not script.is_file():
        raise ConfigError(
            f"memq bench runs the benchmark scripts of a source checkout and {script} does not "
            "exist: clone the repository and run `make bench` (or `pip install -e .` there)"
        )
    return script


def bench(
    quick: bool = typer.Option(
        False, "--quick", help="Smoke mode: tiny sizes, no Spark; numbers are not meaningful."
    ),
    reps: int = typer.Option(
        3, "--reps", min=1, help="Repetitions per figure (>= 3 unless --quick)."
    ),
    out: Path = typer.Option(
        Path("benchmarks/results"), "--out", "-o", help="Directory for suite.json, report.md, PNGs."
    ),
    only: str = typer.Option(
        ",".join(SECTIONS),
        "--only",
        help="Comma-separated sections to run.",
    ),
    merge: bool = typer.Option(
        False,
        "--merge",
        help="Keep the other sections of the existing suite.json (re-run only --only).",
    ),
) -> None:
    """Run the benchmark suite on a private local stack (fixed seeds, about 45 minutes on
    2 cores; `make bench` adds the many-topics and Kafka-port benchmarks, ~70 minutes)
    and write benchmarks/results/report.md with min/median/max over the repetitions,
    each throughput beside its same-run baseline, PNG plots and the cost model. Servers
    named by MEMQ_S3_ENDPOINT / MEMQ_KAFKA_BOOTSTRAP / MEMQ_ZK_CONNECT are used instead
    of starting them."""
    names = [n.strip() for n in only.split(",") if n.strip()]
    if not names or any(n not in SECTIONS for n in names):
        raise typer.BadParameter(f"--only {only!r}: name sections of {', '.join(SECTIONS)}")
    try:  # (before minutes of setup, not after)
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise typer.BadParameter(f"--out {out}: {e.strerror or e}") from None
    cmd = [sys.executable, str(suite_script()), "--reps", str(reps), "--out", str(out)]
    cmd += ["--only", only] + (["--quick"] if quick else []) + (["--merge"] if merge else [])
    rc = subprocess.call(cmd)
    if rc:
        raise typer.Exit(rc)
