"""The consumer's dedup window (memq.consumer.dedup) against a plain reference model,
and the Deduplicator that applies it to fetched objects."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.consumer.config import ConsumerConfig
from memq.consumer.dedup import BlockId, DedupWindow, Verdict
from memq.consumer.fetcher import BlockAudit, BlockSpan
from memq.consumer.handout import Current, Deduplicator
from memq.consumer.message import Message
from memq.consumer.pending import Pending


@dataclass
class _Producer:
    ids: set[tuple[int, int]] = field(default_factory=set)
    floor: tuple[int, int] | None = None
    seen: int = 0


class Model:
    """The window's specification, written the obvious way (sets, min, max)."""

    def __init__(self, blocks: int, producers: int, window_ms: int) -> None:
        self.blocks, self.producers, self.window_ms = blocks, producers, window_ms
        self.p: OrderedDict[tuple[str, int], _Producer] = OrderedDict()

    def _expire(self, now: int) -> None:
        while self.p and now - next(iter(self.p.values())).seen >= self.window_ms:
            self.p.popitem(last=False)

    def verdict(self, b: BlockId, now: int) -> Verdict:
        self._expire(now)
        r = self.p.get((b.topic, b.producer_id))
        x = (b.epoch, b.sequence)
        if r is None:
            return Verdict.NEW
        if x in r.ids:
            return Verdict.DUPLICATE
        if r.floor is not None and x <= r.floor:
            return Verdict.OUT_OF_WINDOW
        return Verdict.NEW

    def remember(self, b: BlockId, now: int) -> None:
        self._expire(now)
        r = self.p.pop((b.topic, b.producer_id), None) or _Producer()
        x = (b.epoch, b.sequence)
        if (r.floor is None or x > r.floor) and x not in r.ids:
            r.ids.add(x)
            while len(r.ids) > self.blocks:
                low = min(r.ids)
                r.ids.remove(low)
                r.floor = low if r.floor is None else max(r.floor, low)
        r.seen = now
        self.p[(b.topic, b.producer_id)] = r
        while len(self.p) > self.producers:
            self.p.popitem(last=False)


block_ids = st.builds(
    BlockId,
    topic=st.sampled_from(["a", "b"]),
    producer_id=st.integers(0, 4),
    epoch=st.integers(0, 2),
    sequence=st.integers(0, 40),
)
ops = st.lists(
    st.tuples(st.sampled_from(["verdict", "remember"]), block_ids, st.integers(0, 400)),
    max_size=300,
)


@settings(max_examples=300)
@given(
    ops=ops,
    blocks=st.integers(1, 12),
    producers=st.integers(1, 6),
    window_ms=st.integers(1, 2000),
)
def test_the_window_behaves_like_its_model(
    ops: list[tuple[str, BlockId, int]], blocks: int, producers: int, window_ms: int
) -> None:
    w = DedupWindow(blocks=blocks, producers=producers, window_ms=window_ms)
    m = Model(blocks, producers, window_ms)
    now = 0
    for op, b, dt in ops:
        now += dt
        if op == "verdict":
            assert w.verdict(b, now) == m.verdict(b, now)
        else:
            w.remember(b, now)
            m.remember(b, now)
        assert w.producer_count == len(m.p)
        assert w.block_count == sum(len(r.ids) for r in m.p.values())


@settings(max_examples=200)
@given(ops=ops, blocks=st.integers(1, 12), producers=st.integers(1, 6))
def test_only_blocks_handed_out_are_ever_duplicates(
    ops: list[tuple[str, BlockId, int]], blocks: int, producers: int
) -> None:
    """Soundness: dedup never drops the first copy of a block (at-least-once holds)."""
    w = DedupWindow(blocks=blocks, producers=producers, window_ms=1000)
    handed: set[BlockId] = set()
    now = 0
    for op, b, dt in ops:
        now += dt
        if w.verdict(b, now) is Verdict.DUPLICATE:
            assert b in handed
        elif op == "remember":
            w.remember(b, now)
            handed.add(b)


