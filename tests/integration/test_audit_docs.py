"""docs/audit.md's JSON API examples run as written against an auditor, and every answer
has exactly the fields the page shows (issue 43: the dashboard's API was undocumented).

The auditor's store is filled with hand-made audit records, so every list the page
shows an element of (missing blocks, anomalies) has one; the topic and the consumer
group also exist on the local stack, so the lag measurement lists them too.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from memq import Consumer, Producer
from memq.audit.api import build_app
from memq.audit.config import AuditorConfig
from memq.audit.store import AuditStore, Ingest
from memq.devstack import StackState
from memq.devstack.procs import wait_for
from memq.formats.audit import AuditRecord
from memq.run.auditor import AuditorThread

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "audit.md").read_text()
#: (shell command, documented answer) pairs of the API section.
EXAMPLES = re.findall(r"```sh\n(.*?)```\s*```json\n(.*?)```", DOC, re.S)
#: The consumer group the page's examples name.
DOC_GROUP = "billing"
GROUP_CONF = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
              "auto.offset.reset": "earliest"}  # fmt: skip


def record(kind: str, seq: int, t: int, topic: str, group: str | None = None) -> Ingest:
    r = AuditRecord(
        kind=kind,  # type: ignore[arg-type]
        topic=topic,
        producer_id=(1 << 64) - 59,
        epoch=0,
        sequence=seq,
        records=100,
        content_crc=7,
        min_timestamp=t - 500,
        time=t,
        client="memq-producer" if kind == "produced" else "memq-consumer",
        acks="all" if kind == "produced" else None,
        bucket="memq-dev",
        key=f"3f/dev/topics/{topic}/dt=2025-11-22/hh=06/obj-{seq}",
        group=group,
        block_index=0,
        retention_ms=604_800_000 if kind == "produced" else None,
    )
    return Ingest(r, "memq.audit.docs", 0, seq)


@pytest.fixture
def topic(unique_name: Callable[[str], str]) -> str:
    return unique_name("docs")


@pytest.fixture
def group(unique_name: Callable[[str], str]) -> str:
    return unique_name("grp")


@pytest.fixture
def auditor(
    memq_stack: StackState, tmp_path: Path, topic: str, group: str,
    unique_name: Callable[[str], str],
) -> Iterator[AuditorThread]:  # fmt: skip
    address = memq_stack.extra["brokers"][0]["endpoint"]
    # The topic and group on the stack: a committed group for the lag measurement.
    with Producer({"bootstrap.servers": address}) as p:
        for i in range(10):
            p.produce(topic, b"d%d" % i).result(60)
    with Consumer({"bootstrap.servers": address, "group.id": group, **GROUP_CONF}) as c:
        c.subscribe(topic)
        got, deadline = 0, time.monotonic() + 60
        while got < 10 and time.monotonic() < deadline:
            got += len(c.consume(100, 1.0))
        assert got == 10
        c.commit()
    # Audit figures with one of everything: blocks 0-2 consumed (0 twice: a duplicate),
    # 3 and 4 never (missing once the grace of 1 s has passed).
    db = tmp_path / "audit.db"
    now = int(time.time() * 1000)
    store = AuditStore(db)
    store.apply([record("produced", i, now - 120_000 + i, topic) for i in range(5)])
    store.apply([record("consumed", i, now - 60_000, topic, group) for i in (0, 0, 1, 2)])
    store.close()
    a = AuditorThread(
        AuditorConfig(
            kafka={"bootstrap_servers": memq_stack.kafka_bootstrap},  # type: ignore[arg-type]
            audit_topic=unique_name("audit"),
            db_path=db,
            http_port=0,
            grace_period_s=1,
            lag={"bootstrap_servers": address, "interval_s": 1},  # type: ignore[arg-type]
        )
    )
    a.start()
    try:
        yield a
    finally:
        a.stop()


def shape_errors(documented: Any, answered: Any, where: str = "") -> list[str]:
    """Where ``answered`` has other fields than ``documented`` (objects: the same keys;
    maps by partition, whose keys are numbers: any; lists: their first elements, when
    both have one; values are not compared)."""
    if isinstance(documented, dict):
        if not isinstance(answered, dict):
            return [f"{where or '.'}: documented an object, answered {answered!r}"]
        if documented and all(k.isdigit() for k in documented):
            return []  # (next offsets by partition: the partitions the auditor read)
        errors = []
        if set(documented) != set(answered):
            errors.append(
                f"{where or '.'}: documented {sorted(documented)}, answered {sorted(answered)}"
            )
        for k in set(documented) & set(answered):
            errors += shape_errors(documented[k], answered[k], f"{where}.{k}")
        return errors
    if isinstance(documented, list) and isinstance(answered, list) and documented and answered:
        return shape_errors(documented[0], answered[0], f"{where}[0]")
    if isinstance(documented, list) and not isinstance(answered, list):
        return [f"{where}: documented a list, answered {answered!r}"]
    return []


def test_the_page_documents_every_api_route_once(auditor: AuditorThread) -> None:
    assert auditor.auditor is not None
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        app = build_app(auditor.auditor, executor=ex, registry=CollectorRegistry(), auth=None,
                        secure=False)  # fmt: skip
    routes = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    api = {r for r in routes if r.startswith("/api/")}
    documented = re.findall(r"^### `(/api/[a-z]+)`", DOC, re.M)
    assert sorted(documented) == sorted(api)
    assert len(EXAMPLES) == len(api)


def test_the_api_examples_answer_what_the_page_shows(
    auditor: AuditorThread, topic: str, group: str
) -> None:
    env = {**os.environ, "AUDITOR": auditor.url, "TOPIC": topic, "GROUP": group}
    # The lag table lists the group once the auditor measured it.
    wait_for(
        lambda: True if any(
            g["group"] == group for g in json.loads(run("curl -sS \"$AUDITOR/api/lag\"", env))["groups"]
        ) else None,
        timeout=60, what="the lag measurement lists the group",
    )  # fmt: skip
    assert EXAMPLES
    for script, documented in EXAMPLES:
        answered = json.loads(run(script, env))
        assert answered.get("error") is None, (script, answered)
        expected = json.loads(documented.replace(f'"{DOC_GROUP}"', json.dumps(group)))
        assert shape_errors(expected, answered) == [], (script, answered)
    summary = json.loads(run(EXAMPLES[0][0], env))
    (t,) = summary["topics"]
    (g,) = t["groups"]
    assert (t["topic"], t["produced_blocks"], g["group"]) == (topic, 5, group)
    assert (g["consumed_blocks"], g["missing_blocks"], g["duplicate_blocks"]) == (3, 2, 1)
    assert g["status"] == "missing" and g["reason"].startswith("200 records in 2 blocks")


def run(script: str, env: dict[str, str]) -> str:
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return out.stdout
