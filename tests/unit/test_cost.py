"""The cost model's arithmetic (pure) and the `memq cost` command."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memq.cli.main import app
from memq.cost import Prices, Workload, estimate


def line(lines: list, prefix: str) -> float:
    (c,) = [c for c in lines if c.item.startswith(prefix)]
    return float(c.usd_per_day)


def test_size_triggered_batches_and_every_line_item() -> None:
    w = Workload(ingest_mbps=80.0, batch_bytes=8_000_000, batch_ms=10_000, writers=2,
                 retention_days=10, consumer_groups=3)  # fmt: skip
    est = estimate(w)
    gb_day = 80e6 * 86_400 / 1e9  # 6912 GB
    # 40 MB/s per writer fills 8 MB in 0.2 s: 2 writers x 5 objects/s
    assert est.facts["batch_seal_interval_s"] == pytest.approx(0.2)
    assert est.facts["objects_per_day"] == 864_000
    assert line(est.memq, "S3 PUT") == pytest.approx(864_000 / 1000 * 0.005)
    assert line(est.memq, "S3 GET") == pytest.approx(3 * 864_000 / 1000 * 0.0004)
    assert line(est.memq, "S3 storage") == pytest.approx(gb_day * 10 * 0.023 / 30)
    assert line(est.kafka, "replication") == pytest.approx(gb_day * 2 * 0.02)
    assert line(est.kafka, "consumers") == pytest.approx(gb_day * 3 * (2 / 3) * 0.02)
    assert line(est.kafka, "broker disks") == pytest.approx(gb_day * 10 * 3 / 0.5 * 0.08 / 30)
    assert est.memq_total == pytest.approx(sum(c.usd_per_day for c in est.memq))
    assert 0 < est.ratio < 0.2


def test_time_triggered_batches_cost_more_puts_at_low_rates() -> None:
    slow = estimate(Workload(ingest_mbps=0.5, batch_ms=1000, writers=2))
    assert slow.facts["batch_seal_interval_s"] == 1.0  # 8 MiB never fills at 0.25 MB/s
    assert slow.facts["objects_per_day"] == 2 * 86_400
    longer = estimate(Workload(ingest_mbps=0.5, batch_ms=10_000, writers=2))
    assert line(longer.memq, "S3 PUT") == pytest.approx(line(slow.memq, "S3 PUT") / 10)


def test_compression_and_fetch_from_follower_and_prices() -> None:
    base = estimate(Workload())
    zstd = estimate(Workload(compression_ratio=4.0))
    assert line(zstd.kafka, "replication") == pytest.approx(line(base.kafka, "replication") / 4)
    ffr = estimate(Workload(kafka_fetch_from_follower=True))
    assert line(ffr.kafka, "consumers") == 0
    cheap = estimate(Workload(), Prices(s3_put_per_1k=0.0))
    assert line(cheap.memq, "S3 PUT") == 0


@pytest.mark.parametrize(
    ("kw", "what"),
    [({"ingest_mbps": 0}, "ingest_mbps"), ({"writers": 0}, "writers"),
     ({"cross_az_fraction": 1.5}, "cross_az_fraction"), ({"compression_ratio": 0}, "compression")],
)  # fmt: skip
def test_bad_inputs_name_the_field(kw: dict, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        estimate(Workload(**kw))


def test_cli_json_and_errors() -> None:
    r = CliRunner().invoke(app, ["cost", "--ingest-mbps", "10", "--groups", "2", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["workload"]["consumer_groups"] == 2
    assert doc["memq_usd_per_day"] < doc["kafka_usd_per_day"]
    assert {c["item"] for c in doc["memq"]} >= {"S3 PUT (one per batch)", "S3 storage (retention)"}
    r = CliRunner().invoke(app, ["cost", "--price", "nope=1"])
    assert r.exit_code == 2 and "expected KEY=USD" in " ".join(r.output.replace("│", " ").split())
    r = CliRunner().invoke(app, ["cost"])
    assert r.exit_code == 0 and "of Kafka" in r.output and "Assumptions" in r.output
