"""The benchmarks' pure parts: CPU totals, ProducerPerformance's output and windows, and
report.md from a suite.json of the Tansu days."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import benchlib  # noqa: E402
import kafka_perf  # noqa: E402
import report  # noqa: E402


def test_cpu_totals_count_kafka_three_times() -> None:
    cpu = {"client": 2.0, "broker": 1.5, "kafka": 0.25, "s3_moto": 4.0}
    assert benchlib.cpu_totals(cpu, memq=True) == {
        "total": 8.25,  # 2 + 1.5 + 4 + 3 x 0.25
        "without_s3": 4.25,
        "s3": 4.0,
    }
    assert benchlib.cpu_totals({"client": 3.0, "kafka": 5.0}, memq=False) == {"total": 18.0}
    # a server on another machine (not measured): no total rather than a low one
    assert benchlib.cpu_totals({"client": 2.0, "broker": 1.5, "kafka": 0.2}, memq=True) is None
    assert benchlib.cpu_totals({"client": 3.0}, memq=False) is None


#: Lines as Kafka 4.1's ProducerPerformance prints them (Stats.printWindow / printTotal).
WINDOW = "209811 records sent, 41962.2 records/sec (40.98 MB/sec), 1290.3 ms avg latency, 2011.0 ms max latency."
TOTAL = (
    "936524 records sent, 42053.123456 records/sec (41.07 MB/sec), 1338.43 ms avg latency, "
    "3212.00 ms max latency, 1313 ms 50th, 2045 ms 95th, 2514 ms 99th, 3207 ms 99.9th."
)


def test_producer_performance_lines() -> None:
    assert kafka_perf.parse_window(WINDOW + "\n") == 209811
    assert kafka_perf.parse_window(TOTAL) is None
    total = kafka_perf.parse_total(TOTAL)
    assert total is not None
    assert total["records"] == 936524 and total["records_per_s"] == 42053
    assert total["MBps"] == pytest.approx(41.07 * 1.048576, abs=0.01)  # MiB/s -> MB/s
    assert (total["lat_p50_ms"], total["lat_p99_ms"], total["lat_p999_ms"]) == (1313, 2514, 3207)
    assert kafka_perf.parse_total(WINDOW) is None
    assert kafka_perf.parse_total("org.apache.kafka.common.errors.TimeoutException: x") is None


def test_steady_window_runs_from_the_first_line_after_the_warm_up() -> None:
    """Each line counts the records acked since the one before: the window's records are
    those of the lines after its first edge; CPU is the difference at the edges."""
    lines = [
        (4.0, 100, {"client": 1.0, "kafka": 0.5}),  # inside the warm-up: not an edge
        (9.0, 200, {"client": 2.0, "kafka": 1.0}),  # first edge (t0 + warm-up = 5)
        (14.0, 300, {"client": 4.0, "kafka": 2.0}),
        (19.0, 400, {"client": 5.5, "kafka": 2.5}),
    ]
    seconds, records, cpu = kafka_perf.steady_window(lines, t0=0.0, warmup=5.0) or (0, 0, {})
    assert (seconds, records) == (10.0, 700)
    assert cpu == {"client": 3.5, "kafka": 1.5}
    assert kafka_perf.steady_window(lines[:2], t0=0.0, warmup=5.0) is None


def test_run_length_covers_warm_up_and_window() -> None:
    # 100 MB/s, 1 KiB: a steady run lasts JVM start + 5 s + window + one reporting window
    assert kafka_perf.num_records(100.0, 1024, 5.0, 20.0) == pytest.approx(
        100e6 * (1 + 5 + 20 + 5) / 1024, abs=1
    )
    # a window too short to cut from 5 s lines: warm-up + window only (measured whole)
    assert kafka_perf.num_records(100.0, 1024, 1.0, 3.0) == pytest.approx(100e6 * 5 / 1024, abs=1)
    assert kafka_perf.num_records(0.0, 1024, 1.0, 3.0) == 10_000


def test_report_renders_the_committed_suite_run(tmp_path: Path) -> None:
    """The committed suite.json renders the committed report.md's tables (the rendering
    of a full run is stable: it is what `make bench` wrote)."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "suite.json").read_text())
    md = report.write(doc, tmp_path).read_text()
    committed = (ROOT / "benchmarks" / "results" / "report.md").read_text()
    tables = [line for line in committed.splitlines() if line.startswith("|")]
    assert tables and tables == [line for line in md.splitlines() if line.startswith("|")]
    assert "Kafka: Apache Kafka 4.1.1" in md and "Total CPU per GiB ingested" in md


def test_repetitions_aggregate_to_min_median_max() -> None:
    reps = [
        {"s3": {"MBps": 100.0, "cpu_s_per_GiB": {"broker": 2.0, "client": 1.0, "kafka": 0.1}}},
        {"s3": {"MBps": 80.0, "cpu_s_per_GiB": {"broker": 3.0, "client": 1.5}}},
        {"s3": {"MBps": 90.0, "cpu_s_per_GiB": {"broker": 2.5, "client": 0.5}}},
    ]
    got = benchlib.spread_rows(reps, "s3")
    assert got["MBps"] == {"min": 80.0, "median": 90.0, "max": 100.0}
    # only processes measured in every repetition
    assert got["cpu_s_per_GiB"] == {
        "broker": {"min": 2.0, "median": 2.5, "max": 3.0},
        "client": {"min": 0.5, "median": 1.0, "max": 1.5},
    }
