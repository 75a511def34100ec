"""Hypothesis strategies for MemQ formats."""

from __future__ import annotations

from hypothesis import strategies as st

from memq.formats import Compression, Notification
from memq.formats.block import Record

timestamps = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
small_bytes = st.binary(max_size=64)
headers = st.none() | st.lists(
    st.tuples(st.text(max_size=8), st.none() | small_bytes), max_size=3
).map(tuple)

records: st.SearchStrategy[Record] = st.tuples(
    timestamps, st.none() | small_bytes, st.binary(max_size=300), headers
)
record_lists = st.lists(records, min_size=1, max_size=20)
compressions = st.sampled_from(list(Compression))
u32 = st.integers(min_value=0, max_value=0xFFFFFFFF)
u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
names = st.from_regex(r"^[A-Za-z0-9._-]{1,30}$", fullmatch=True).filter(
    lambda s: s not in {".", ".."}
)

notifications = st.builds(
    Notification,
    topic=names,
    cluster=names,
    broker=names,
    storage=st.sampled_from(["s3", "filesystem", "devnull"]),
    bucket=names,
    key=names,
    size=st.integers(min_value=1, max_value=1 << 40),
    block_count=st.integers(min_value=1, max_value=1 << 16),
    record_count=st.integers(min_value=1, max_value=1 << 40),
    min_timestamp=st.integers(min_value=0, max_value=1 << 42),
    max_timestamp=st.just((1 << 42) + 1),
    checksum=u32,
    batch_id=names,
    created_at=st.integers(min_value=0, max_value=1 << 42),
)
