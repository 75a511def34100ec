"""Markdown report and matplotlib plots from a suite document (``suite.json``).

python benchmarks/report.py benchmarks/results/suite.json   # re-render without re-running
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from memq.cost import Workload, estimate

GiB = 1 << 30


def _f(s: dict[str, float], fmt: str = "{:.0f}") -> str:
    """min / median / max, median in bold."""
    return f"{fmt.format(s['min'])} / **{fmt.format(s['median'])}** / {fmt.format(s['max'])}"


def _x(s: dict[str, float]) -> str:
    return _f(s, "{:.2f}x")


PROCS = ("client", "broker", "kafka", "s3_moto")
#: What a suite run that does not name its Kafka (``kafka_server``) is reported as.
UNNAMED_KAFKA = "a Kafka not named by the run"
BACKFILL_PROCS = ("client", "spark_tree", "broker", "s3_moto")
INGEST_MEMQ = ("devnull", "devnull_batch", "filesystem", "filesystem_batch", "s3", "s3_batch")


def _cpus(row: dict[str, Any], procs: tuple[str, ...] = PROCS) -> str:
    """CPU-s/GiB cells per process (median, min-max); blank where not measured."""
    cpu = row.get("cpu_s_per_GiB", {})
    return " | ".join(
        f"**{cpu[p]['median']:.2f}** ({cpu[p]['min']:.2f}-{cpu[p]['max']:.2f})" if p in cpu else ""
        for p in procs
    )


def cost_section(doc: dict[str, Any]) -> dict[str, Any]:
    """Cost model for a reference workload, with this run's measured PUTs/GiB beside the
    model's (the model assumes every batch fills ``batch.bytes`` when traffic allows)."""
    est = estimate(Workload(ingest_mbps=100.0, retention_days=7, writers=2, consumer_groups=2))
    out = est.to_dict()
    ing = doc["sections"].get("ingest", {}).get("acks", {}).get("all")
    if ing:
        out["measured_s3_puts_per_GiB"] = ing["rows"]["s3"]["puts_per_GiB"]["median"]
        out["model_puts_per_GiB"] = round(GiB / est.workload.batch_bytes, 1)
    return out


# --- plots ------------------------------------------------------------------------------


def _err(spreads: list[dict[str, float]]) -> tuple[list[float], list[list[float]]]:
    med = [s["median"] for s in spreads]
    return med, [[m - s["min"] for m, s in zip(med, spreads, strict=True)],
                 [s["max"] - m for m, s in zip(med, spreads, strict=True)]]  # fmt: skip


