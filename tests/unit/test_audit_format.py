"""Audit records: round trip, every corruption rejected with a typed error, content CRCs."""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from memq.errors import ChecksumError, MalformedError, UnsupportedVersionError
from memq.formats import Compression
from memq.formats.audit import (
    MAX_AUDIT_RECORD_SIZE,
    AuditRecord,
    decode_audit,
    encode_audit,
)
from memq.formats.block import (
    decode_block_header,
    decode_columns_with_crc,
    encode_block,
    encode_block_with_crc,
)
from memq.formats.crcjson import canonical as _canonical
from memq.formats.crcjson import decode_crc_json, field_error
from tests.unit.corruption import every_bit_flip, every_truncation, random_flips

PRODUCED = {
    "kind": "produced",
    "topic": "events",
    "producer_id": (1 << 64) - 1,
    "epoch": 3,
    "sequence": 42,
    "records": 1000,
    "content_crc": 305419896,
    "min_timestamp": 1763790000000,
    "time": 1763790001002,
    "client": "memq-producer",
    "acks": "all",
    "bucket": "memq-dev",
    "key": "3f/dev/topics/events/dt=2026-11-22/hh=05/1763790000950-00000042-b1",
    "block_index": 0,
}
CONSUMED = {
    **PRODUCED,
    "kind": "consumed",
    "acks": None,
    "group": "billing",
    "client": "memq-consumer",
}
DROPPED = {
    **CONSUMED,
    "kind": "dropped",
    "key": "46/dev/topics/events/dt=2026-11-22/hh=05/1763790001210-00000007-b2",
    "block_index": 3,
}
FORMATS_MD = Path(__file__).parent.parent.parent / "docs" / "formats.md"


@pytest.mark.parametrize(
    "fields", [PRODUCED, CONSUMED, DROPPED], ids=["produced", "consumed", "dropped"]
)
def test_round_trip(fields):
    rec = decode_audit(encode_audit(fields))
    assert isinstance(rec, AuditRecord) and rec.format_version == 1
    for k, v in fields.items():
        assert getattr(rec, k) == v
    assert decode_audit(encode_audit(fields).decode()) == rec


@given(
    pid=st.integers(0, (1 << 64) - 1),
    seq=st.integers(0, (1 << 64) - 1),
    records=st.integers(0, 0xFFFFFFFF),
    crc=st.integers(0, 0xFFFFFFFF),
    topic=st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True),
)
def test_round_trip_any_identity(pid, seq, records, crc, topic):
    fields = {**PRODUCED, "producer_id": pid, "sequence": seq, "records": records,
              "content_crc": crc, "topic": topic}  # fmt: skip
    rec = decode_audit(encode_audit(fields))
    assert (rec.topic, rec.producer_id, rec.sequence, rec.records, rec.content_crc) == (
        topic, pid, seq, records, crc,
    )  # fmt: skip


def test_plain_json_for_kcat():
    obj = json.loads(encode_audit(CONSUMED))
    assert obj["kind"] == "consumed" and obj["group"] == "billing" and "crc" in obj


def test_every_truncation_and_bit_flip_is_rejected():
    data = encode_audit(PRODUCED)
    every_truncation(decode_audit, data)
    every_bit_flip(decode_audit, data)
    random_flips(decode_audit, data, seed=7)


def _resealed(obj: dict) -> bytes:
    obj = {k: v for k, v in obj.items() if k != "crc"}
    obj["crc"] = zlib.crc32(_canonical(obj))
    return _canonical(obj)


def test_unknown_fields_ignored_versions_checked():
    obj = json.loads(encode_audit(PRODUCED))
    obj["future"] = {"x": 1}
    assert decode_audit(_resealed(obj)).sequence == 42
    obj["format_version"] = 2
    with pytest.raises(UnsupportedVersionError, match="upgrade the auditor"):
        decode_audit(_resealed(obj))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kind", "deleted"),
        ("producer_id", -1),
        ("producer_id", 1 << 64),
        ("epoch", 1 << 32),
        ("records", "12"),
        ("topic", "bad/topic"),
        ("acks", "2"),
        ("content_crc", True),
    ],
)
def test_bad_fields_name_the_field(field, value):
    obj = json.loads(encode_audit(PRODUCED))
    obj[field] = value
    with pytest.raises(MalformedError, match=field):
        decode_audit(_resealed(obj))


def test_wrong_crc_and_not_json_and_oversize():
    obj = json.loads(encode_audit(PRODUCED))
    obj["crc"] ^= 1
    with pytest.raises(ChecksumError):
        decode_audit(_canonical(obj))
    with pytest.raises(MalformedError, match="not JSON"):
        decode_audit(b"\xff{")
    with pytest.raises(MalformedError, match="JSON object"):
        decode_audit(b"[1]")
    with pytest.raises(MalformedError, match="exceeds"):
        decode_audit(b" " * (MAX_AUDIT_RECORD_SIZE + 1))


@pytest.mark.parametrize("codec", list(Compression))
def test_content_crc_is_the_same_on_both_sides_whatever_the_codec(codec):
    records = [
        (1_763_790_000_000 + i, None if i % 2 else b"k", b"v%d" % i, None) for i in range(50)
    ]
    args = {"producer_id": 7, "epoch": 0, "sequence": 1, "compression": codec}
    block, crc = encode_block_with_crc(records, **args)
    assert block == encode_block(records, **args)
    columns, read_crc = decode_columns_with_crc(block, decode_block_header(block))
    assert read_crc == crc
    assert list(zip(*columns, strict=True)) == records
    _other, crc2 = encode_block_with_crc(records[:-1], **args)
    assert crc2 != crc


def test_dropped_example_in_the_docs_decodes_and_is_what_a_writer_emits() -> None:
    m = re.search(
        r"<!-- audit dropped example -->\n```json\n(.*?)```", FORMATS_MD.read_text(), re.S
    )
    assert m is not None
    (line,) = m.group(1).splitlines()
    rec = decode_audit(line)
    assert (rec.kind, rec.group, rec.format_version) == ("dropped", "analytics", 1)
    assert rec.key is not None and rec.block_index is not None  # the dropped copy's object
    assert encode_audit(rec.model_dump(exclude_none=True, exclude={"format_version"})) == (
        line.encode()
    )


class _AuditorBeforeDropped(AuditRecord):
    """The record model of an auditor that predates ``dropped`` (same format_version)."""

    kind: Literal["produced", "consumed"]  # type: ignore[assignment]


def test_an_older_auditor_rejects_dropped_as_malformed_naming_the_kind() -> None:
    """What docs/formats.md promises: an older auditor counts it as undecodable."""
    obj = decode_crc_json(
        encode_audit(DROPPED), what="audit record", max_size=MAX_AUDIT_RECORD_SIZE, reader="auditor"
    )
    assert obj["format_version"] == 1  # not a version bump: only the kind is unknown
    with pytest.raises(ValidationError) as e:
        _AuditorBeforeDropped.model_validate(obj)
    err = field_error("audit record", e.value, "record")
    assert isinstance(err, MalformedError) and "kind" in str(err)
    assert _AuditorBeforeDropped.model_validate(json.loads(encode_audit(CONSUMED)))
