"""Coverage-guided fuzzing (atheris / libFuzzer) of every MemQ decoder.

Property: whatever the bytes, a decoder returns a value or raises a
:class:`memq.errors.MemqFormatError` subclass (a typed, documented error); any other
exception, a hang or a crash is a bug. Checksums would stop random mutations at the
first CRC, so half of the inputs (first byte even) get their CRCs recomputed after
mutation and reach the structure behind them (msgpack records, index entries, JSON
fields, compressed payloads).

    python tests/fuzz/fuzz_decoders.py TARGET [libFuzzer flags, e.g. -runs=20000 or
                                               -max_total_time=300]

TARGET is one of: frame, stream, block, batch, notification, audit, kafka (a Kafka
request frame for the broker's Kafka listener, with its record batches). The seed corpus
is the golden vectors (``tests/vectors/``) copied to a scratch directory. A crash
leaves ``crash-<sha1>`` in the current directory; add its bytes as a regression case to
``tests/unit/test_fuzz_regressions.py``.
"""

from __future__ import annotations

import contextlib
import shutil
import struct
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

import atheris

# Instrumented: the decoders and what they run (aiokafka's record batches, gzip). Not the
# rest of what memq.broker imports (pydantic, boto3, aiohttp): ~17 s per start, no coverage.
with atheris.instrument_imports(include=["memq", "aiokafka", "gzip", "_compression"]):
    from memq.broker.kafka_codec import (
        PRODUCE,
        SASL_APIS,
        SUPPORTED,
        decode_records,
        decode_request,
    )
    from memq.errors import MemqFormatError
    from memq.formats import (
        FrameDecoder,
        decode_batch,
        decode_block,
        decode_frame,
        decode_notification,
        parse_frame,
    )
    from memq.formats.audit import decode_audit

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
LIMIT = 1 << 20  # the decoders' uncompressed-size bound for fuzzing (memory stays small)


def fix_frame_crc(data: bytearray) -> None:
    if len(data) >= 8:
        data[0:4] = struct.pack(">I", len(data) - 4)
        data[4:8] = struct.pack(">I", zlib.crc32(data[8:]))


def fix_block_crc(data: bytearray) -> None:
    if len(data) >= 8:
        data[4:8] = struct.pack(">I", zlib.crc32(data[8:], zlib.crc32(data[:4])))


def fix_batch_crcs(data: bytearray) -> None:
    """Recompute each indexed block's CRC field, the index CRCs, then the header CRC."""
    if len(data) < 20:
        return
    hlen = struct.unpack_from(">I", data, 8)[0]
    if not 20 <= hlen <= len(data):
        return
    for pos in range(16, hlen - 4 - 35, 36):
        off, length = struct.unpack_from(">QI", data, pos)
        if length >= 8 and off + length <= len(data):
            block = data[off : off + length]
            fix_block_crc(block)
            data[off : off + length] = block
            struct.pack_into(">I", data, pos + 12, struct.unpack_from(">I", block, 4)[0])
    struct.pack_into(">I", data, hlen - 4, zlib.crc32(data[: hlen - 4]))


def fix_json_crc(data: bytearray) -> bytearray:
    import json

    try:
        obj = json.loads(bytes(data))
    except (ValueError, RecursionError):
        return data
    if not isinstance(obj, dict):
        return data
    obj.pop("crc", None)
    canon = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    # (surrogatepass: a lone surrogate gets its CRC too, for the decoder to refuse)
    obj["crc"] = zlib.crc32(canon.encode("utf-8", "surrogatepass"))
    doc = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return bytearray(doc.encode("utf-8", "surrogatepass"))


def _stream(data: bytes) -> None:
    """Feed the bytes in uneven chunks to the incremental decoder, parse every frame."""
    dec = FrameDecoder(max_frame_size=LIMIT)
    step = 1 + (data[0] % 97 if data else 0)
    for i in range(0, len(data), step):
        dec.feed(data[i : i + step])
        for raw in dec.frames():
            parse_frame(raw)


KAFKA_APIS = {**SUPPORTED, **SASL_APIS}


def _kafka(data: bytes) -> None:
    """A Kafka request frame (after its length), and a Produce request's record sets."""
    req = decode_request(data, KAFKA_APIS)
    if req.api_key == PRODUCE:
        for _topic, parts in req.body.topics or []:
            for _partition, records in parts or []:
                if records:
                    decode_records(records, now_ms=0)


