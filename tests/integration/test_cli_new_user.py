"""The CLI's everyday paths against the session's local stack give the right answer fast,
with one-line errors (issue 16, items 6, 10 and the CLI side of 4 and 11)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from memq.devstack import StackState
from tests.integration.helpers import read_objects

MiB = 1 << 20


def memq(
    stack: StackState, *args: str, stdin: bytes | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "memq.cli.main", *args],
        input=stdin,
        capture_output=True,
        timeout=180,
        env={**os.environ, "MEMQ_STATE_DIR": stack.state_dir, **env},
        check=False,
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
    )  # fmt: skip


def test_an_oversized_line_is_one_error_and_the_others_are_sent(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic = unique_name("lines")
    assert memq(memq_stack, "produce", "--topic", topic, stdin=b"first\n").returncode == 0
    big = b"x" * (2 * MiB)  # above the old 1 MiB default, within the topic's 8 MiB blocks
    huge = b"y" * (9 * MiB)  # above the topic's limit
    proc = memq(
        memq_stack, "produce", "--topic", topic, stdin=b"a\n" + big + b"\n" + huge + b"\nb\n"
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "MessageTooLargeError: 1" in proc.stderr
    assert "record 3 (9,437,184 bytes)" in proc.stderr  # the first error, with its cause
    assert "8388608" in proc.stderr  # the limit it broke
    summary = " ".join(proc.stderr.replace("│", " ").split())
    assert "records 3 of 4" in summary, proc.stderr  # (it said 4 beside the error)
    objs = read_objects(memq_stack.s3_client(), memq_stack.bucket, topic=topic)
    assert sorted(r[2] for o in objs for r in o.records) == sorted([b"first", b"a", big, b"b"])

    # A topic never written before: created by this first write with the topic defaults
    # (8 MiB blocks), so the 2 MB line fits although no metadata knew the topic yet.
    fresh = unique_name("fresh")
    proc = memq(memq_stack, "produce", "--topic", fresh, stdin=b"a\n" + big + b"\nb\n")
    assert proc.returncode == 0, proc.stderr
    assert "does not fit" not in proc.stderr
    got = memq(memq_stack, "consume", "--topic", fresh, "--max", "3", "--timeout", "30")
    assert got.returncode == 0, got.stderr
    assert sorted(got.stdout.encode().split(b"\n")[:3]) == sorted([b"a", big, b"b"])


def test_dead_brokers_are_named_at_once(memq_stack: StackState) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    t0 = time.monotonic()
    proc = memq(
        memq_stack, "produce", "--topic", "t", "--count", "10", "-b", f"127.0.0.1:{port}",
        "--timeout", "5",
    )  # fmt: skip
    assert proc.returncode == 1 and time.monotonic() - t0 < 10
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: no broker answered") and f"127.0.0.1:{port}" in line


def test_produce_summary_says_where_records_went(memq_stack: StackState, unique_name: Any) -> None:
    topic = unique_name("where")
    proc = memq(memq_stack, "produce", "--topic", topic, "--count", "20", "--size", "10")
    assert proc.returncode == 0, proc.stderr
    first = next(x for x in proc.stderr.splitlines() if x.startswith("first object: "))
    uri = first.removeprefix("first object: ")
    assert uri.startswith(f"s3://{memq_stack.bucket}/") and f"/dev/topics/{topic}/" in uri
    cat = memq(memq_stack, "cat", uri, "--records", "1")
    assert cat.returncode == 0 and f"topic {topic}" in cat.stderr


def test_peek_consume_and_cat_errors_are_one_line(memq_stack: StackState, unique_name: Any) -> None:
    topic = unique_name("nosuch")
    unknown = (
        f"error: unknown topic {topic!r} on cluster 'dev' (memq topic list shows its topics; "
        "memq topic create makes one)"
    )
    proc = memq(memq_stack, "peek", "--topic", topic)
    assert proc.returncode == 1 and proc.stderr.strip() == unknown
    proc = memq(memq_stack, "consume", "--topic", topic, "--max", "1", "--timeout", "5")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == unknown, proc.stderr
    t0 = time.monotonic()
    proc = memq(memq_stack, "cat", f"s3://{memq_stack.bucket}/")
    assert (
        proc.returncode == 2 and "names a bucket" in proc.stderr and "retrying" not in proc.stderr
    )
    assert time.monotonic() - t0 < 10


def test_topic_describe_shows_set_settings_and_delete_answers_no(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic = unique_name("orders")
    proc = memq(memq_stack, "topic", "create", topic, "--partitions", "4", "--set", "batch.ms=500")
    assert proc.returncode == 0, proc.stderr  # the dev stack's broker is clustered
    assert f"topic {topic} ready: writers broker-" in proc.stderr  # once the governor placed it
    # A topic no broker can take is said at once, not "ready" (it was).
    huge = unique_name("huge")
    proc = memq(memq_stack, "topic", "create", huge, "--expected-mbps", "100000")
    assert proc.returncode == 1 and "no broker can write it" in proc.stderr, proc.stderr
    assert "the cluster cannot place 100000 MB/s" in proc.stderr and "ready" not in proc.stderr
    assert f"topic {huge} not created" in proc.stderr  # (nothing left behind to delete)
    assert huge not in memq(memq_stack, "topic", "list", "--json").stdout
    # A valid topic name whose notification topic name Kafka would refuse (> 249).
    proc = memq(memq_stack, "topic", "create", "n" * 240)
    assert proc.returncode == 1 and "over Kafka's 249" in proc.stderr, proc.stderr
    doc = json.loads(memq(memq_stack, "topic", "describe", topic, "--json").stdout)
    assert doc["settings"]["batch"]["ms"] == 500
    assert "secret_access_key" not in json.dumps(doc)
    table = memq(memq_stack, "topic", "describe", topic).stdout
    rows = [[c.strip() for c in line.split("│")[1:3]] for line in table.splitlines()]
    assert ["batch.ms", "500"] in rows
    for verb in ("update", "create"):  # (name= was accepted and silently ignored)
        proc = memq(memq_stack, "topic", verb, topic if verb == "update" else topic + "-2",
                    "--set", "name=renamed")  # fmt: skip
        assert proc.returncode == 1 and "a topic cannot be renamed" in proc.stderr, proc.stderr
    proc = memq(memq_stack, "topic", "delete", topic, stdin=b"n\n")
    assert proc.returncode == 1 and f"topic {topic} not deleted" in proc.stderr
    assert topic in memq(memq_stack, "topic", "list").stdout
    assert memq(memq_stack, "topic", "delete", topic, "--yes").returncode == 0


@pytest.mark.parametrize("explicit", [False, True], ids=["implicit-brokers", "explicit-brokers"])
def test_consume_on_the_local_stack_joins_fast_and_says_so(
    memq_stack: StackState, unique_name: Any, explicit: bool
) -> None:
    topic = unique_name("join")
    assert memq(memq_stack, "produce", "--topic", topic, "--count", "10").returncode == 0
    brokers = ("-b", _stack_brokers(memq_stack)) if explicit else ()
    t0 = time.monotonic()
    # No -X: the consumer takes the short session settings on the local stack, whether
    # its brokers are named (-b) or found through the state dir.
    # FORCE_COLOR makes stderr a terminal for rich: the "joining group" status shows.
    proc = memq(
        memq_stack, "consume", "--topic", topic, "--group", "memq-cli", "--from-beginning",
        "--max", "10", *brokers, FORCE_COLOR="1",
    )  # fmt: skip
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 10
    assert "joining group 'memq-cli' for topic" in proc.stderr
    assert took < 18, f"consume took {took:.1f} s: the group join used the 45 s session"


def test_consume_into_a_closed_pipe_stops_and_commits_nothing(
    memq_stack: StackState, unique_name: Any, tmp_path: Any
) -> None:
    """`memq consume -g G | head -2`: head leaves, the next write fails; what was written
    into the pipe was never read, so the group's offsets must not move past it (they
    were committed, and a traceback-less exit 1 said nothing)."""
    from memq.consumer.groups import GroupAdmin
    from memq.errors import InvalidRequestError

    topic = unique_name("pipe")
    proc = memq(memq_stack, "produce", "--topic", topic, "--count", "20000", "--size", "20")
    assert proc.returncode == 0, proc.stderr
    values = [r[2] for o in read_objects(memq_stack.s3_client(), memq_stack.bucket, topic=topic)
              for r in o.records]  # fmt: skip
    # Generated records differ (one value repeated 20,000 times compressed ~500x).
    assert len(values) == len(set(values)) == 20000 and {len(v) for v in values} == {20}
    group = f"{topic}-g"
    cmd = f"{sys.executable} -m memq.cli.main consume -t {topic} -g {group} --max 20000"
    proc = subprocess.run(
        ["bash", "-c", f"{cmd} 2>err.txt | head -2; echo rc=${{PIPESTATUS[0]}}"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
        env={**os.environ, "MEMQ_STATE_DIR": memq_stack.state_dir}, check=False,
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    errors = (tmp_path / "err.txt").read_text()
    assert len(lines) == 3 and lines[2] == "rc=141", (proc.stdout, errors)
    assert "output was closed" in " ".join(errors.replace("│", " ").split()), errors
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors
    admin = GroupAdmin(memq_stack.extra["brokers"][0]["endpoint"])
    with pytest.raises(InvalidRequestError, match="no committed offsets"):
        admin.describe(group, topic)


def test_consume_max_inside_an_object_prints_its_summary_not_a_log_line(
    memq_stack: StackState, unique_name: Any
) -> None:
    topic = unique_name("maxlog")
    proc = memq(memq_stack, "produce", "--topic", topic, "--count", "300", "--size", "10")
    assert proc.returncode == 0, proc.stderr
    group = f"{topic}-g"
    proc = memq(memq_stack, "consume", "-t", topic, "-g", group, "--max", "10")
    assert proc.returncode == 0, proc.stderr
    summary = " ".join(proc.stderr.replace("│", " ").split())
    # The summary says where the commit is, and no log line is printed raw beside it.
    assert "yes, to the last record printed" in summary, proc.stderr
    assert "WARNING" not in proc.stderr and "memq.consumer" not in proc.stderr, proc.stderr


def _stack_brokers(stack: StackState) -> str:
    return ",".join(b["endpoint"] for b in stack.extra["brokers"])


def test_a_consumer_given_the_stacks_brokers_gets_the_short_group_session(
    memq_stack: StackState, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A consumer killed on a developer's machine (or stopped without close()) holds up
    # its group's next join for a session: 45 s with Kafka's default (classic protocol).
    from memq import Consumer
    from memq.consumer.membership import notification_consumer_conf

    monkeypatch.setenv("MEMQ_STATE_DIR", memq_stack.state_dir)
    monkeypatch.delenv("MEMQ_BOOTSTRAP", raising=False)

    def group_session(brokers: str, **conf: Any) -> tuple[int, int] | None:
        c = Consumer({"bootstrap.servers": brokers, "group.id": "g", **conf})
        try:
            kafka = notification_consumer_conf(c.config, memq_stack.kafka_bootstrap)
            if "session.timeout.ms" not in kafka:
                return None
            return kafka["session.timeout.ms"], kafka["heartbeat.interval.ms"]
        finally:
            c.close()

    stack = _stack_brokers(memq_stack)
    assert group_session(stack) == (6000, 1000)
    # What the user sets is kept; the other one stays consistent with it.
    assert group_session(stack, **{"session.timeout.ms": 20_000}) == (20_000, 1000)
    assert group_session(stack, **{"session.timeout.ms": 1500}) == (1500, 500)
    assert group_session(stack, **{"heartbeat.interval.ms": 3000}) == (9000, 3000)
    # The consumer protocol's session is the broker's: nothing is sent.
    assert group_session(stack, **{"group.protocol": "consumer"}) is None
    # Brokers that are not the local stack's: Kafka's defaults.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        elsewhere = f"127.0.0.1:{s.getsockname()[1]}"
    assert group_session(elsewhere) == (45_000, 3000)


CONSUMER_WITH_BOOTSTRAP = textwrap.dedent(
    """
    import sys
    from memq import Consumer, Producer

    brokers, topic = sys.argv[1], sys.argv[2]
    with Producer({"bootstrap.servers": brokers, "linger.ms": 1}) as p:
        for i in range(50):
            p.produce(topic, b"v%d" % i)
        assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": brokers, "group.id": "explicit",
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 1000})
    c.subscribe(topic)
    got = []
    for _ in range(60):
        got += [m.value for m in c.consume(100, 1.0)]
        if len(got) >= 50:
            break
    c.close()
    print(len(got), len(set(got)))
    """
)


def test_explicit_bootstrap_gets_the_stacks_storage_settings(
    memq_stack: StackState, unique_name: Any
) -> None:
    # Given the stack's brokers explicitly, with no AWS variables at all: the profile's
    # storage settings (endpoint, throwaway credentials) must still reach the fetches.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MEMQ_"))}
    env["MEMQ_STATE_DIR"] = memq_stack.state_dir
    brokers = ",".join(b["endpoint"] for b in memq_stack.extra["brokers"])
    proc = subprocess.run(
        [sys.executable, "-c", CONSUMER_WITH_BOOTSTRAP, brokers, unique_name("explicit")],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["50", "50"]


def test_backfill_of_an_empty_range_fails_before_spark(
    memq_stack: StackState, unique_name: Any, tmp_path: Any
) -> None:
    topic = unique_name("range")
    assert memq(memq_stack, "produce", "--topic", topic, "--count", "5").returncode == 0
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = memq(
        memq_stack, "backfill", "--topic", topic, "--out", str(out),
        "--from", "2020-01-01", "--to", "2020-01-02",
    )  # fmt: skip
    assert proc.returncode == 1 and time.monotonic() - t0 < 15  # no Spark was started
    (line,) = proc.stderr.strip().splitlines()
    assert f"no objects of topic {topic!r} (cluster 'dev')" in line
    assert "from 2020-01-01T00:00:00.000Z to 2020-01-02T00:00:00.000Z" in line
    assert f"s3://{memq_stack.bucket}/" in line and f"/dev/topics/{topic}/" in line
    assert "--allow-empty" in line and not out.exists()
