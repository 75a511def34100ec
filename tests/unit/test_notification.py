from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import given

from memq.errors import ChecksumError, MalformedError, UnsupportedVersionError
from memq.formats import decode_notification, encode_notification
from memq.formats.crcjson import canonical as _canonical
from tests.unit.corruption import every_bit_flip, every_truncation, random_flips
from tests.unit.strategies import notifications


@given(notifications)
def test_round_trip(n):
    data = encode_notification(n)
    assert decode_notification(data) == n
    assert decode_notification(data.decode()) == n


@given(notifications)
def test_is_plain_json_readable_by_any_tool(n):
    obj = json.loads(encode_notification(n))
    assert obj["key"] == n.key and obj["record_count"] == n.record_count


def _sample() -> bytes:
    from pathlib import Path

    return (Path(__file__).parent.parent / "vectors" / "notification.json").read_bytes()


def test_every_truncation_and_bit_flip_is_rejected():
    data = _sample()
    every_truncation(decode_notification, data)
    every_bit_flip(decode_notification, data)
    random_flips(decode_notification, data, seed=5)


def _resealed(obj: dict) -> bytes:
    obj = {k: v for k, v in obj.items() if k != "crc"}
    obj["crc"] = zlib.crc32(_canonical(obj))
    return _canonical(obj)


def test_unknown_fields_are_ignored_but_versions_are_checked():
    obj = json.loads(_sample())
    obj["future_field"] = [1, 2]
    assert decode_notification(_resealed(obj)).topic == "events"
    obj["format_version"] = 2
    with pytest.raises(UnsupportedVersionError):
        decode_notification(_resealed(obj))


@pytest.mark.parametrize(
    ("field", "value"),
    [("size", "12"), ("size", 0), ("record_count", True), ("topic", "bad/topic"), ("checksum", -1)],
)
def test_field_validation(field, value):
    obj = json.loads(_sample())
    obj[field] = value
    with pytest.raises(MalformedError, match=field):
        decode_notification(_resealed(obj))


def test_errors():
    with pytest.raises(MalformedError):
        decode_notification(b"[1,2]")
    with pytest.raises(MalformedError):
        decode_notification(b"x" * 70000)
    obj = json.loads(_sample())
    obj["size"] += 1
    with pytest.raises(ChecksumError):
        decode_notification(_canonical(obj))


@pytest.mark.parametrize(
    "doc",
    [
        b'{"a":"\\ud9cb","crc":1}',  # an escaped lone surrogate
        b'{"a":"\xed\xa7\x8b","crc":1}',  # one as raw bytes (json.loads lets it pass)
        b'{"for\xed\xa7\x8b_version":6,"crc":1}',  # in a field name (found by fuzzing)
    ],
)
def test_a_lone_surrogate_is_a_typed_error(doc):
    with pytest.raises(MalformedError, match="not valid Unicode"):
        decode_notification(doc)
    # ...also with a CRC that matches (computed as if surrogates were encodable).
    obj = json.loads(doc)
    obj.pop("crc")
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    obj["crc"] = zlib.crc32(text.encode("utf-8", "surrogatepass"))
    sealed = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(MalformedError, match="not valid Unicode"):
        decode_notification(sealed.encode("utf-8", "surrogatepass"))
