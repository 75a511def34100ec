from __future__ import annotations

import gc

from memq.config import load_broker_config
from memq.run.broker import tune_gc


def test_the_broker_sets_its_gc_thresholds_or_leaves_pythons() -> None:
    before = gc.get_threshold()
    try:
        tune_gc(load_broker_config(data={}, env={}))
        assert gc.get_threshold() == (20_000, 20, 100)
        gc.set_threshold(700, 10, 10)
        tune_gc(load_broker_config(data={"gc_thresholds": None}, env={}))
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_the_broker_process_exports_its_cpu_memory_and_gc() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from memq.run.broker import process_metrics

    registry = CollectorRegistry()
    process_metrics(registry)
    text = generate_latest(registry).decode()
    for name in (
        "python_gc_collections_total",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "python_info",
    ):
        assert f"\n{name}" in text or text.startswith(name), name