@given(st.permutations(range(200)), st.integers(1, 400))
def test_every_recent_block_is_caught_in_any_arrival_order(order: list[int], blocks: int) -> None:
    """Blocks of one producer arriving in any order (over partitions): each of the
    ``blocks`` highest is a duplicate when it comes again; older ones are out of window."""
    w = DedupWindow(blocks=blocks, producers=10, window_ms=10**9)
    for s in order:
        w.remember(BlockId("t", 1, 0, s), 0)
    for s in range(200):
        v = w.verdict(BlockId("t", 1, 0, s), 0)
        if s >= 200 - blocks:
            assert v is Verdict.DUPLICATE
        else:
            assert v in (Verdict.DUPLICATE, Verdict.OUT_OF_WINDOW)
    assert w.verdict(BlockId("t", 1, 0, 200), 0) is Verdict.NEW
    assert w.verdict(BlockId("t", 1, 1, 0), 0) is Verdict.NEW  # a new epoch


def pending() -> Pending:
    """A queue entry for a :class:`Current` made by hand (its audit lists only)."""
    return Pending(("n", 0), 0, None, None, None)


def test_consecutive_blocks_cost_one_run() -> None:
    w = DedupWindow(blocks=10_000, producers=10, window_ms=10**9)
    for s in range(50_000):
        w.remember(BlockId("t", 7, 0, s), 0)
    assert (w.block_count, w.run_count) == (10_000, 1)
    assert w.verdict(BlockId("t", 7, 0, 39_999), 0) is Verdict.OUT_OF_WINDOW
    assert w.verdict(BlockId("t", 7, 0, 40_000), 0) is Verdict.DUPLICATE


def test_producers_are_forgotten_least_recently_seen_first_and_after_the_window() -> None:
    w = DedupWindow(blocks=10, producers=2, window_ms=1000)
    a, b, c = (BlockId("t", p, 0, 0) for p in (1, 2, 3))
    w.remember(a, 0)
    w.remember(b, 10)
    w.remember(a, 20)  # a is the most recently seen now
    w.remember(c, 30)  # b goes
    assert [w.verdict(x, 30) for x in (a, b, c)] == [
        Verdict.DUPLICATE,
        Verdict.NEW,
        Verdict.DUPLICATE,
    ]
    assert w.verdict(a, 1019) is Verdict.DUPLICATE
    assert w.verdict(a, 1020) is Verdict.NEW  # not seen for window_ms
    assert w.verdict(c, 1029) is Verdict.DUPLICATE
    assert w.producer_count == 1
    w.clear()
    assert w.verdict(c, 1029) is Verdict.NEW


def test_topics_are_separate() -> None:
    w = DedupWindow(blocks=10, producers=10, window_ms=1000)
    w.remember(BlockId("a", 1, 0, 5), 0)
    assert w.verdict(BlockId("b", 1, 0, 5), 0) is Verdict.NEW


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        DedupWindow(blocks=0, producers=1, window_ms=1)


# --- the Deduplicator: applying the window to fetched objects ---------------------------------


@dataclass
class Counters:
    duplicate_blocks_dropped: int = 0
    duplicate_records_dropped: int = 0
    dedup_out_of_window: int = 0


def fetched(blocks: list[tuple[int, int, int]]) -> tuple[list[Message], list[BlockSpan]]:
    """An object's messages and spans: blocks of (producer, sequence, records)."""
    msgs: list[Message] = []
    spans: list[BlockSpan] = []
    for i, (pid, seq, n) in enumerate(blocks):
        spans.append(BlockSpan(i, pid, 0, seq, n))
        msgs += [
            Message("t", 0, 0, i, r, 0, None, b"%d/%d/%d" % (pid, seq, r), None, pid, 0, seq, "k")
            for r in range(n)
        ]
    return msgs, spans


def make_dedup(blocks: int = 100) -> tuple[Deduplicator, Counters]:
    stats = Counters()
    return Deduplicator(DedupWindow(blocks=blocks, producers=10, window_ms=10**9), stats), stats


def hand_out(d: Deduplicator, blocks: list[tuple[int, int, int]], take: int = 1 << 30) -> Any:
    msgs, spans = fetched(blocks)
    adm = d.admit("t", msgs, spans)
    cur = Current(pending(), adm.messages, adm.tracked, d)
    return adm, cur.take(take)


def test_blocks_handed_out_are_dropped_from_later_objects() -> None:
    d, stats = make_dedup()
    _, got = hand_out(d, [(1, 0, 2), (1, 1, 3)])
    assert len(got) == 5
    adm, got = hand_out(d, [(1, 1, 3), (2, 0, 1), (1, 1, 3)])  # a copy, new, a copy in it
    assert [m.value for m in got] == [b"2/0/0"]
    assert adm.dropped == {0, 2}
    assert (stats.duplicate_blocks_dropped, stats.duplicate_records_dropped) == (2, 6)


