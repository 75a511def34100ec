"""The whole benchmark suite: every benchmark, >= 3 repetitions, baselines, report + plots.

Runs, on one private local stack (plus Spark's own for the backfill), with fixed seeds:

- formats: block encode/decode per codec vs a plain memory copy;
- ingest: acks 0/1/all x storage devnull/filesystem/s3 vs confluent-kafka producing
  straight to Kafka (Tansu) and vs raw boto3 PUTs; broker CPU s/GiB and peak RSS;
- latency: end-to-end p50/p99 vs batch.ms and batch.bytes, with PUTs/hour;
- consume: memq.Consumer from S3 and filesystem vs raw GETs and direct Kafka consume;
- backfill: Spark ``memq`` source to Parquet vs a raw parallel download;
- scaling: 1/2/4 producer processes x 1/3 brokers;
- cost: ``memq.cost`` for a reference workload, with the PUTs/GiB measured here.

Every figure is min/median/max over the repetitions; every ratio is computed within a
repetition (MemQ and its baseline measured back to back) and then summarised. Writes
``<out>/suite.json`` (all raw runs), ``<out>/report.md`` and ``<out>/*.png``.

    python benchmarks/suite.py [--quick] [--reps 3] [--out benchmarks/results]
                               [--only ingest,latency,...]

``--quick`` (part of ``make test``) shrinks every size so the whole suite runs in about
a minute and skips the Spark backfill (``bench_backfill.py --quick`` has its own smoke
test); its numbers are not meaningful, only that every script still works end to end.
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

SECTIONS = ("formats", "ingest", "latency", "consume", "backfill", "scaling")


def _spread_of(
    runs: list[dict[str, Any]], get: Callable[[dict[str, Any]], float]
) -> dict[str, float]:
    return spread([float(get(r)) for r in runs])


def formats(quick: bool, reps: int) -> dict[str, Any]:
    runs = [bench_formats.run(quick=True) for _ in range(reps)]
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


def ingest(quick: bool, reps: int) -> dict[str, Any]:
    records = 4_096 if quick else 65_536
    modes = ("all",) if quick else ("0", "1", "all")
    out: dict[str, Any] = {"records": records, "record_bytes": bench_produce.RECORD, "acks": {}}
    for acks in modes:
        runs = []
        for rep in range(reps):
            eprint(f"ingest acks={acks} rep {rep + 1}/{reps}")
            runs.append(bench_produce.run(records, acks, quick)["results"])
        rows: dict[str, Any] = {}
        for name in ("devnull", "filesystem", "filesystem_zstd", "s3"):
            rows[name] = {
                "MBps": _spread_of(runs, lambda r, n=name: r[n]["MBps"]),
                "vs_kafka_direct": _spread_of(
                    runs, lambda r, n=name: r[n]["MBps"] / r["kafka"]["MBps"]
                ),
                "vs_s3_raw_put": _spread_of(
                    runs, lambda r, n=name: r[n]["MBps"] / r["s3raw"]["MBps"]
                ),
                "ack_p99_ms": _spread_of(runs, lambda r, n=name: r[n]["ack_p99_ms"]),
                "broker_cpu_s_per_GiB": _spread_of(
                    runs, lambda r, n=name: r[n]["broker_cpu_s_per_GiB"]
                ),
                "broker_peak_rss_MB": _spread_of(
                    runs, lambda r, n=name: r[n]["broker_peak_rss_MB"]
                ),
            }
        rows["s3"]["puts_per_GiB"] = _spread_of(runs, lambda r: r["s3"]["puts_per_GiB"])
        rows["kafka_direct"] = {"MBps": _spread_of(runs, lambda r: r["kafka"]["MBps"])}
        rows["s3_raw_put"] = {"MBps": _spread_of(runs, lambda r: r["s3raw"]["MBps"])}
        out["acks"][acks] = {"rows": rows, "runs": runs}
    return out


def consume(quick: bool, reps: int) -> dict[str, Any]:
    records = 4_096 if quick else 65_536
    runs = []
    for rep in range(reps):
        eprint(f"consume rep {rep + 1}/{reps}")
        runs.append(bench_consume.run(records, quick)["results"])
    rows = {
        name: {
            "MBps": _spread_of(runs, lambda r, n=name: r[n]["MBps"]),
            "vs_s3_raw_get": _spread_of(runs, lambda r, n=name: r[n]["MBps"] / r["s3raw"]["MBps"]),
            "vs_kafka_direct": _spread_of(
                runs, lambda r, n=name: r[n]["MBps"] / r["kafka"]["MBps"]
            ),
        }
        for name in ("s3", "filesystem")
    }
    rows["s3_raw_get"] = {"MBps": _spread_of(runs, lambda r: r["s3raw"]["MBps"])}
    rows["kafka_direct"] = {"MBps": _spread_of(runs, lambda r: r["kafka"]["MBps"])}
    return {"records": records, "rows": rows, "runs": runs}


def backfill(quick: bool, reps: int) -> dict[str, Any]:
    if quick:
        return {"skipped": "not in --quick (bench_backfill.py --quick has its own smoke test)"}
    doc = bench_backfill.run(
        False, bench_backfill.Compression.NONE, "local[*]", size=(24, 4), repeats=reps
    )
    res = doc["results"]
    records = doc["data"]["records"]
    ceil = res["ceiling_boto3_download"]["runs_seconds"]

    def rate(seconds: list[float]) -> dict[str, float]:
        return spread([records / s for s in seconds])

    def ratio(seconds: list[float]) -> dict[str, float]:
        return spread([c / s for s, c in zip(seconds, ceil, strict=True)])

    rows = {
        "ceiling_boto3_download": {"records_per_s": rate(ceil)},
        "spark_backfill_parquet": {
            "records_per_s": rate(res["spark_backfill_parquet"]["runs_seconds"]),
            "vs_ceiling": ratio(res["spark_backfill_parquet"]["runs_seconds"]),
        },
        "spark_source_only_noop": {
            "records_per_s": rate(res["spark_source_only_noop"]["runs_seconds"]),
            "vs_ceiling": ratio(res["spark_source_only_noop"]["runs_seconds"]),
        },
        "memq_consumer": {
            "records_per_s": rate(res["memq_consumer"]["runs_seconds"]),
            "vs_ceiling": ratio(res["memq_consumer"]["runs_seconds"]),
        },
    }
    return {"data": doc["data"], "rows": rows, "raw": doc}


def run(quick: bool, reps: int, only: set[str]) -> dict[str, Any]:
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
    with benchlib.shared_stack():
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
    doc["seconds"]["total"] = round(time.monotonic() - t0, 1)
    doc["cost"] = report.cost_section(doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke mode: tiny sizes, no Spark")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per figure (>= 3)")
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS, help="output directory")
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    a = ap.parse_args(argv)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    if a.reps < 3 and not a.quick:
        ap.error("--reps must be at least 3 (min/median/max)")
    doc = run(a.quick, a.reps, only)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "suite.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = report.write(doc, a.out)
    print(md.read_text())
    print(f"wrote {a.out / 'suite.json'}, {md} and plots in {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