def _plots(doc: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[str] = []
    sec = doc["sections"]

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        made.append(name)

    if "ingest" in sec:
        modes = list(sec["ingest"]["acks"])
        rows = sec["ingest"]["acks"][modes[-1]]["rows"]
        names = [n for n in INGEST_MEMQ if n in rows]
        fig, ax = plt.subplots(figsize=(9, 4.2))
        med, err = _err([rows[n]["MBps"] for n in names])
        ax.bar(names, med, yerr=err, capsize=3, label=f"MemQ acks={modes[-1]}")
        ax.axhline(rows["kafka_direct"]["MBps"]["median"], color="k", ls="--",
                   label="Kafka direct, 1 thread (baseline)")  # fmt: skip
        ax.axhline(rows["s3_raw_put"]["MBps"]["median"], color="tab:red", ls=":",
                   label="raw S3 PUT (baseline)")  # fmt: skip
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylabel("MB/s of record payload")
        ax.set_title("Ingest, steady state (median, min-max bars)")
        ax.legend(fontsize=8)
        save(fig, "ingest.png")

        fig, ax = plt.subplots(figsize=(9, 4))
        allnames = ["kafka_direct", "s3_raw_put", *names]
        procs = list(PROCS)
        bottom = [0.0] * len(allnames)
        for p in procs:
            vals = [rows[n]["cpu_s_per_GiB"].get(p, {}).get("median", 0.0) for n in allnames]
            ax.bar(allnames, vals, bottom=bottom, label=p)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylabel("CPU seconds per GiB (median)")
        ax.set_title(f"CPU per GiB ingested, per process (acks={modes[-1]})")
        ax.legend(fontsize=8)
        save(fig, "broker_resources.png")

    if "latency" in sec:
        pts = sec["latency"]["points"]
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for ax, sweep, key, label in (
            (axes[0], "batch.ms", "batch_ms", "batch.ms"),
            (axes[1], "batch.bytes", "batch_bytes", "batch.bytes (KiB)"),
        ):
            ps = [p for p in pts if p["sweep"] == sweep]
            if not ps:
                continue
            xs = [p[key] / (1024 if key == "batch_bytes" else 1) for p in ps]
            for q, color in (("p50_ms", "tab:blue"), ("p99_ms", "tab:red")):
                med, err = _err([p[q] for p in ps])
                ax.errorbar(xs, med, yerr=err, fmt="o-", color=color, capsize=3, label=q[:3])
            ax.set_xscale("log")
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
            ax.minorticks_off()
            ax.set_xlabel(label)
            ax.set_ylabel("end-to-end latency (ms)")
            ax2 = ax.twinx()
            ax2.plot(xs, [p["puts_per_hour"] for p in ps], "s--", color="tab:gray")
            ax2.set_ylabel("S3 PUTs per hour", color="tab:gray")
            ax.legend(loc="upper left", fontsize=8)
            ax.set_title(f"latency vs {sweep}")
        ax = axes[2]
        for p in pts:
            ax.scatter(p["put_usd_per_day_per_MBps"], p["p99_ms"]["median"],
                       color="tab:blue" if p["sweep"] == "batch.ms" else "tab:green")  # fmt: skip
            lab = (
                f"{p['batch_ms']} ms"
                if p["sweep"] == "batch.ms"
                else f"{p['batch_bytes'] >> 10} KiB"
            )
            ax.annotate(lab, (p["put_usd_per_day_per_MBps"], p["p99_ms"]["median"]), fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("S3 PUT $/day per MB/s ingested")
        ax.set_ylabel("p99 latency (ms)")
        ax.set_title("the trade-off: latency vs PUT cost")
        save(fig, "latency.png")

    if "consume" in sec:
        rows = sec["consume"]["rows"]
        bars = [("s3", "MemQ from S3", "tab:blue"),
                ("s3_batch", "MemQ from S3,\nconsume_batch()", "tab:blue"),
                ("s3_arrow", "MemQ from S3,\nto_arrow()", "tab:blue"),
                ("s3_raw_get", "raw S3 GET", "tab:gray"),
                ("filesystem", "MemQ from\nfilesystem", "tab:blue"),
                ("kafka_direct", "Kafka direct", "tab:gray")]  # fmt: skip
        bars = [b for b in bars if b[0] in rows]  # (runs from before a row existed)
        med, err = _err([rows[n]["MBps"] for n, _, _ in bars])
        fig, ax = plt.subplots(figsize=(7, 3.8))
        ax.bar([lab for _, lab, _ in bars], med, yerr=err, capsize=3,
               color=[c for _, _, c in bars])  # fmt: skip
        ax.set_ylabel("MB/s of record payload")
        ax.set_title("Consume throughput vs baselines")
        save(fig, "consume.png")

    if "backfill" in sec and "rows" in sec["backfill"]:
        rows = sec["backfill"]["rows"]
        names = list(rows)
        med, err = _err([rows[n]["records_per_s"] for n in names])
        fig, ax = plt.subplots(figsize=(8, 3.8))
        ax.barh([n.replace("_", " ") for n in names], med, xerr=err, capsize=3)
        ax.set_xlabel("records/s")
        ax.set_title("Backfill readers, steady state (Spark local[*])")
        save(fig, "backfill.png")

    if "scaling" in sec:
        cells = sec["scaling"]["cells"].values()
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for nb in sorted({c["brokers"] for c in cells}):
            cs = sorted((c for c in cells if c["brokers"] == nb), key=lambda c: c["producers"])
            med, err = _err([c["MBps"] for c in cs])
            ax.errorbar([c["producers"] for c in cs], med, yerr=err, fmt="o-", capsize=3,
                        label=f"{nb} broker(s)")  # fmt: skip
        ax.set_xlabel("producer processes")
        ax.set_ylabel("MB/s")
        ax.set_xticks(sorted({c["producers"] for c in cells}))
        ax.set_title(f"Ingest scaling on {doc['machine']['cpus']} CPUs")
        ax.legend()
        save(fig, "scaling.png")
    return made


# --- markdown ---------------------------------------------------------------------------


def _backfill_md(b: dict[str, Any]) -> list[str]:
    """The backfill section; a run from before the S3A baseline (rows with
    ``vs_parquet_reader``, against Parquet on local disk) is shown as it was measured."""
    lines = ["## Backfill: Spark `memq` source vs Spark's built-in Parquet reader", ""]
    if "skipped" in b:
        return [*lines, f"Skipped: {b['skipped']}.", ""]
    d = b["data"]
    s3a = d.get("baseline_parquet_s3a")
    size = f"{d['baseline_parquet_bytes'] / 1e6:.0f} MB"
    if s3a:
        base = (f"the baseline reads the same records as uncompressed Parquet ({size}) from "
                "a bucket of the same S3 (moto) through Hadoop's S3A connector, input stream "
                f"`{s3a['stream']}` ({', '.join(f'{k}={v}' for k, v in s3a['settings'].items() if k != 'fs.s3a.endpoint')}); "
                "the same files on local disk are a second reference")  # fmt: skip
    else:
        base = (f"the baseline reads the same records as uncompressed Parquet on local disk "
                f"({size})")  # fmt: skip
    lines += [f"{d['objects']} objects, {d['records']:,} records of 1 KiB "
              f"({d['payload_bytes'] / 1e6:.0f} MB); {base}; the memq source reads them from "
              f"moto over HTTP. Each reader's job runs back to back for a {d['window_s']:g} s "
              "window after a warm-up job; MB/s of record payload. `spark` is the Spark JVM "
              "and its Python workers.",
              "", "| reader | MB/s | records/s | vs Parquet over S3A | vs Parquet on local disk | "
              + " | ".join(f"{p} CPU-s/GiB" for p in BACKFILL_PROCS) + " |",
              "|---|---|---|---|---|" + "---|" * len(BACKFILL_PROCS)]  # fmt: skip
    for n, r in b["rows"].items():
        vs_s3a = _x(r["vs_parquet_s3a"]) if "vs_parquet_s3a" in r else ""
        local = r.get("vs_parquet_local", r.get("vs_parquet_reader"))
        lines.append(f"| {n} | {_f(r['MBps'], '{:.1f}')} | {_f(r['records_per_s'])} | "
                     f"{vs_s3a} | {_x(local) if local else ''} | "
                     f"{_cpus(r, BACKFILL_PROCS)} |")  # fmt: skip
    if d.get("where_records"):
        lines += ["", f"The `where` rows keep the middle tenth of the records by time "
                  f"({d['where_records']:,} records; their MB/s and records/s count those) "
                  "and are compared with the Parquet reader's read of the same `WHERE`; "
                  "`pushdown`: with `spark.sql.python.filterPushdown.enabled` "
                  "(docs/spark.md)."]  # fmt: skip
    return [*lines, ""]


def _cpu_totals_md(ing: dict[str, Any], rows: dict[str, Any]) -> list[str]:
    """The ingest section's first table: each write path's CPU per GiB, MemQ's against
    Kafka's at replication factor 3 (empty for runs that did not measure it)."""
    kafka = rows.get("kafka_direct", {}).get("cpu_total_s_per_GiB")
    memq = [n for n in INGEST_MEMQ if "cpu_vs_kafka" in rows.get(n, {})]
    if kafka is None or not memq:
        return []
    out = ["**Total CPU per GiB ingested**, every process of each write path "
           f"({ing['cpu_total_method']}). On AWS the S3 server's CPU is not the user's: "
           "the last column leaves it out. devnull has no storage and filesystem no "
           "replication: the S3 rows are the product's comparison.", "",
           "| MemQ run | MemQ total CPU-s/GiB | of which S3 server (moto) | "
           "Kafka total CPU-s/GiB (RF 3) | MemQ / Kafka | MemQ without S3 server / Kafka |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for n in sorted(memq, key=lambda n: not n.startswith("s3")):  # the S3 rows first
        r = rows[n]
        t = r["cpu_total_s_per_GiB"]
        out.append(f"| {r['name']} | {_f(t['total'], '{:.2f}')} | {_f(t['s3'], '{:.2f}')} | "
                   f"{_f(kafka['total'], '{:.2f}')} | {_x(r['cpu_vs_kafka'])} | "
                   f"{_x(r['cpu_without_s3_vs_kafka'])} |")  # fmt: skip
    return [*out, ""]


def _md(doc: dict[str, Any], plots: list[str]) -> str:
    sec = doc["sections"]
    m = doc["machine"]
    lines: list[str] = [
        "# MemQ-py benchmark report",
        "",
        f"Run {doc['time']} on {m['cpus']} CPUs, Python {m['python']} ({m['platform']}); "
        f"{doc['reps']} repetitions per figure, shown as **min / median / max**; ratios are "
        "computed inside each repetition against the baseline measured in the same run."
        + (
            " **Quick (smoke) mode: sizes are tiny, numbers are not meaningful.**"
            if doc["quick"]
            else ""
        ),
        "",
        *(
            [
                "Sections measured at different times (`suite.py --merge`): "
                + ", ".join(f"{n} {t}" for n, t in doc["section_times"].items())
                + ".",
                "",
            ]
            if len(set(doc.get("section_times", {}).values())) > 1
            else []
        ),
        f"All servers are local (moto S3 is one Python process; Kafka: {_kafka(doc)}), "
        "everything shares the same cores, so absolute numbers are for this machine; the "
        "ratios are the point. Raw data: `suite.json`. Seconds per section: "
        + ", ".join(f"{k} {v}" for k, v in doc["seconds"].items())
        + ".",
        "",
    ]
    if "formats" in sec:
        lines += ["## Formats (block encode/decode, MB/s of payload)", "",
              "| record | codec | ratio | encode | decode | memory copy |",
              "|---|---|---|---|---|---|"]  # fmt: skip
        for r in sec["formats"]["rows"]:
            lines.append(f"| {r['record_size']} B | {r['compression']} | {r['compression_ratio']}x | "
                     f"{_f(r['encode_MBps'])} | {_f(r['decode_MBps'])} | {_f(r['copy_MBps'])} |")  # fmt: skip
        lines.append("")
    if "ingest" in sec:
        ing = sec["ingest"]
        lines += [f"## Ingest (1 KiB records, ONE producing thread per client, broker in its own "
              f"process; {ing['window_s']:g} s steady windows after {ing['warmup_s']:g} s "
              "warm-up)", "",
              "Only bytes acknowledged inside the window count; CPU-s/GiB is utime + stime "
              "from /proc per process over the window, per GiB acknowledged in it. Kafka "
              f"baseline: confluent-kafka, one thread, to {_kafka(doc)} with "
              + ", ".join(f"{k}={v}" for k, v in ing["kafka_settings"].items())
              + ". Raw S3 PUT baseline: 8 MiB objects, 4 at a time (the broker's ring).",
              ""]  # fmt: skip
        for acks, d in ing["acks"].items():
            rows = d["rows"]
            lines += [f"### acks={acks}", "", *_cpu_totals_md(ing, rows),
                  "| run | MB/s | ratio to baseline | ack p99 ms | PUTs/GiB | "
                  + " | ".join(f"{p} CPU-s/GiB" for p in PROCS) + " |",
                  "|---|---|---|---|---|" + "---|" * len(PROCS)]  # fmt: skip
            for n in ("kafka_direct", "s3_raw_put", *INGEST_MEMQ):
                if n not in rows:
                    continue
                r = rows[n]
                if n in ("kafka_direct", "s3_raw_put"):
                    ratio = "baseline"
                elif n.startswith("s3"):
                    ratio = _x(r["vs_s3_raw_put"]) + " vs raw PUT"
                else:
                    ratio = _x(r["vs_kafka_direct"]) + " vs Kafka"
                puts = _f(r["puts_per_GiB"], "{:.0f}") if "puts_per_GiB" in r else ""
                p99 = _f(r["ack_p99_ms"]) if "ack_p99_ms" in r else ""
                lines.append(f"| {r['name']} | {_f(r['MBps'], '{:.1f}')} | {ratio} | {p99} | "
                             f"{puts} | {_cpus(r)} |")  # fmt: skip
            lines += ["", "S3 PUTs per GiB: ideal 128 with 8 MiB batches.", ""]
    if "latency" in sec:
        lat = sec["latency"]
        s = lat["setup"]
        lines += ["## End-to-end latency vs batch settings", "",
              f"{s['rate_MBps']} MB/s offered ({s['rate_records_per_s']:,} records/s of "
              f"{s['record_bytes']} B, acks=all, S3 storage), {s['window_s']} s windows; latency "
              "is hand-out time minus the record's produce timestamp.", "",
              "| sweep | batch.ms | batch.bytes | p50 ms | p99 ms | PUTs/hour | PUT $/day per MB/s |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
        for p in lat["points"]:
            lines.append(f"| {p['sweep']} | {p['batch_ms']:,} | {p['batch_bytes']:,} | "
                     f"{_f(p['p50_ms'])} | {_f(p['p99_ms'])} | {p['puts_per_hour']:,} | "
                     f"{p['put_usd_per_day_per_MBps']:.2f} |")  # fmt: skip
        lines.append("")
    if "consume" in sec:
        con = sec["consume"]
        rows = con["rows"]
        lines += [f"## Consume ({con['records']:,} records of 1 KiB written once and re-read in a "
              f"loop, 4 fetch threads / 4 GET threads; {con['window_s']:g} s steady windows "
              f"after {con['warmup_s']:g} s warm-up)", "",
              "| path | MB/s | vs raw S3 GET | vs Kafka direct | "
              + " | ".join(f"{p} CPU-s/GiB" for p in PROCS) + " |",
              "|---|---|---|---|" + "---|" * len(PROCS)]  # fmt: skip
        for n, label in (("s3", "memq.Consumer from S3, `consume(500)`"),
                         ("s3_batch", "memq.Consumer from S3, `consume_batch(2000)`"),
                         ("s3_arrow", "memq.Consumer from S3, `consume_batch(2000).to_arrow()`"),
                         ("filesystem", "memq.Consumer from filesystem, `consume(500)`"),
                         ("s3_raw_get", "raw S3 GET (baseline)"),
                         ("kafka_direct", "Kafka direct consume (baseline)")):  # fmt: skip
            r = rows.get(n)
            if r is None:  # (results from before the row existed)
                continue
            vs_get = _x(r["vs_s3_raw_get"]) if n in ("s3", "s3_batch", "s3_arrow") else ""
            vs_k = _x(r["vs_kafka_direct"]) if n in ("s3", "filesystem") else ""
            lines.append(f"| {label} | {_f(r['MBps'], '{:.1f}')} | {vs_get} | {vs_k} | "
                         f"{_cpus(r)} |")  # fmt: skip
        lines.append("")
    if "backfill" in sec:
        lines += _backfill_md(sec["backfill"])
    if "scaling" in sec:
        sc = sec["scaling"]
        st = sc["setup"]
        lines += [f"## Scaling (producer processes x brokers, one producing thread each, acks=all, "
              f"filesystem storage, {doc['machine']['cpus']} CPUs; "
              f"{st.get('window_s', '?')} s steady windows after {st.get('warmup_s', '?')} s "
              "warm-up)", "",
              "| producers | brokers | MB/s | vs 1 producer / 1 broker | producers CPU-s/GiB "
              "| brokers CPU-s/GiB |", "|---|---|---|---|---|---|"]  # fmt: skip
        for c in sc["cells"].values():
            cpu = c.get("cpu_s_per_GiB", {})
            cells = [_f(cpu[k], "{:.2f}") if k in cpu else "" for k in ("producers", "brokers")]
            lines.append(f"| {c['producers']} | {c['brokers']} | {_f(c['MBps'], '{:.1f}')} | "
                         f"{_x(c['vs_1p_1b'])} | {cells[0]} | {cells[1]} |")  # fmt: skip
        lines.append("")
    c = doc.get("cost")
    if c:
        w = c["workload"]
        lines += ["## Cost model (`memq cost`)", "",
              f"Reference workload: {w['ingest_mbps']} MB/s, {w['retention_days']} days "
              f"retention, {w['consumer_groups']} consumer groups, batch.bytes "
              f"{w['batch_bytes']:,}, {w['writers']} writers, list prices "
              f"({', '.join(f'{k}={v}' for k, v in c['prices'].items())}).", "",
              "| design | item | USD/day | how |", "|---|---|---|---|"]  # fmt: skip
        for side in ("memq", "kafka"):
            for line in c[side]:
                lines.append(
                    f"| {side} | {line['item']} | {line['usd_per_day']:,.2f} | {line['formula']} |"
                )
        lines += ["", f"**MemQ ${c['memq_usd_per_day']:,.2f}/day vs Kafka "
              f"${c['kafka_usd_per_day']:,.2f}/day: {c['memq_vs_kafka']:.1%} of the cost.**"]  # fmt: skip
        if "measured_s3_puts_per_GiB" in c:
            lines += ["", f"Measured PUTs per GiB in this run: {c['measured_s3_puts_per_GiB']} "
                  f"(model: {c['model_puts_per_GiB']})."]  # fmt: skip
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def _kafka(doc: dict[str, Any]) -> str:
    """What the run's Kafka was (the label ``kafka`` in the CPU columns)."""
    return str(doc.get("kafka_server", UNNAMED_KAFKA))


def write(doc: dict[str, Any], out: Path) -> Path:
    plots = _plots(doc, out)
    md = out / "report.md"
    md.write_text(_md(doc, plots))
    return md


if __name__ == "__main__":
    import json

    path = Path(sys.argv[1])
    print(write(json.loads(path.read_text()), path.parent))