class Turns:
    """Objects in progress take turns as the consumer runs them: one is current, and
    one left midway is parked first (``left_midway`` claims what it handed out of its
    block in progress), as ``Prefetcher.pause`` and ``drop`` do."""

    def __init__(self, chunks: bool = False) -> None:
        self.active: Current | None = None
        self.chunks = chunks
        self.got: list[bytes] = []

    def park(self) -> None:
        if self.active is not None and not self.active.exhausted:
            self.active.left_midway()
        self.active = None

    def fetch(self, d: Deduplicator, blocks: list[tuple[int, int, int]]) -> Current:
        """The next object, fetched once the current one is parked (the consumer only
        fetches when none is current), becomes current."""
        self.park()
        self.active = Current(pending(), *admitted(d, blocks), d)
        return self.active

    def take(self, cur: Current, n: int) -> list[bytes]:
        if self.active is not cur:
            self.park()
        self.active = cur
        if self.chunks:
            out = [v for c in cur.take_chunks(n) for v in c.values]
        else:
            out = [m.value for m in cur.take(n)]
        self.got += out
        return out

    def drop(self, cur: Current) -> None:
        cur.left_midway()
        if self.active is cur:
            self.active = None


def test_a_block_is_remembered_only_once_all_its_records_were_taken() -> None:
    d, _ = make_dedup()
    turns = Turns()
    first = turns.fetch(d, [(1, 0, 2), (1, 1, 3)])
    assert len(turns.take(first, 4)) == 4  # block 1 not finished
    assert d.window.verdict(BlockId("t", 1, 0, 0), 0) is Verdict.DUPLICATE
    assert d.window.verdict(BlockId("t", 1, 0, 1), 0) is Verdict.NEW
    turns.drop(first)  # (parked or revoked): its first two records of block 1 are claimed
    second = turns.fetch(d, [(1, 0, 2), (1, 1, 3)])
    assert turns.take(second, 10) == [b"1/1/2"]
    assert d.window.verdict(BlockId("t", 1, 0, 1), 0) is Verdict.DUPLICATE


@pytest.mark.parametrize("order", ["parked inside the block", "parked before the block"])
def test_two_objects_in_progress_hand_out_each_record_of_a_shared_block_once(order: str) -> None:
    """Two objects in progress hold copies of block B (kept when each was fetched; one
    is parked on a paused partition). However they take turns, and whether one is
    revoked midway, every record of B is handed out once."""
    d, stats = make_dedup()
    turns = Turns()
    first = turns.fetch(d, [(2, 0, 1), (1, 0, 4)])
    turns.take(first, 3 if order == "parked inside the block" else 1)
    turns.drop(first)  # parked (its partition paused)
    second = turns.fetch(d, [(1, 0, 4)])  # B again, other partition
    turns.take(second, 1)
    if order == "parked before the block":
        turns.drop(second)  # (its partition was revoked)
        turns.take(first, 10)
    else:
        turns.take(second, 10)
        turns.take(first, 10)
    assert sorted(turns.got) == [b"1/0/0", b"1/0/1", b"1/0/2", b"1/0/3", b"2/0/0"]
    # inside: 2 trimmed from the copy when fetched, 2 dropped by the parked object after;
    # before: the 1 record the revoked copy handed out, dropped by the parked object
    assert stats.duplicate_records_dropped == (4 if order == "parked inside the block" else 1)
    assert stats.duplicate_blocks_dropped == 0  # (no copy was dropped whole)
    assert first.exhausted


@settings(max_examples=400)
@given(rnd=st.randoms(use_true_random=False), chunks=st.booleans())
def test_objects_in_progress_with_shared_blocks_hand_out_every_record_once(
    rnd: Any, chunks: bool
) -> None:
    """Copies of the same blocks in 2-4 objects, opened, taken from in turns (a few
    records at a time, by take or take_chunks) and dropped midway (then read again
    later), in random order: every record is handed out exactly once."""
    blocks = [(1, seq, rnd.randint(1, 3)) for seq in range(rnd.randint(1, 4))]
    objs = [rnd.sample(blocks, rnd.randint(1, len(blocks))) for _ in range(rnd.randint(2, 4))]
    expected = {
        b"1/%d/%d" % (seq, r) for _, seq, n in {b for o in objs for b in o} for r in range(n)
    }
    d, _ = make_dedup()
    turns = Turns(chunks)
    queue = rnd.sample(range(len(objs)), len(objs))
    in_progress: list[tuple[int, Current]] = []

    def open_next() -> None:
        i = queue.pop(0)
        cur = turns.fetch(d, objs[i])
        if not cur.exhausted:
            in_progress.append((i, cur))

    for _ in range(rnd.randint(3, 25)):
        r = rnd.random()
        if queue and (r < 0.3 or not in_progress):
            open_next()
        elif in_progress and r < 0.85:
            j = rnd.randrange(len(in_progress))
            turns.take(in_progress[j][1], rnd.randint(1, 4))
            if in_progress[j][1].exhausted:
                in_progress.pop(j)
        elif in_progress:  # its partition revoked: dropped midway, read again later
            i, cur = in_progress.pop(rnd.randrange(len(in_progress)))
            turns.drop(cur)
            queue.append(i)
    while in_progress or queue:
        if not in_progress:
            open_next()
            continue
        _, cur = in_progress.pop(0)
        while not cur.exhausted:
            turns.take(cur, rnd.randint(1, 4))
    assert sorted(turns.got) == sorted(expected)


