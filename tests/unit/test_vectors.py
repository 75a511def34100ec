"""Golden vectors: today's code must decode (and, where deterministic, encode) fixed bytes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from memq.formats import (
    Compression,
    Notification,
    Request,
    Response,
    batch_id,
    decode_batch,
    decode_block,
    decode_frame,
    decode_notification,
    encode_batch,
    encode_block,
    encode_notification,
    encode_request,
    encode_response,
    object_key,
)

VEC = Path(__file__).parent.parent / "vectors"
MANIFEST = json.loads((VEC / "manifest.json").read_text())


def _b(s):
    return None if s is None else base64.b64decode(s)


RECORDS = [
    (ts, _b(k), _b(v), None if h is None else tuple((n, _b(x)) for n, x in h))
    for ts, k, v, h in MANIFEST["records"]
]


@pytest.mark.parametrize("name", sorted(MANIFEST["blocks"]))
def test_block_vectors_decode(name):
    meta = MANIFEST["blocks"][name]
    header, records = decode_block((VEC / name).read_bytes())
    assert records == RECORDS
    assert header.compression.name.lower() == meta["compression"]
    assert header.version == meta["version"]
    for f in ("producer_id", "epoch", "sequence", "record_count", "min_timestamp", "max_timestamp"):
        assert getattr(header, f) == meta[f]


@pytest.mark.parametrize(
    ("version", "codec", "name"),
    [
        (1, Compression.NONE, "block_none.bin"),
        (1, Compression.LZ4, "block_lz4.bin"),
        (2, Compression.NONE, "block2_none.bin"),
        (2, Compression.LZ4, "block2_lz4.bin"),
        (2, Compression.ZSTD, "block2_zstd.bin"),
    ],
)
def test_blocks_encode_byte_exact(version, codec, name):
    data = encode_block(
        RECORDS, producer_id=0x0123456789ABCDEF, epoch=7, sequence=42, compression=codec,
        version=version,
    )  # fmt: skip
    assert data == (VEC / name).read_bytes()


def test_batch_vector():
    data = (VEC / "batch.bin").read_bytes()
    _header, blocks = decode_batch(data)
    assert [(h.producer_id, h.epoch, h.sequence, h.record_count) for h, _ in blocks] == [
        tuple(b) for b in MANIFEST["batch"]["blocks"]
    ]
    assert [r for _, recs in blocks for r in recs] == RECORDS
    again = encode_batch(
        [
            encode_block(
                RECORDS[:2],
                producer_id=1,
                epoch=0,
                sequence=0,
                compression=Compression.NONE,
                version=1,
            ),
            encode_block(
                RECORDS[2:],
                producer_id=2,
                epoch=3,
                sequence=9,
                compression=Compression.NONE,
                version=1,
            ),
        ]
    )
    assert again == data


def test_frame_vectors():
    req = (VEC / "frame_request.bin").read_bytes()
    meta = MANIFEST["frames"]["frame_request.bin"]
    assert decode_frame(req) == Request(meta["type"], meta["request_id"], _b(meta["body"]))
    assert encode_request(meta["type"], meta["request_id"], _b(meta["body"])) == req
    resp = (VEC / "frame_response.bin").read_bytes()
    meta = MANIFEST["frames"]["frame_response.bin"]
    expected = Response(meta["type"], meta["request_id"], meta["status"], meta["error"], b"")
    assert decode_frame(resp) == expected
    assert encode_response(meta["type"], meta["request_id"], meta["status"], meta["error"]) == resp


def test_notification_vector():
    data = (VEC / "notification.json").read_bytes()
    n = Notification(**MANIFEST["notification"])
    assert decode_notification(data) == n
    assert encode_notification(n) == data
    header, _ = decode_batch((VEC / "batch.bin").read_bytes())
    assert n.checksum == header.crc and n.size == header.object_size


@pytest.mark.parametrize("case", MANIFEST["keys"], ids=lambda c: c["key"])
def test_key_vectors(case):
    bid = batch_id(case["created_ms"], case["broker"], case["sequence"])
    key = object_key(
        case["cluster"], case["topic"], bid, case["created_ms"], use_hash_prefix=case["hash"]
    )
    assert key == case["key"]
