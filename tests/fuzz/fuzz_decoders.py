"""Coverage-guided fuzzing (atheris / libFuzzer) of every MemQ decoder.

Property: whatever the bytes, a decoder returns a value or raises a
:class:`memq.errors.MemqFormatError` subclass (a typed, documented error); any other
exception, a hang or a crash is a bug. Checksums would stop random mutations at the
first CRC, so half of the inputs (first byte even) get their CRCs recomputed after
mutation and reach the structure behind them (msgpack records, index entries, JSON
fields, compressed payloads).

    python tests/fuzz/fuzz_decoders.py TARGET [libFuzzer flags, e.g. -runs=20000 or
                                               -max_total_time=300]

TARGET is one of: frame, stream, block, batch, notification, audit. The seed corpus
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

with atheris.instrument_imports():
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
    obj["crc"] = zlib.crc32(canon.encode())
    return bytearray(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def _stream(data: bytes) -> None:
    """Feed the bytes in uneven chunks to the incremental decoder, parse every frame."""
    dec = FrameDecoder(max_frame_size=LIMIT)
    step = 1 + (data[0] % 97 if data else 0)
    for i in range(0, len(data), step):
        dec.feed(data[i : i + step])
        for raw in dec.frames():
            parse_frame(raw)


TARGETS: dict[str, tuple[Callable[[bytes], object], Callable[[bytearray], object] | None, str]] = {
    "frame": (lambda d: decode_frame(d, max_frame_size=LIMIT), fix_frame_crc, "frame_*.bin"),
    "stream": (_stream, None, "frame_*.bin"),
    "block": (lambda d: decode_block(d, max_uncompressed=LIMIT), fix_block_crc, "block_*.bin"),
    "batch": (lambda d: decode_batch(d, max_uncompressed=LIMIT), fix_batch_crcs, "batch.bin"),
    "notification": (decode_notification, fix_json_crc, "notification.json"),
    "audit": (decode_audit, fix_json_crc, "notification.json"),
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