def copy_of(turns: Turns, d: Deduplicator, blocks: list[tuple[int, list[int]]]) -> Current:
    """An object holding (sequence, the record numbers it keeps) blocks of producer 1
    (fewer than all after a seek into a block or a time floor), fetched once the current
    one is parked: it becomes current."""
    turns.park()
    msgs: list[Message] = []
    spans: list[BlockSpan] = []
    for i, (seq, recs) in enumerate(blocks):
        spans.append(BlockSpan(i, 1, 0, seq, len(recs)))
        msgs += [
            Message("t", 0, 0, i, r, 0, None, b"%d/%d" % (seq, r), None, 1, 0, seq, "k")
            for r in recs
        ]
    adm = d.admit("t", msgs, spans)
    turns.active = Current(pending(), adm.messages, adm.tracked, d)
    return turns.active


def test_only_the_records_handed_out_are_claimed_when_a_copy_has_gaps() -> None:
    """A copy keeping records 0, 2, 4 (a time floor) hands out 0 and 2: record 1 is not
    claimed, so a whole copy still hands it out."""
    d, _ = make_dedup()
    turns = Turns()
    floor = copy_of(turns, d, [(0, [0, 2, 4])])
    turns.take(floor, 2)
    whole = copy_of(turns, d, [(0, [0, 1, 2, 3, 4])])
    turns.take(whole, 10)
    turns.take(floor, 10)
    assert sorted(turns.got) == [b"0/0", b"0/1", b"0/2", b"0/3", b"0/4"]


def test_a_run_is_checked_whole_not_only_at_its_first_record() -> None:
    """A copy started inside the block (seek) hands out records 2 and 3; a whole copy,
    fetched before, skips exactly those."""
    d, _ = make_dedup()
    turns = Turns()
    whole = copy_of(turns, d, [(0, list(range(6)))])
    inside = copy_of(turns, d, [(0, [2, 3, 4, 5])])
    turns.take(inside, 2)
    turns.take(whole, 10)
    turns.take(inside, 10)
    assert sorted(turns.got) == [b"0/%d" % r for r in range(6)]


def test_separate_claims_on_one_block_are_all_kept() -> None:
    d, _ = make_dedup()
    turns = Turns()
    inside = copy_of(turns, d, [(0, [2, 3, 4, 5])])
    turns.take(inside, 2)  # 2-3
    turns.drop(inside)
    trimmed = copy_of(turns, d, [(0, list(range(6)))])  # keeps 0, 1, 4, 5
    turns.take(trimmed, 1)  # 0: 2-3 stay claimed
    turns.drop(trimmed)
    third = copy_of(turns, d, [(0, list(range(6)))])
    for cur in (third, inside, trimmed):
        turns.take(cur, 10)
    assert sorted(turns.got) == [b"0/%d" % r for r in range(6)]


def test_a_copy_whose_records_were_all_claimed_is_a_dropped_copy() -> None:
    """Every record of block 0 was handed out by an object since revoked midway (block 1
    not finished): the next copy of block 0 is dropped as a copy, counted and audited as
    dropped, not consumed."""
    d, stats = make_dedup()
    d.claim(BlockId("t", 1, 0, 0), [(0, 2)])
    msgs, spans = fetched([(1, 0, 2), (1, 1, 1)])
    adm = d.admit("t", msgs, spans)
    assert adm.dropped == {0}
    assert [m.value for m in adm.messages] == [b"1/1/0"]
    assert (stats.duplicate_blocks_dropped, stats.duplicate_records_dropped) == (1, 2)


