"""New-user flows: the README's commands, in order, on a fresh `memq dev up`, then again
after `memq dev down` / `memq dev up` in the same state dir (issue 16).

Every command runs as a subprocess, as a user types it. The stack reuses the session's S3
(its own bucket) and ZooKeeper (its own chroot) but starts its own Kafka and auditor:
the dev Kafka keeps everything in memory, so down/up gives an empty one, the case that
used to leave the auditor reading stale offsets. Outcomes are checked exactly: record
counts, exit codes, the auditor's figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memq.devstack import StackState
from memq.devstack.procs import wait_for
from tests.integration.helpers import external_stack_env

pytestmark = pytest.mark.slow  # 20 s or more: run first, not in `make check`


def test_readme_flows_on_a_fresh_stack_and_after_down_up(
    memq_stack: StackState, tmp_path: Path, unique_name: Any
) -> None:
    state = tmp_path / "state"
    bucket = unique_name("b")[:63].rstrip("-")
    env = external_stack_env(memq_stack, MEMQ_STATE_DIR=str(state), MEMQ_S3_BUCKET=bucket)
    env.pop("MEMQ_KAFKA_BOOTSTRAP")  # its own in-memory Kafka: down/up gives a new one
    env.pop("MEMQ_BOOTSTRAP", None)

    def memq(*args: str, stdin: str | None = None, rc: int | None = 0) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "memq.cli.main", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            cwd=tmp_path,
            check=False,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        if rc is not None:
            assert proc.returncode == rc, (
                f"memq {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def lines_of(proc: Any) -> list[str]:
        return [x for x in proc.stdout.splitlines() if x]

    def audited(topic: str, group: str, n: int) -> dict[str, Any]:
        """The auditor's report once it matched ``n`` produced and consumed records."""

        def report() -> dict[str, Any] | None:
            proc = memq("audit", "report", "--topic", topic, "--group", group, "--json", rc=None)
            doc = json.loads(proc.stdout)
            t = doc["topics"][0] if doc["topics"] else None
            g = t["groups"][0] if t and t["groups"] else None
            if proc.returncode == 0 and g and t["produced_records"] == n == g["consumed_records"]:
                return dict(g)
            return None

        return wait_for(report, timeout=60, interval=1.0, what=f"audit of {topic}: {n} records")

    try:
        t0 = time.monotonic()
        # --- Quickstart / local stack ---------------------------------------------------
        memq("dev", "up")
        assert memq("dev", "status").stdout.count("healthy") == 3 + 2  # servers, broker, auditor
        out = memq("produce", "--topic", "t", "--count", "1000", "--size", "1024").stderr
        assert "1,000" in out and "errors" in out
        first = next(x for x in out.splitlines() if x.startswith("first object: "))
        key_uri = first.removeprefix("first object: ")
        assert key_uri.startswith(f"s3://{bucket}/") and "/dev/topics/t/" in key_uri
        lines = "".join(f"{i}\n" for i in range(1, 1001))
        memq("produce", "--topic", "lines", stdin=lines)

        # --- Consuming --------------------------------------------------------------------
        got = memq(
            "consume", "--topic", "lines", "--group", "g", "--from-beginning", "--format",
            "json", "--timeout", "3",
        )  # fmt: skip
        values = [json.loads(x)["value"] for x in lines_of(got)]
        assert sorted(values, key=int) == [str(i) for i in range(1, 1001)]  # exactly once each
        since = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
        got = memq("consume", "--topic", "t", "--from-time", since, "--max", "100", "--no-commit")
        assert len(lines_of(got)) == 100 and "no (--no-commit)" in got.stderr
        peek = memq("peek", "--topic", "t", "--last", "3").stdout
        assert key_uri.rsplit("/", 1)[1] in peek
        cat = memq("cat", key_uri, "--records", "5")
        assert len(lines_of(cat)) == 5 and "topic t (cluster dev)" in cat.stderr

        # --- Running a cluster: topic admin works on the one dev broker -------------------
        memq("topic", "create", "orders", "--expected-mbps", "50", "--partitions", "16",
             "--set", "batch.ms=500")  # fmt: skip
        assert "orders" in memq("topic", "list").stdout
        described = json.loads(memq("topic", "describe", "orders", "--json").stdout)
        assert described["settings"]["batch"]["ms"] == 500
        assert described["notification"]["partitions"] == 16
        memq("topic", "update", "orders", "--set", "min_writers=3")
        memq("topic", "delete", "orders", "--yes")
        assert "orders" not in memq("topic", "list").stdout
        assert "governor broker-1" in memq("cluster", "status").stdout
        reshape = memq("dev", "up", "--brokers", "3", rc=1)
        assert "already running with 1 broker (asked for --brokers 3)" in reshape.stderr
        assert "memq dev down" in reshape.stderr

        # --- Backfill: the dev stack's cluster, and no silent empty output ----------------
        bf = memq("backfill", "--topic", "lines", "--out", str(tmp_path / "bf"), "--format", "json")
        assert " 1,000 " in bf.stdout
        rows = [json.loads(x) for p in (tmp_path / "bf").rglob("*.json") for x in p.open()]
        assert sorted(int(r["value"]) for r in rows) == list(range(1, 1001))
        empty = memq("backfill", "--topic", "nosuch", "--out", str(tmp_path / "bf2"), rc=1)
        assert "no objects of topic 'nosuch' (cluster 'dev')" in empty.stderr
        assert f"s3://{bucket}/" in empty.stderr and "--allow-empty" in empty.stderr

        # --- Auditing -----------------------------------------------------------------
        g = audited("lines", "g", 1000)
        assert (g["missing_records"], g["duplicate_blocks"], g["mismatches"]) == (0, 0, 0)
        first_round = time.monotonic() - t0

        # --- dev down / dev up in the same state dir: a new, empty Kafka ------------------
        memq("dev", "down")
        up = memq("dev", "up")
        assert "new audit database" in up.stderr
        memq("produce", "--topic", "lines", stdin="".join(f"{i}\n" for i in range(1, 501)))
        got = memq("consume", "--topic", "lines", "--group", "g", "--from-beginning",
                   "--timeout", "3")  # fmt: skip
        assert sorted(lines_of(got), key=int) == [str(i) for i in range(1, 501)]
        g = audited("lines", "g", 500)  # the new stack's figures, complete
        assert (g["missing_records"], g["duplicate_blocks"], g["mismatches"]) == (0, 0, 0)
        demo = memq("demo", "--records", "2000", "--no-backfill")
        assert "DEMO OK" in demo.stdout
        assert first_round < 150 and time.monotonic() - t0 < 200
    finally:
        memq("dev", "down", rc=None)
