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
        names = ["devnull", "filesystem", "filesystem_zstd", "s3"]
        fig, ax = plt.subplots(figsize=(8, 4.2))
        width = 0.8 / len(modes)
        for i, acks in enumerate(modes):
            rows = sec["ingest"]["acks"][acks]["rows"]
            med, err = _err([rows[n]["MBps"] for n in names])
            xs = [j + i * width for j in range(len(names))]
            ax.bar(xs, med, width, yerr=err, capsize=3, label=f"MemQ acks={acks}")
        rows = sec["ingest"]["acks"][modes[-1]]["rows"]
        ax.axhline(rows["kafka_direct"]["MBps"]["median"], color="k", ls="--",
                   label="Kafka direct (baseline)")  # fmt: skip
        ax.axhline(rows["s3_raw_put"]["MBps"]["median"], color="tab:red", ls=":",
                   label="raw S3 PUT (baseline)")  # fmt: skip
        ax.set_xticks([j + width * (len(modes) - 1) / 2 for j in range(len(names))], names)
        ax.set_ylabel("MB/s of record payload")
        ax.set_title("Ingest throughput (median, min-max bars)")
        ax.legend(fontsize=8)
        save(fig, "ingest.png")

        fig, ax = plt.subplots(figsize=(7, 3.8))
        rows = sec["ingest"]["acks"][modes[-1]]["rows"]
        st = ["devnull", "filesystem", "s3"]
        med, err = _err([rows[n]["broker_cpu_s_per_GiB"] for n in st])
        ax.bar(st, med, yerr=err, capsize=3, color="tab:purple")
        ax.set_ylabel("broker CPU seconds per GiB")
        ax2 = ax.twinx()
        ax2.plot(
            st, [rows[n]["broker_peak_rss_MB"]["median"] for n in st], "o-", color="tab:orange"
        )
        ax2.set_ylabel("broker peak RSS (MB)", color="tab:orange")
        ax.set_title(f"Broker cost per storage (acks={modes[-1]})")
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
        names = ["s3", "s3_raw_get", "filesystem", "kafka_direct"]
        labels = ["MemQ from S3", "raw S3 GET", "MemQ from filesystem", "Kafka direct"]
        med, err = _err([rows[n]["MBps"] for n in names])
        fig, ax = plt.subplots(figsize=(7, 3.8))
        ax.bar(labels, med, yerr=err, capsize=3,
               color=["tab:blue", "tab:gray", "tab:blue", "tab:gray"])  # fmt: skip
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
        ax.set_title("Backfill vs raw parallel download")
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
        "All servers are local (moto S3 is one Python process, Tansu speaks Kafka), "
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
        lines += [f"## Ingest ({ing['records']:,} records of {ing['record_bytes']} B, 4 threads, "
              "broker in its own process)", ""]  # fmt: skip
        for acks, d in ing["acks"].items():
            rows = d["rows"]
            lines += [f"### acks={acks}", "",
                  f"Baselines: Kafka direct (confluent-kafka -> Tansu, acks=all) "
                  f"{_f(rows['kafka_direct']['MBps'])} MB/s; raw S3 PUT of 8 MiB objects "
                  f"{_f(rows['s3_raw_put']['MBps'])} MB/s.", "",
                  "| storage | MB/s | vs Kafka direct | vs raw S3 PUT | ack p99 ms | broker CPU s/GiB | broker peak RSS MB |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
            for n in ("devnull", "filesystem", "filesystem_zstd", "s3"):
                r = rows[n]
                lines.append(f"| {n} | {_f(r['MBps'])} | {_x(r['vs_kafka_direct'])} | "
                         f"{_x(r['vs_s3_raw_put'])} | {_f(r['ack_p99_ms'])} | "
                         f"{_f(r['broker_cpu_s_per_GiB'], '{:.1f}')} | {_f(r['broker_peak_rss_MB'])} |")  # fmt: skip
            puts = rows["s3"]["puts_per_GiB"]
            lines += [
                "",
                f"S3 PUTs per GiB: {_f(puts, '{:.1f}')} (ideal 128 with 8 MiB batches)"
                + ("." if acks == "all" else "; uploads after the last ack are not counted.")
                if puts["max"] > 0
                else "S3 PUTs per GiB: not measured (with acks=0 the run ends before uploads).",
                "",
            ]
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
        rows = sec["consume"]["rows"]
        lines += [f"## Consume ({sec['consume']['records']:,} records of 1 KiB, 4 fetch threads)", "",
              "| path | MB/s | vs raw S3 GET | vs Kafka direct |", "|---|---|---|---|",
              f"| memq.Consumer from S3 | {_f(rows['s3']['MBps'])} | {_x(rows['s3']['vs_s3_raw_get'])} | {_x(rows['s3']['vs_kafka_direct'])} |",
              f"| memq.Consumer from filesystem | {_f(rows['filesystem']['MBps'])} | | {_x(rows['filesystem']['vs_kafka_direct'])} |",
              f"| raw S3 GET (baseline) | {_f(rows['s3_raw_get']['MBps'])} | | |",
              f"| Kafka direct consume (baseline) | {_f(rows['kafka_direct']['MBps'])} | | |", ""]  # fmt: skip
    if "backfill" in sec:
        b = sec["backfill"]
        lines += ["## Backfill (Spark local[*] -> Parquet) vs raw parallel download", ""]
        if "skipped" in b:
            lines += [f"Skipped: {b['skipped']}.", ""]
        else:
            d = b["data"]
            lines += [f"{d['objects']} objects, {d['records']:,} records, {d['object_bytes']:,} bytes.",
                  "", "| reader | records/s | vs download ceiling |", "|---|---|---|"]  # fmt: skip
            for n, r in b["rows"].items():
                lines.append(f"| {n} | {_f(r['records_per_s'])} | "
                         f"{_x(r['vs_ceiling']) if 'vs_ceiling' in r else 'baseline'} |")  # fmt: skip
            lines.append("")
    if "scaling" in sec:
        sc = sec["scaling"]
        lines += [f"## Scaling ({sc['setup']['records_per_producer']:,} records per producer process, "
              f"acks=all, filesystem storage, {doc['machine']['cpus']} CPUs)", "",
              "| producers | brokers | MB/s | vs 1 producer / 1 broker |", "|---|---|---|---|"]  # fmt: skip
        for c in sc["cells"].values():
            lines.append(
                f"| {c['producers']} | {c['brokers']} | {_f(c['MBps'])} | {_x(c['vs_1p_1b'])} |"
            )
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


def write(doc: dict[str, Any], out: Path) -> Path:
    plots = _plots(doc, out)
    md = out / "report.md"
    md.write_text(_md(doc, plots))
    return md


if __name__ == "__main__":
    import json

    path = Path(sys.argv[1])
    print(write(json.loads(path.read_text()), path.parent))
