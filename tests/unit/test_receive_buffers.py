"""The consumer's receive buffers: reused only when nothing refers to them, bounded."""

from __future__ import annotations

import gc

import pytest

from memq.storage_handlers.receive import ReceiveBuffers

MiB = 1 << 20


def owner(view: memoryview) -> bytearray:
    buf = view.obj
    assert isinstance(buf, bytearray)
    return buf


def test_a_buffer_is_reused_once_no_view_of_it_is_alive() -> None:
    pool = ReceiveBuffers(64 * MiB)
    a = pool.take(8 * MiB)
    assert a is not None and len(a) == 8 * MiB and not a.readonly
    first = id(owner(a))
    b = pool.take(8 * MiB)  # `a` is alive: another buffer
    assert b is not None and id(owner(b)) != first
    del a
    c = pool.take(8 * MiB - 5)  # (a little smaller: the same buffer fits)
    assert c is not None and id(owner(c)) == first and len(c) == 8 * MiB - 5
    assert (pool.made, pool.reused) == (2, 1)


@pytest.mark.parametrize("holder", ["slice", "readonly", "arrow", "bytes-of-a-slice"])
def test_what_refers_to_a_buffer_keeps_it_from_reuse(holder: str) -> None:
    """Every way a consumer's caller can keep a fetched object's bytes: a slice of the
    view, a read-only view, an Arrow buffer over one. A copy does not keep it."""
    import pyarrow as pa

    pool = ReceiveBuffers(64 * MiB)
    view = pool.take(2 * MiB)
    assert view is not None
    view[:] = b"\xab" * (2 * MiB)
    kept: object
    if holder == "slice":
        kept = view[100:200]
    elif holder == "readonly":
        kept = view.toreadonly()
    elif holder == "arrow":
        kept = pa.py_buffer(view.toreadonly()[10:20])
    else:
        kept = bytes(view[100:200])
    del view
    gc.collect()
    taken = [pool.take(2 * MiB) for _ in range(6)]
    for t in taken:  # what the next fetches write
        assert t is not None
        t[:] = b"\x00" * (2 * MiB)
    if holder == "bytes-of-a-slice":
        assert pool.reused == 1 and kept == b"\xab" * 100
    else:
        assert pool.reused == 0  # the first buffer stayed out of reach
        assert set(bytes(kept)) == {0xAB}  # type: ignore[call-overload]


def test_small_objects_and_too_large_ones_are_not_pooled() -> None:
    pool = ReceiveBuffers(16 * MiB)
    assert pool.take(pool.min_size - 1) is None
    assert pool.take(16 * MiB + 1) is None
    assert pool.held_bytes == 0


def test_held_bytes_stay_within_the_bound_idle_buffers_go_first() -> None:
    pool = ReceiveBuffers(8 * MiB)
    busy = pool.take(3 * MiB)  # 3 MiB in use
    idle = pool.take(3 * MiB)
    assert busy is not None and idle is not None
    del idle
    more = pool.take(4 * MiB)  # 3 + 3 + 4 > 8: the idle one goes, the busy one stays
    assert more is not None and pool.held_bytes == 7 * MiB
    assert any(b is owner(busy) for b in pool._buffers)
    last = pool.take(5 * MiB)  # nothing idle: the oldest in use is forgotten, still valid
    assert last is not None and pool.held_bytes <= 8 * MiB
    busy[:3] = b"abc"  # (its holder still owns it)
    assert bytes(busy[:3]) == b"abc"


def test_a_small_object_leaves_a_big_buffer_for_a_big_one() -> None:
    pool = ReceiveBuffers(64 * MiB)
    big = pool.take(8 * MiB)
    assert big is not None
    big_id = id(owner(big))
    del big
    small = pool.take(MiB)
    assert small is not None and id(owner(small)) != big_id
    again = pool.take(8 * MiB)
    assert again is not None and id(owner(again)) == big_id


def test_many_threads_never_share_a_live_buffer() -> None:
    """Fetch threads take buffers at once while others hold theirs: a buffer is never
    handed out twice while a view of it lives (each writer's bytes survive)."""
    import threading

    pool = ReceiveBuffers(32 * MiB)
    errors: list[str] = []
    start = threading.Barrier(4)

    def work(tag: int) -> None:
        start.wait()
        held = []
        for i in range(200):
            v = pool.take(MiB + (i % 3) * 1000)
            if v is None:
                continue
            mark = bytes([tag]) * 64 + i.to_bytes(4, "big")
            v[: len(mark)] = mark
            held.append((v.toreadonly(), mark))
            del v
            if len(held) > 3:
                kept, want = held.pop(0)
                if bytes(kept[: len(want)]) != want:
                    errors.append(f"thread {tag}: a held buffer was overwritten")
        for kept, want in held:
            if bytes(kept[: len(want)]) != want:
                errors.append(f"thread {tag}: a held buffer was overwritten")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and pool.reused > 100 and pool.held_bytes <= 32 * MiB


def test_clear_lets_every_buffer_go_and_held_views_stay_valid() -> None:
    pool = ReceiveBuffers(16 * MiB)
    held = pool.take(2 * MiB)
    assert held is not None and pool.take(2 * MiB) is not None
    held[:2] = b"ok"
    pool.clear()
    assert pool.held_bytes == 0 and bytes(held[:2]) == b"ok"
    fresh = pool.take(2 * MiB)
    assert fresh is not None and fresh.obj is not held.obj and pool.reused == 0
