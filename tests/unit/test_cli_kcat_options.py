"""kcat-like options of `memq produce` / `memq consume`: bad combinations and values are
one-line usage errors before anything runs; the text-line codec round-trips any bytes."""

from __future__ import annotations

import sys

import pytest

from memq.cli.main import main
from memq.errors import MalformedError
from memq.jsonlines import decode_field, encode_field, record_line, split_line

P = ["produce", "--topic", "t"]
C = ["consume", "--topic", "t"]
CASES = [
    ([*P, "-X", "lingr.ms=5"], "lingr.ms: unknown key; did you mean 'linger.ms'?"),
    ([*P, "-X", "linger.ms=abc"], "linger.ms: Input should be a valid number"),
    ([*P, "-X", "acks=2"], "acks must be 0, 1 or all"),
    ([*P, "-X", "linger.ms"], "-X 'linger.ms': use KEY=VALUE"),
    ([*P, "-H", "trace"], "-H 'trace': use NAME=VALUE"),
    ([*P, "-H", "=v"], "-H '=v': use NAME=VALUE"),
    ([*P, "--key", "k", "--key-separator", ":"], "--key and --key-separator: give one"),
    ([*P, "--count", "3", "--key-separator", ":"], "not with --count"),
    ([*P, "--count", "3", "--value-format", "base64"], "not with --count"),
    ([*P, "--value-format", "hex"], "'hex' is not one of raw, base64"),
    ([*P, "--key-format", "base64"], "--key-format applies to --key or --key-separator"),
    ([*P, "--key", "not base64!", "--key-format", "base64"], "key 'not base64!' is not base64"),
    ([*P, "--key-separator", ""], "use a non-empty text without line breaks"),
    ([*P, "-K", "a\nb"], "use a non-empty text without line breaks"),
    ([*C, "-X", "sesion.timeout.ms=5"], "did you mean 'session.timeout.ms'?"),
    ([*C, "-X", "nope"], "-X 'nope': use KEY=VALUE"),
    ([*C, "--format", "json", "--value-format", "base64"], "json lines carry key, value"),
    ([*C, "--format", "json", "-K", ":"], "shape --format raw lines"),
    ([*C, "--key-format", "base64"], "--key-format applies with --key-separator"),
    ([*C, "--value-format", "b64"], "'b64' is not one of raw, base64"),
]


@pytest.mark.parametrize(("args", "says"), CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_kcat_options_are_one_line_usage_errors(
    args: list[str], says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: object,
) -> None:  # fmt: skip
    monkeypatch.setenv("MEMQ_STATE_DIR", str(tmp_path))  # no stack: nothing may be reached
    monkeypatch.setattr(sys, "argv", ["memq", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("usage error: "), err
    assert says in lines[0] and f"memq {args[0]}" in lines[0], lines[0]


ALL_BYTES = [bytes([i]) for i in range(256)] + [bytes(range(256)), b"", b"a\nb"]


@pytest.mark.parametrize("sep", [b":", b"\t", b" -> "])
def test_base64_lines_round_trip_every_byte(sep: bytes) -> None:
    for key in [*ALL_BYTES, None]:
        for value in ALL_BYTES:
            line = record_line(key, value, sep, key_format="base64", value_format="base64")
            assert line.count(b"\n") == 1 and line.endswith(b"\n")
            back = split_line(line[:-1], sep, key_format="base64", value_format="base64")
            assert back == (key or None, value)


def test_raw_lines_split_on_the_first_separator() -> None:
    assert split_line(b"k:v:w", b":") == (b"k", b"v:w")
    assert split_line(b"no key", b":") == (None, b"no key")
    assert split_line(b":v", b":") == (None, b"v")
    assert split_line(b"k:", b":") == (b"k", b"")
    assert split_line(b"k:v") == (None, b"k:v")  # no separator: the line is the value
    assert record_line(None, b"v") == b"v\n"
    assert record_line(None, b"v", b":") == b":v\n"
    assert record_line(b"k", b"v", b":") == b"k:v\n"


def test_base64_fields_are_strict() -> None:
    assert encode_field(None, "base64") == b""
    assert decode_field(b"AAE=", "base64") == b"\x00\x01"
    assert decode_field(b"not base64", "raw") == b"not base64"
    for bad in (b"AAE", b"A A E=", b"!!!!", b"AAE=\n"):
        with pytest.raises(MalformedError, match="is not base64"):
            decode_field(bad, "base64")


def test_json_lines_keep_repeated_header_names_and_any_timestamp() -> None:
    """Kafka allows a header name twice: both values are printed (the first was lost);
    a timestamp past year 9999 is printed as epoch ms (it was a traceback)."""
    import json

    from memq.jsonlines import record_json

    doc = json.loads(record_json("0:0:0:0", None, b"v", (("d", b"1"), ("d", b"\xff"), ("e", None)), 2**63 - 1))  # fmt: skip
    assert doc["headers"] == {"d": ["1", None], "e": None}
    assert doc["headers_b64"] == {"d": [None, "/w=="]}
    assert doc["timestamp"] == "9223372036854775807"
    doc = json.loads(record_json("0:0:0:1", b"k", b"v", (("a", b"x"),), 0))
    assert (doc["headers"], doc["headers_b64"]) == ({"a": "x"}, None)
    assert doc["timestamp"] == "1970-01-01T00:00:00.000Z"