def test_records_dropped_as_handed_out_elsewhere_leave_the_audit_with_what_was_handed_out() -> None:
    d, stats = make_dedup()
    turns = Turns()
    first = copy_of(turns, d, [(0, [0, 1, 2, 3])])
    turns.park()  # before taking anything
    second = copy_of(turns, d, [(0, [0, 1, 2, 3])])
    audit = BlockAudit(0, 1, 0, 0, 4, 0, 0)
    first.pending.blocks, second.pending.blocks = [audit], [audit]
    turns.take(second, 2)  # 0-1, then parked: claimed
    turns.take(first, 2)  # 2-3 (0-1 dropped): the block is done
    turns.take(second, 10)  # its 2-3 were handed out by the first: dropped
    assert sorted(turns.got) == [b"0/0", b"0/1", b"0/2", b"0/3"]
    half = dataclasses.replace(audit, records=2)
    assert (first.pending.blocks, second.pending.blocks) == ([half], [half])
    assert first.pending.copies == second.pending.copies == []
    assert stats.duplicate_records_dropped == 4
    assert stats.duplicate_blocks_dropped == 0
    assert first.exhausted and second.exhausted


def test_claims_of_objects_in_progress_are_not_evicted_by_a_small_window() -> None:
    stats = Counters()
    d = Deduplicator(DedupWindow(blocks=100, producers=1, window_ms=10**9), stats)
    turns = Turns()
    a = copy_of(turns, d, [(0, [0, 1, 2])])
    turns.take(a, 1)  # parked inside block 0
    b = copy_of(turns, d, [(1, [0, 1, 2])])
    turns.take(b, 1)
    c = copy_of(turns, d, [(0, [0, 1, 2])])
    for cur in (c, a, b):
        turns.take(cur, 10)
    assert sorted(turns.got) == [b"0/0", b"0/1", b"0/2", b"1/0", b"1/1", b"1/2"]


def admitted(d: Deduplicator, blocks: list[tuple[int, int, int]]) -> tuple[Any, Any]:
    msgs, spans = fetched(blocks)
    adm = d.admit("t", msgs, spans)
    return adm.messages, adm.tracked


@pytest.mark.parametrize("chunks", [False, True])
def test_a_block_handed_out_meanwhile_by_another_object_is_dropped_when_reached(
    chunks: bool,
) -> None:
    """Two objects in progress hold the same block (kept when each was fetched): the
    one that gets to it second drops it, whole, and hands out what surrounds it."""
    d, stats = make_dedup()
    blocks = [(1, 0, 2), (1, 1, 3), (1, 2, 2)]
    msgs, spans = fetched(blocks)
    adm = d.admit("t", msgs, spans)
    parked = Current(pending(), adm.messages, adm.tracked, d)
    assert len(parked.take(1)) == 1
    parked.left_midway()  # (parked: its partition paused)
    _, got = hand_out(d, [(1, 1, 3)])  # another object hands block 1 out meanwhile
    assert len(got) == 3

    def take(n: int) -> list[bytes]:
        if not chunks:
            return [m.value for m in parked.take(n)]
        return [v for c in parked.take_chunks(n) for v in c.values]

    assert take(2) == [b"1/0/1", b"1/2/0"]  # up to 2 records: block 1 is stepped over
    assert take(5) == [b"1/2/1"]
    assert parked.exhausted
    assert (stats.duplicate_blocks_dropped, stats.duplicate_records_dropped) == (1, 3)


def test_an_object_with_nothing_dropped_is_not_copied() -> None:
    d, _ = make_dedup()
    msgs, spans = fetched([(1, 0, 2), (1, 1, 3)])
    assert d.admit("t", msgs, spans).messages is msgs


def test_blocks_older_than_the_window_are_delivered_and_counted() -> None:
    d, stats = make_dedup(blocks=2)
    for s in range(3):
        hand_out(d, [(1, s, 1)])
    _, got = hand_out(d, [(1, 0, 1)])
    assert len(got) == 1 and stats.dedup_out_of_window == 1


def test_the_guarantees_doc_states_the_window_settings_and_their_defaults() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "guarantees.md").read_text()
    by_alias = {f.alias: f for f in ConsumerConfig.model_fields.values()}
    for key in ("dedup.window.blocks", "dedup.window.producers", "dedup.window.ms"):
        assert f"| `{key}` | {by_alias[key].default} |" in doc
    assert by_alias["dedup.enable"].default is True and "default on" in doc
