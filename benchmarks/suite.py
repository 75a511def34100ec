"""The whole benchmark suite: every benchmark, >= 3 repetitions, baselines, report + plots.

Runs, on one private local stack (plus Spark's own for the backfill), with fixed seeds:

- formats: block encode/decode per codec vs a plain memory copy;
- ingest: acks=all, one producing thread, ``produce()`` and ``produce_batch()`` x storage
  devnull/filesystem/s3 vs confluent-kafka (one thread, acks=all, idempotent, its
  documented throughput settings) producing straight to the stack's Apache Kafka (one
  KRaft node) and vs raw boto3 PUTs with the broker's upload concurrency; with each
  write path's total CPU per GiB, MemQ's against Kafka's at replication factor 3
  (``benchlib.CPU_TOTAL_METHOD``);
- latency: end-to-end p50/p99 vs batch.ms and batch.bytes, with PUTs/hour;
- consume: memq.Consumer from S3 and filesystem vs raw GETs (same concurrency) and
  direct Kafka consume;
- backfill: Spark ``memq`` source vs Spark's built-in Parquet reader over the same
  records in the same S3 through S3A (and on local disk; and to Parquet, and a raw
  parallel download);
- scaling: 1/2/4 producer processes x 1/3 brokers;
- cost: ``memq.cost`` for a reference workload, with the PUTs/GiB measured here.

Method (issue 19): ingest, consume and backfill figures are steady-state: a warm-up
(excluded), then a window of >= 20 s in which only bytes acknowledged (handed out) inside
the window count, with CPU seconds per GiB of every process involved (client, broker,
Kafka, moto, Spark) from /proc (``benchlib.steady_state`` / ``repeat_window``). Every
figure is min/median/max over the repetitions; every ratio is computed within a
repetition (MemQ and its baseline measured back to back) and then summarised. Writes
``<out>/suite.json`` (all raw runs), ``<out>/report.md`` and ``<out>/*.png``.

    python benchmarks/suite.py [--quick] [--reps 3] [--out benchmarks/results]
                               [--only ingest,latency,...] [--merge]

``--merge`` keeps the other sections of the existing ``<out>/suite.json`` (a partial
re-run after a change); report.md then names when each section was measured.

``--quick`` (part of ``make test``) uses 2 s windows and tiny sizes and skips the Spark
backfill (``bench_backfill.py --quick`` has its own smoke test): a smoke of the method,
its numbers are not figures, only proof that every script still works end to end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import bench_backfill
import bench_consume
import bench_formats
import bench_latency
import bench_produce
import bench_scaling
import benchlib
import report
from benchlib import eprint, spread

from memq.cli.bench import SECTIONS  # (one list: `memq bench --only` checks it too)


def _spread_of(
    runs: list[dict[str, Any]], get: Callable[[dict[str, Any]], float]
) -> dict[str, float]:
    return spread([float(get(r)) for r in runs])


def formats(quick: bool, reps: int) -> dict[str, Any]:
    # (not quick: each cell is the median of 5 rounds of >= 0.5 s after a warm-up call;
    # quick rounds of 50 ms measured mostly the first call's cache filling)
    runs = [bench_formats.run(quick=quick) for _ in range(reps)]
    rows = []
    for i, r0 in enumerate(runs[0]["results"]):
        rows.append(
            {
                "record_size": r0["record_size"],
                "compression": r0["compression"],
                "compression_ratio": r0["compression_ratio"],
                "encode_MBps": _spread_of(runs, lambda r, i=i: r["results"][i]["encode_MBps"]),
                "decode_MBps": _spread_of(runs, lambda r, i=i: r["results"][i]["decode_MBps"]),
                "copy_MBps": _spread_of(runs, lambda r, i=i: r["results"][i]["copy_ceiling_MBps"]),
            }
        )
    return {"rows": rows}


def _cpu(runs: list[dict[str, Any]], name: str) -> dict[str, dict[str, float]]:
    """CPU-s/GiB per process (those present in every repetition), min/median/max."""
    procs = set.intersection(*(set(r[name]["cpu_s_per_GiB"]) for r in runs))
    return {
        p: _spread_of(runs, lambda r, n=name, p=p: r[n]["cpu_s_per_GiB"][p]) for p in sorted(procs)
    }


INGEST_ROWS = (
    "kafka",
    "s3raw",
    "devnull",
    "devnull_batch",
    "filesystem",
    "filesystem_batch",
    "s3",
    "s3_batch",
)


def ingest(quick: bool, reps: int) -> dict[str, Any]:
    """acks=all only: with >= 20 s steady windows, acks 0/1 would triple the section."""
    warmup, window = benchlib.timing(quick)
    out: dict[str, Any] = {
        "record_bytes": bench_produce.RECORD,
        "warmup_s": warmup,
        "window_s": window,
        "kafka_settings": bench_produce.KAFKA_CONF,
        "cpu_total_method": benchlib.CPU_TOTAL_METHOD,
        "acks": {},
    }
    for acks in ("all",):
        runs = []
        for rep in range(reps):
            eprint(f"ingest acks={acks} rep {rep + 1}/{reps}")
            runs.append(bench_produce.run(4096, acks, quick)["results"])
        rows: dict[str, Any] = {}
        for name in INGEST_ROWS:
            row: dict[str, Any] = {
                "name": runs[0][name]["name"],
                "MBps": _spread_of(runs, lambda r, n=name: r[n]["MBps"]),
                "cpu_s_per_GiB": _cpu(runs, name),
            }
            if name not in ("kafka", "s3raw"):
                row.update(
                    vs_kafka_direct=_spread_of(
                        runs, lambda r, n=name: r[n]["MBps"] / r["kafka"]["MBps"]
                    ),
                    vs_s3_raw_put=_spread_of(
                        runs, lambda r, n=name: r[n]["MBps"] / r["s3raw"]["MBps"]
                    ),
                    broker_peak_rss_MB=_spread_of(
                        runs, lambda r, n=name: r[n]["broker_peak_rss_MB"]
                    ),
                )
            totals = [r[name].get("cpu_total") for r in runs]
            if all(totals):
                row["cpu_total_s_per_GiB"] = {
                    part: _spread_of(totals, lambda t, p=part: t[p]) for part in totals[0]
                }
            for ratio in ("cpu_vs_kafka", "cpu_without_s3_vs_kafka"):
                if all(ratio in r[name] for r in runs):
                    row[ratio] = _spread_of(runs, lambda r, n=name, k=ratio: r[n][k])
            if "ack_p99_ms" in runs[0][name]:
                row["ack_p99_ms"] = _spread_of(runs, lambda r, n=name: r[n]["ack_p99_ms"])
            if name.startswith("s3") and name != "s3raw":
                row["puts_per_GiB"] = _spread_of(runs, lambda r, n=name: r[n]["puts_per_GiB"])
            rows[name] = row
        rows["kafka_direct"] = rows.pop("kafka")
        rows["s3_raw_put"] = rows.pop("s3raw")
        out["acks"][acks] = {"rows": rows, "runs": runs}
    return out


CONSUME_ROWS = ("s3", "s3_batch", "s3_arrow", "s3raw", "filesystem", "kafka")


def consume(quick: bool, reps: int) -> dict[str, Any]:
    records = 8_192 if quick else bench_consume.FULL_RECORDS
    runs = []
    for rep in range(reps):
        eprint(f"consume rep {rep + 1}/{reps}")
        runs.append(bench_consume.run(records, quick)["results"])
    rows: dict[str, Any] = {}
    for name in CONSUME_ROWS:
        rows[name] = {
            "name": runs[0][name]["name"],
            "MBps": _spread_of(runs, lambda r, n=name: r[n]["MBps"]),
            "cpu_s_per_GiB": _cpu(runs, name),
            "vs_s3_raw_get": _spread_of(runs, lambda r, n=name: r[n]["MBps"] / r["s3raw"]["MBps"]),
            "vs_kafka_direct": _spread_of(
                runs, lambda r, n=name: r[n]["MBps"] / r["kafka"]["MBps"]
            ),
        }
    rows["s3_raw_get"] = rows.pop("s3raw")
    rows["kafka_direct"] = rows.pop("kafka")
    warmup, window = benchlib.timing(quick)
    return {"records": records, "warmup_s": warmup, "window_s": window, "rows": rows,
            "runs": runs}  # fmt: skip


def backfill(quick: bool, reps: int) -> dict[str, Any]:
    if quick:
        return {"skipped": "not in --quick (bench_backfill.py --quick has its own smoke test)"}
    doc = bench_backfill.run(
        False, bench_backfill.Compression.NONE, "local[*]", size=(24, 4), repeats=reps
    )
    keep = ("MBps", "records_per_s", "cpu_s_per_GiB", "vs_parquet_s3a", "vs_parquet_local")
    rows = {name: {k: r[k] for k in keep if k in r} for name, r in doc["results"].items()}
    return {"data": doc["data"], "rows": rows, "raw": doc}


def run(quick: bool, reps: int, only: set[str], checkpoint: Path | None = None) -> dict[str, Any]:
    """``checkpoint``: written after every section, so a late failure keeps the rest."""
    t0 = time.monotonic()
    doc: dict[str, Any] = {
        "benchmark": "suite",
        "quick": quick,
        "reps": reps,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": benchlib.machine(),
        "sections": {},
        "seconds": {},
    }
    with benchlib.shared_stack() as state:
        doc["kafka_server"] = benchlib.kafka_server(state)
        for name in SECTIONS:
            if name not in only:
                continue
            s0 = time.monotonic()
            eprint(f"== {name}")
            if name == "formats":
                doc["sections"][name] = formats(quick, reps)
            elif name == "ingest":
                doc["sections"][name] = ingest(quick, reps)
            elif name == "latency":
                doc["sections"][name] = bench_latency.run(quick, reps)
            elif name == "consume":
                doc["sections"][name] = consume(quick, reps)
            elif name == "backfill":
                doc["sections"][name] = backfill(quick, reps)
            elif name == "scaling":
                doc["sections"][name] = bench_scaling.run(quick, reps)
            doc["seconds"][name] = round(time.monotonic() - s0, 1)
            if checkpoint is not None:
                checkpoint.parent.mkdir(parents=True, exist_ok=True)
                checkpoint.write_text(json.dumps(doc, indent=2) + "\n")
    doc["seconds"]["total"] = round(time.monotonic() - t0, 1)
    doc["cost"] = report.cost_section(doc)
    return doc


def merged(path: Path, new: dict[str, Any]) -> dict[str, Any]:
    """``new``'s sections over those of the suite run saved at ``path`` (if any); each
    section keeps the time it was measured (``section_times``)."""
    if not path.exists():
        return new
    old = json.loads(path.read_text())
    if old.get("quick") != new["quick"] or old.get("reps") != new["reps"]:
        raise SystemExit(
            f"--merge: {path} was run with quick={old.get('quick')} reps={old.get('reps')}, "
            f"this run with quick={new['quick']} reps={new['reps']}: run them alike"
        )
    times = {name: old["time"] for name in old["sections"]}
    times.update(old.get("section_times", {}))
    times.update({name: new["time"] for name in new["sections"]})
    out = {**old, "sections": {**old["sections"], **new["sections"]}}
    out["seconds"] = {**old.get("seconds", {}), **new["seconds"]}
    # the total of what the merged report shows, not of this run's sections only
    out["seconds"]["total"] = round(
        sum(t for name, t in out["seconds"].items() if name != "total"), 1
    )
    out["section_times"] = {name: times[name] for name in out["sections"]}
    out["time"], out["machine"] = new["time"], new["machine"]
    kept = old.get("kafka_server", report.UNNAMED_KAFKA)
    if new.get("kafka_server", kept) != kept:
        out["kafka_server"] = f"{new['kafka_server']}; sections kept from earlier: {kept}"
    out["cost"] = report.cost_section(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke mode: tiny sizes, no Spark")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per figure (>= 3)")
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS, help="output directory")
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the other sections of the existing suite.json (re-run only --only)",
    )
    a = ap.parse_args(argv)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    if a.reps < 3 and not a.quick:
        ap.error("--reps must be at least 3 (min/median/max)")
    doc = run(a.quick, a.reps, only, a.out / "suite.partial.json")
    if a.merge:
        doc = merged(a.out / "suite.json", doc)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "suite.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = report.write(doc, a.out)
    print(md.read_text())
    print(f"wrote {a.out / 'suite.json'}, {md} and plots in {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
