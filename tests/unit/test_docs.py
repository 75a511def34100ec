"""The examples in docs/formats.md are the golden vectors, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
DOC = (ROOT / "docs" / "formats.md").read_text()
EXAMPLES = re.findall(r"<!-- vector: (\S+)(?: (\S+))? -->\n```\w*\n(.*?)```", DOC, re.S)


def hexdump(data: bytes) -> str:
    return "".join(
        f"{i:08x}: {' '.join(f'{b:02x}' for b in data[i : i + 16])}\n"
        for i in range(0, len(data), 16)
    )


def test_doc_has_examples():
    assert {name for name, _, _ in EXAMPLES} >= {
        "frame_request.bin",
        "frame_response.bin",
        "block_none.bin",
        "batch.bin",
        "notification.json",
    }


@pytest.mark.parametrize(("name", "mode", "body"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_matches_vector(name, mode, body):
    data = (ROOT / "tests" / "vectors" / name).read_bytes()
    if mode == "text":
        assert body.strip() == data.decode()
    else:
        limit = int(mode) if mode else len(data)
        assert body == hexdump(data[:limit])


def test_documented_sizes_match_the_code():
    from memq.formats import BATCH_PREFIX_SIZE, BLOCK_HEADER_SIZE
    from memq.formats.batch import _ENTRY_SIZE
    from memq.formats.frames import FRAME_HEADER_SIZE

    assert BLOCK_HEADER_SIZE == 56 and "fixed 56-byte header" in DOC
    assert BATCH_PREFIX_SIZE == 16 and _ENTRY_SIZE == 36 and "20 + 36 * block_count" in DOC
    assert FRAME_HEADER_SIZE == 16


def test_audit_examples_decode():
    from memq.formats.audit import decode_audit, encode_audit

    m = re.search(r"<!-- audit example -->\n```json\n(.*?)```", DOC, re.S)
    assert m is not None
    lines = m.group(1).splitlines()
    recs = [decode_audit(line) for line in lines]
    assert [r.kind for r in recs] == ["produced", "consumed"]
    assert recs[0].content_crc == recs[1].content_crc and recs[1].group == "analytics"
    for line, r in zip(lines, recs, strict=True):  # the examples are what a writer emits
        assert encode_audit(r.model_dump(exclude_none=True, exclude={"format_version"})) == (
            line.encode()
        )