def fix_kafka_crcs(data: bytearray) -> bytearray:
    """Recompute the CRC-32C of every record batch of a Produce request."""
    from aiokafka.record.util import calc_crc32c

    try:
        req = decode_request(bytes(data), KAFKA_APIS)
    except MemqFormatError:
        return data
    if req.api_key != PRODUCE:
        return data
    end = len(data) - len(req.body.encode())  # the header's length
    topics = []
    for topic, parts in req.body.topics or []:
        fixed = []
        for partition, records in parts or []:
            buf = bytearray(records or b"")
            pos = 0
            while pos + 21 <= len(buf):
                length = struct.unpack_from(">i", buf, pos + 8)[0]
                stop = min(len(buf), pos + 12 + max(length, 9))
                struct.pack_into(">I", buf, pos + 17, calc_crc32c(bytes(buf[pos + 21 : stop])))
                pos = stop
            fixed.append((partition, bytes(buf) if records is not None else None))
        topics.append((topic, fixed))
    body = type(req.body)(req.body.transactional_id, req.body.required_acks, req.body.timeout,
                          topics)  # fmt: skip
    return bytearray(data[:end]) + bytearray(body.encode())


def kafka_seeds() -> list[bytes]:
    from aiokafka.protocol.admin import ApiVersionRequest_v2, SaslAuthenticateRequest_v1
    from aiokafka.protocol.produce import ProduceRequest_v7
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from memq.broker.kafka_structs import InitProducerIdRequest_v1, MetadataRequest_v8

    def frame(req: object, cid: int) -> bytes:
        head = struct.pack(">hhih", req.API_KEY, req.API_VERSION, cid, 4) + b"fuzz"  # type: ignore[attr-defined]
        return head + req.encode()  # type: ignore[attr-defined]

    out = []
    for codec in (0, 1, 2, 3, 4):  # none, gzip, snappy, lz4, zstd
        b = DefaultRecordBatchBuilder(2, codec, 0, 7, 0, 3, 1 << 16)
        for i in range(3):
            b.append(i, timestamp=1000 + i, key=b"k%d" % i, value=b"v" * (i + 1) * 20,
                     headers=[("h", b"x")])  # fmt: skip
        out.append(frame(ProduceRequest_v7(None, -1, 1000, [("t", [(0, bytes(b.build()))])]), 1))
    out.append(frame(ApiVersionRequest_v2(), 2))
    out.append(frame(MetadataRequest_v8(["t", "u"], True, False, False), 3))
    out.append(frame(InitProducerIdRequest_v1(None, 60_000), 4))
    out.append(frame(SaslAuthenticateRequest_v1(b"\x00app\x00token"), 5))
    return out


TARGETS: dict[str, tuple[Callable[[bytes], object], Callable[[bytearray], object] | None, str]] = {
    "frame": (lambda d: decode_frame(d, max_frame_size=LIMIT), fix_frame_crc, "frame_*.bin"),
    "stream": (_stream, None, "frame_*.bin"),
    "block": (lambda d: decode_block(d, max_uncompressed=LIMIT), fix_block_crc, "block*.bin"),
    "batch": (lambda d: decode_batch(d, max_uncompressed=LIMIT), fix_batch_crcs, "batch.bin"),
    "notification": (decode_notification, fix_json_crc, "notification.json"),
    "audit": (decode_audit, fix_json_crc, "notification.json"),
    "kafka": (_kafka, fix_kafka_crcs, "kafka_*.bin"),  # seeds: kafka_seeds()
}


def make_test_one(target: str) -> Callable[[bytes], None]:
    decode, fix, _ = TARGETS[target]

    def test_one(data: bytes) -> None:
        if not data:
            return
        body = bytearray(data[1:])
        if fix is not None and data[0] % 2 == 0:
            fixed = fix(body)
            if isinstance(fixed, bytearray):
                body = fixed
        with contextlib.suppress(MemqFormatError):  # a typed rejection: the property holds
            decode(bytes(body))

    return test_one


def seed_corpus(target: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"memq-fuzz-{target}-"))
    for i, f in enumerate(sorted(VECTORS.glob(TARGETS[target][2]))):
        raw = f.read_bytes()
        (d / f"seed-{i}-fixed").write_bytes(b"\x00" + raw)
        (d / f"seed-{i}-raw").write_bytes(b"\x01" + raw)
    if target == "audit":
        from memq.formats.audit import encode_audit

        rec = encode_audit({"kind": "consumed", "topic": "t", "producer_id": 1, "epoch": 0,
                            "sequence": 2, "records": 3, "content_crc": 4, "min_timestamp": 5,
                            "time": 6, "group": "g", "key": "k", "block_index": 0})  # fmt: skip
        (d / "seed-audit").write_bytes(b"\x00" + rec)
    if target == "kafka":
        for i, raw in enumerate(kafka_seeds()):
            (d / f"seed-kafka-{i}-fixed").write_bytes(b"\x00" + raw)
            (d / f"seed-kafka-{i}-raw").write_bytes(b"\x01" + raw)
    return d


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        raise SystemExit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags]")
    target = argv[1]
    corpus = seed_corpus(target)
    try:
        atheris.Setup([argv[0], *argv[2:], str(corpus)], make_test_one(target))
        atheris.Fuzz()
    finally:  # atheris.Fuzz exits the process; this runs only on errors before it
        shutil.rmtree(corpus, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv)
