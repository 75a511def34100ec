"""Regenerate the golden vectors in this directory.

Run ``python tests/vectors/generate.py`` ONLY when a format version changes on
purpose; the tests compare today's encoders and decoders against these fixed bytes,
so an accidental format change fails them. ``manifest.json`` records what each
vector must decode to.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from memq.formats import (
    Compression,
    Notification,
    RequestType,
    batch_id,
    decode_batch_header,
    encode_batch,
    encode_block,
    encode_notification,
    encode_request,
    encode_response,
    object_key,
)

HERE = Path(__file__).parent

RECORDS: list[tuple[int, bytes | None, bytes, tuple[tuple[str, bytes | None], ...] | None]] = [
    (1763790000000, None, b"hello", None),
    (1763790000001, b"user-42", b'{"event":"click","x":1}', (("trace", b"abc123"),)),
    (1763790000005, b"", b"", (("a", None), ("a", b"\x00\xff"))),
    (1763790000003, b"\x00\x01\x02", bytes(range(256)), None),
]


def b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def records_json(records: list[Any]) -> list[Any]:
    return [
        [ts, b64(k), b64(v), None if h is None else [[n, b64(x)] for n, x in h]]
        for ts, k, v, h in records
    ]


def main() -> None:
    manifest: dict[str, Any] = {"records": records_json(RECORDS), "blocks": {}}
    for version, codec in [(v, c) for v in (1, 2) for c in Compression]:
        name = f"block{'' if version == 1 else version}_{codec.name.lower()}.bin"
        data = encode_block(
            RECORDS, producer_id=0x0123456789ABCDEF, epoch=7, sequence=42, compression=codec,
            version=version,
        )  # fmt: skip
        (HERE / name).write_bytes(data)
        manifest["blocks"][name] = {
            "version": version,
            "compression": codec.name.lower(),
            "producer_id": 0x0123456789ABCDEF,
            "epoch": 7,
            "sequence": 42,
            "record_count": len(RECORDS),
            "min_timestamp": 1763790000000,
            "max_timestamp": 1763790000005,
        }
    batch = encode_batch(
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
    (HERE / "batch.bin").write_bytes(batch)
    manifest["batch"] = {"file": "batch.bin", "blocks": [[1, 0, 0, 2], [2, 3, 9, 2]]}
    (HERE / "frame_request.bin").write_bytes(encode_request(RequestType.PING, 7, b"ping"))
    (HERE / "frame_response.bin").write_bytes(
        encode_response(RequestType.WRITE, 8, 6, "unknown topic 'nope'", b"")
    )
    manifest["frames"] = {
        "frame_request.bin": {"kind": "request", "type": 3, "request_id": 7, "body": b64(b"ping")},
        "frame_response.bin": {
            "kind": "response",
            "type": 1,
            "request_id": 8,
            "status": 6,
            "error": "unknown topic 'nope'",
            "body": b64(b""),
        },
    }
    bid = batch_id(1763790000950, "broker-1", 42)
    key = object_key("dev", "events", bid, 1763790000950)
    n = Notification(
        topic="events",
        cluster="dev",
        broker="broker-1",
        storage="s3",
        bucket="memq-dev",
        key=key,
        size=len(batch),
        block_count=2,
        record_count=4,
        min_timestamp=1763790000000,
        max_timestamp=1763790000005,
        checksum=decode_batch_header(batch).crc,
        batch_id=bid,
        created_at=1763790001002,
    )
    (HERE / "notification.json").write_bytes(encode_notification(n))
    manifest["notification"] = n.model_dump()
    manifest["keys"] = [
        {
            "cluster": "dev",
            "topic": "events",
            "created_ms": 1763790000950,
            "broker": "broker-1",
            "sequence": 42,
            "hash": True,
            "key": key,
        },
        {
            "cluster": "prod.eu",
            "topic": "logs_v2",
            "created_ms": 0,
            "broker": "b",
            "sequence": 0,
            "hash": False,
            "key": object_key("prod.eu", "logs_v2", batch_id(0, "b", 0), 0, use_hash_prefix=False),
        },
    ]
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()
