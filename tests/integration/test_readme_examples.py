"""The README's Python examples run as written against the local stack (issue 16, item 7).

Each ```python block of README.md is executed in a fresh interpreter whose only way to the
stack is the documented one: ``MEMQ_STATE_DIR`` (no ``bootstrap.servers``, no AWS
variables). The Consumer example loops forever, as a Kafka consumer does: its ``handle``
is supplied here and ends the loop once the Producer example's records arrived.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from memq.devstack import StackState

ROOT = Path(__file__).parent.parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)

HARNESS = """
import json, sys

producer_example, consumer_example = json.loads(sys.stdin.read())
exec(compile(producer_example, "README.md (Producing from Python)", "exec"), {})

seen = []

class Done(Exception):
    pass

def handle(value, key, headers, timestamp):
    hs = None if headers is None else {k: v.decode() for k, v in dict(headers).items()}
    seen.append([value.decode(), key and key.decode(), hs])
    if {"payload", "more"} <= {s[0] for s in seen}:
        raise Done

ns = {"handle": handle}
try:
    exec(compile(consumer_example, "README.md (Consuming)", "exec"), ns)
except Done:
    ns["consumer"].close()
print(json.dumps(seen))
"""


def test_readme_has_a_producer_and_a_consumer_example() -> None:
    assert len(BLOCKS) >= 2
    assert "Producer(" in BLOCKS[0] and "Consumer(" in BLOCKS[1]
    # The examples use the local stack: no made-up broker address to hang on.
    code = [line.split("#")[0] for line in (BLOCKS[0] + BLOCKS[1]).splitlines()]
    assert not [line for line in code if "bootstrap.servers" in line]


def test_producer_and_consumer_examples_run_as_written(memq_stack: StackState) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MEMQ_"))}
    env["MEMQ_STATE_DIR"] = memq_stack.state_dir
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS],
        input=json.dumps(BLOCKS[:2]),
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert ["payload", "user-42", {"trace": "abc"}] in seen
    assert ["more", None, None] in seen


SPARK_DOC = (ROOT / "docs" / "spark.md").read_text()
SPARK_LOCAL = next(
    b for b in re.findall(r"```python\n(.*?)```", SPARK_DOC, re.S) if "local_stack_options" in b
)


def test_spark_local_stack_example_runs_as_written(memq_stack: StackState) -> None:
    """docs/spark.md's local-stack example counts every record of a topic, with nothing
    but MEMQ_STATE_DIR to find the stack (no AWS variables, no endpoint)."""
    from memq import Producer

    topic = f"spark-local-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MEMQ_", "PYSPARK_"))}
    env["MEMQ_STATE_DIR"] = memq_stack.state_dir
    os.environ["MEMQ_STATE_DIR"] = memq_stack.state_dir
    try:
        with Producer({"acks": "all"}) as p:
            p.produce_batch(topic, [b"r%d" % i for i in range(1234)]).result(60)
    finally:
        del os.environ["MEMQ_STATE_DIR"]
    assert '"topic", "events"' in SPARK_LOCAL
    proc = subprocess.run(
        [sys.executable, "-c", SPARK_LOCAL.replace('"topic", "events"', f'"topic", "{topic}"')],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "1234"
