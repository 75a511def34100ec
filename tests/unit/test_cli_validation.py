"""Bad option values are one-line usage errors before anything runs (issue 16, items 5, 8
and 10); the config errors behind --acks say their value once."""

from __future__ import annotations

import sys

import pytest

from memq.cli.main import main

CONSUMER_PROTOCOL = ["-X", "group.protocol=consumer", "-X", "session.timeout.ms=6000"]
CASES = [
    (["produce", "--topic", "t", "--count", "5", "--size", "-1"], "'--size'"),
    (["produce", "--topic", "t", "--count", "-5"], "'--count'"),
    (["produce", "--topic", "t", "--count", "0"], "'--count'"),
    (["produce", "--topic", "t", "--count", "5", "--acks", "2"], "'2' is not one of 0, 1, all, -1"),
    (["produce", "--topic", "t", "--count", "5", "--rate", "-1"], "'--rate'"),
    (["produce", "--topic", "", "--count", "1"], "invalid topic name ''"),
    (["produce", "--topic", "bad name", "--count", "1"], "1-249 characters"),
    (["produce", "--topic", "t/x", "--count", "1"], "1-249 characters"),
    (["produce", "--topic", "x" * 300, "--count", "1"], "1-249 characters"),
    (["produce", "--topic", "t", "--compression", "foo"], "unknown compression 'foo'"),
    (["produce", "--topic", "t", "--batch-size", "10"], "'--batch-size'"),
    # (an "unknown key", though MemQ is always idempotent)
    (
        ["produce", "--topic", "t", "--count", "1", "-X", "enable.idempotence=false"],
        "always idempotent",
    ),
    (["consume", "--topic", "lines", "--from-time", "-5"], "before 1970"),
    (["consume", "--topic", "t", "--from-time", "yesterday"], "is not ISO-8601"),
    # epoch seconds (or an ISO basic date) were read as ms: silently January 1970
    (["consume", "--topic", "t", "--from-time", "1795576922"], "is ambiguous"),
    (["backfill", "--topic", "t", "--out", "x", "--from", "20261125"], "is ambiguous"),
    (["backfill", "--topic", "t", "--out", "x", "--to", "soon"], "is not ISO-8601"),
    # (a Spark traceback after its start, or exit 1)
    (["backfill", "--topic", "t", "--out", "x", "--compression", "bogus"], "is not available"),
    (["backfill", "--topic", "t", "--out", "x", "-f", "json", "--compression", "zstd"], "gzip"),
    (["backfill", "--topic", "t", "--out", "x", "--format", "csv"], "use parquet or json"),
    (["backfill", "--topic", "t", "--out", "x", "--on-corrupt", "maybe"], "use fail or skip"),
    # (a ZeroDivisionError traceback, "$nan/day" with exit 0, an OverflowError, exit 1)
    (["cost", "--ingest-mbps", "inf"], "must be a finite number"),
    (["cost", "--retention-days", "nan"], "must be a finite number"),
    (["cost", "--price", "s3_put_per_1k=nan"], "a finite number >= 0"),
    (["cost", "--writers", "0"], "writers >= 1"),
    (["token", "create", "--principal", "a", "--ttl", "inf"], "'--ttl'"),
    (["bench", "--quick", "--only", ""], "name sections of"),
    (["acl", "add", "-p", "a", "-t", "x", "--op", "read"], "'read' is not an operation"),
    (["audit", "report", "--topic", "t", "--grace", "-5s"], "is not a duration"),
    (["consume", "--topic", "t", "--max", "-1"], "'--max'"),
    (["consume", "--topic", "t", "--timeout", "-1"], "'--timeout'"),
    (["consume", "--topic", "t", "--group", ""], "'--group'"),
    # (librdkafka refuses the consumer: the broker sets them under this protocol)
    (["consume", "-t", "t", *CONSUMER_PROTOCOL], "session.timeout.ms conflicts with group.pro"),
    (["consume", "-t", "t", "-X", "group.protocol=eager"], "'classic' or 'consumer'"),
    (["peek", "--topic", "t", "--last", "-2"], "'--last'"),
    (["cat", "s3://memq-dev/"], "names a bucket, not an object"),
    (["cat", "some-file", "--records", "-1"], "'--records'"),
    (["topic", "create", "bad name"], "1-249 characters"),
    (["topic", "create", "t", "--partitions", "0"], "'--partitions'"),
    (["topic", "create", "t", "--expected-mbps", "-3"], "'--expected-mbps'"),
    (["audit", "report", "--topic", "t", "--limit", "-1"], "'--limit'"),
    # (urllib raised "unknown url type" as a traceback; host:port alone read as unreachable)
    (["audit", "report", "--topic", "t", "--url", "notaurl"], "use http(s)://host:port"),
    (["audit", "report", "--topic", "t", "--url", "127.0.0.1:8080"], "is not a URL"),
    # (an empty or future window, or a unitless number, reported zeros with exit 0)
    (["audit", "report", "--topic", "t", "--since", "0"], "'0' is ambiguous"),
    (["audit", "report", "--topic", "t", "--since", "3600"], "e.g. 3600s, 10m"),
    (["audit", "report", "--topic", "t", "--since", "0s"], "empty window"),
    (["audit", "report", "--topic", "t", "--since", "2099-01-01"], "is not in the past"),
    (["cat", "s3://b/k", "--endpoint-url", "foo"], "use http(s)://host:port"),
    (["dev", "up", "--s3-port", "70000"], "'--s3-port'"),
    # (--kafka-port pinned the notification Kafka, not the port Kafka producers write to)
    (
        ["dev", "up", "--kafka-port", "19092", "--notification-kafka-port", "19093"],
        "--kafka-port is the old name of --notification-kafka-port: give one of them",
    ),
    (
        ["dev", "up", "--kafka-listener-port", "65535", "--brokers", "2"],
        "65535 with 2 brokers needs ports up to 65536",
    ),
    (["dev", "up", "--kafka-listener-port", "0"], "'--kafka-listener-port'"),
    (["token", "create", "--principal", ""], "'--principal'"),
    # (what the user typed is printed as typed: square brackets are not Rich markup)
    (["topic", "describe", "a[/b]"], "invalid topic name 'a[/b]'"),
    (["produce", "--topic", "a[red]b", "--count", "1"], "invalid topic name 'a[red]b'"),
]


def run(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["memq", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    code = exc.value.code
    return int(code) if isinstance(code, int) else 1, capsys.readouterr().err


@pytest.mark.parametrize(("args", "says"), CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_values_are_one_line_usage_errors(
    args: list[str], says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: object,
) -> None:  # fmt: skip
    monkeypatch.setenv("MEMQ_STATE_DIR", str(tmp_path))  # no stack: nothing may be reached
    code, err = run(args, monkeypatch, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("usage error: "), err
    assert says in lines[0] and f"memq {args[0]}" in lines[0]


def test_short_token_secret(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("MEMQ_AUTH_TOKEN_SECRET", "x")
    code, err = run(["token", "create", "--principal", "a"], monkeypatch, capsys)
    assert (
        code == 2 and "has 1 bytes: use at least 16" in err and len(err.strip().splitlines()) == 1
    )
    monkeypatch.setenv("MEMQ_AUTH_TOKEN_SECRET", "0123456789abcdef")
    code, _ = run(["token", "create", "--principal", "a"], monkeypatch, capsys)
    assert code == 0


def test_acks_error_names_the_value_once() -> None:
    from memq.errors import ConfigError
    from memq.producer import ProducerConfig

    with pytest.raises(ConfigError) as e:
        ProducerConfig.from_mapping({"acks": "foo"})
    assert str(e.value).count("'foo'") == 1 and "Value error" not in str(e.value)
    with pytest.raises(ConfigError, match="acks must be 0, 1 or all"):
        ProducerConfig.from_mapping({"acks": 2})  # Kafka rejects acks=2 too


def test_a_request_boto3_refuses_is_not_retried() -> None:
    from botocore.exceptions import ParamValidationError

    from memq.errors import StorageAccessError
    from memq.storage_handlers.s3 import classify_s3_error

    e = classify_s3_error(ParamValidationError(report="Invalid length for Key"), "GET s3://b/")
    assert isinstance(e, StorageAccessError) and not e.retriable
    assert "Invalid length for Key" in str(e)


def test_topic_settings_flatten_to_the_set_keys() -> None:
    from memq.cli.admin import flatten

    assert flatten({"batch": {"ms": 500, "bytes": 8}, "ring_size": 3}) == {
        "batch.ms": 500,
        "batch.bytes": 8,
        "ring_size": 3,
    }


def test_an_error_quoting_brackets_is_printed_as_typed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    """A MemqError's message is text, not Rich markup (a closing tag crashed the printer)."""
    monkeypatch.chdir(str(tmp_path))
    code, err = run(["cat", "nofile[/x]"], monkeypatch, capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nofile[/x]" in lines[0], err
