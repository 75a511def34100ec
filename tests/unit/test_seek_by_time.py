"""first_offset_at, the one search of a notification offset by time, over a scripted probe.

Each notification has a Kafka timestamp (when the broker published it, after the upload:
what Kafka's offsets_for_times indexes) and the max timestamp of its records (set by
producers: what a seek is by). The scripted probe answers offsets_for_times as Kafka
does from the Kafka timestamps, or not at all, or garbage, and counts what is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from memq.consumer.seeking import CLOCK_SKEW_MS, first_offset_at
from memq.formats.notification import Notification

T = "t.notifications"
BASE = 1_800_000_000_000


def note(i: int, max_ts: int) -> Notification:
    return Notification(
        topic="t", cluster="c", broker="b", storage="s3", bucket="b", key=f"k/{i}", size=1,
        block_count=1, record_count=1, min_timestamp=max_ts, max_timestamp=max_ts,
        checksum=0, batch_id=f"b{i}", created_at=max_ts,
    )  # fmt: skip


class ScriptedProbe:
    """One partition of ``(kafka timestamp, max record timestamp)`` from ``low`` on.

    ``answer``: None answers as Kafka does; otherwise a function of the asked time
    returning what to answer (an offset, -1 for none, None for no answer)."""

    def __init__(
        self,
        stamps: list[tuple[int, int]],
        answer: Callable[[int], int | None] | None = None,
        low: int = 0,
    ) -> None:
        self.stamps = stamps
        self.notes = [note(i, m) for i, (_, m) in enumerate(stamps)]
        self.answer = answer
        self.low = low
        self.reads = 0  # single reads (the bisection's)
        self.scanned = 0  # notifications read in bulk
        self.asked: list[int] = []  # times asked of offsets_for_times

    def read(self, topic: str, partition: int, offset: int) -> Notification | None:
        assert self.low <= offset
        self.reads += 1
        return self.notes[offset] if offset < len(self.notes) else None

    def scan(
        self, topic: str, partition: int, start: int, stop: int
    ) -> Iterator[tuple[int, Notification]]:
        assert self.low <= start
        for off in range(start, min(stop, len(self.notes))):
            self.scanned += 1
            yield off, self.notes[off]

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self.low, len(self.notes)

    def offsets_for_time(self, topic: str, partition: int, ts: int, timeout: float) -> int | None:
        self.asked.append(ts)
        if self.answer is not None:
            return self.answer(ts)
        return next((i for i, (k, _) in enumerate(self.stamps) if i >= self.low and k >= ts), -1)

    def close(self) -> None:
        pass


def always(offset: int | None) -> Callable[[int], int | None]:
    """An offsets_for_times that answers ``offset`` whatever the time."""
    return lambda _ts: offset


def exact(stamps: list[tuple[int, int]], ts: int, low: int = 0) -> int:
    """The first offset whose object reaches ``ts`` (the end if none): every one read."""
    return next((i for i, (_, m) in enumerate(stamps) if i >= low and m >= ts), len(stamps))


def steady(n: int, every: int = 100, upload: int = 50) -> list[tuple[int, int]]:
    """A notification every ``every`` ms, each object's last record ``upload`` ms before
    its notification (more than ``every``: objects in flight at any time)."""
    return [(BASE + i * every, BASE + i * every - upload) for i in range(n)]


def test_kafkas_answer_exact_costs_no_single_read_and_a_few_notifications() -> None:
    stamps = steady(2000, upload=50)
    ts = stamps[1234][1] - 5  # after the previous object's publish: Kafka's answer is 1234
    probe = ScriptedProbe(stamps)
    assert first_offset_at(probe, T, 0, ts) == 1234 == exact(stamps, ts)
    assert probe.reads == 0
    # the answer, and the notifications published in the CLOCK_SKEW_MS before ts
    assert probe.scanned == 1 + CLOCK_SKEW_MS // 100
    assert probe.asked == [ts, ts - CLOCK_SKEW_MS]


def test_objects_in_flight_at_the_time_are_stepped_over() -> None:
    """Uploads take 450 ms and objects are published every 100: the 4 published first
    after ts hold only older records. Kafka's answer is early by them."""
    stamps = steady(2000, upload=450)
    ts = stamps[1500][1] - 5
    probe = ScriptedProbe(stamps)
    assert probe.offsets_for_time(T, 0, ts, 1) == 1496
    probe.asked.clear()
    assert first_offset_at(probe, T, 0, ts) == 1500 == exact(stamps, ts)
    assert probe.reads == 0
    assert probe.scanned == 5 + CLOCK_SKEW_MS // 100


def test_no_answer_bisects_the_partition() -> None:
    stamps = steady(2000, upload=450)
    ts = stamps[700][1] - 5
    probe = ScriptedProbe(stamps, answer=always(None))
    assert first_offset_at(probe, T, 0, ts) == 700
    assert 10 <= probe.reads <= 12  # log2(2000)
    assert probe.asked == [ts]


def test_an_answer_outside_the_partition_falls_back_to_bisection() -> None:
    stamps = steady(2000, upload=450)
    ts = stamps[700][1] - 5
    for garbage in (2001, 10**9, -2, -7):
        probe = ScriptedProbe(stamps, answer=always(garbage))
        assert first_offset_at(probe, T, 0, ts) == 700, garbage
        assert 10 <= probe.reads <= 12
    expired = ScriptedProbe(stamps, answer=always(3), low=100)  # below the low watermark
    assert first_offset_at(expired, T, 0, ts) == 700
    assert expired.reads >= 10


def test_an_answer_of_zero_for_every_time_still_finds_it() -> None:
    """A Kafka-protocol broker answering 0 whatever the time: the steps from 0 end at
    STEP_WINDOW, the rest of the partition is bisected, and the DISORDER_WINDOW before
    the bisection's answer read back."""
    stamps = steady(5000, upload=450)
    ts = stamps[3210][1] - 5
    probe = ScriptedProbe(stamps, answer=always(0))
    assert first_offset_at(probe, T, 0, ts) == 3210
    assert probe.scanned == 1000 + 1000 and probe.reads <= 13


def test_no_notification_that_recent_is_the_end() -> None:
    stamps = steady(500)
    probe = ScriptedProbe(stamps)
    assert probe.offsets_for_time(T, 0, BASE + 10**7, 1) == -1
    assert first_offset_at(probe, T, 0, BASE + 10**7) == 500
    assert probe.reads == 0 and probe.scanned == 0
    # in flight: published after ts, but every record older
    ts = stamps[-1][1] + 1
    assert first_offset_at(ScriptedProbe(stamps), T, 0, ts) == 500


def test_a_time_before_everything_is_the_first_offset_read_once() -> None:
    stamps = steady(500)
    probe = ScriptedProbe(stamps, low=20)
    assert first_offset_at(probe, T, 0, BASE - 10**6) == 20
    assert probe.reads == 0 and probe.scanned == 1 and len(probe.asked) == 1


def test_a_producer_clock_ahead_within_the_skew_is_found() -> None:
    """An object published 30 s before ts holds a record stamped after ts (its
    producer's clock runs ahead): it is the answer, before Kafka's."""
    stamps = steady(2000, upload=50)
    ts = stamps[1500][1] - 5
    stamps[1200] = (stamps[1200][0], ts + 1)  # published 30 s before ts
    assert first_offset_at(ScriptedProbe(stamps), T, 0, ts) == 1200 == exact(stamps, ts)


def test_a_clock_ahead_beyond_the_skew_is_not_looked_for() -> None:
    """The documented bound: published 100 s before ts with a record stamped after it.
    The answer is later than the exact one, never earlier."""
    stamps = steady(2000, upload=50)
    ts = stamps[1500][1] - 5
    stamps[500] = (stamps[500][0], ts + 1)
    assert exact(stamps, ts) == 500
    assert first_offset_at(ScriptedProbe(stamps), T, 0, ts) == 1500


def test_a_backfill_stamped_long_before_its_upload() -> None:
    """Records from 2000-01-01 on, all uploaded now: Kafka's answer is the first offset
    for any time of theirs; past STEP_WINDOW the rest is bisected."""
    now, old = BASE, 946_684_800_000
    stamps = [(now + i, old + i * 1000) for i in range(5000)]
    for target in (3, 999, 1000, 4321, 4999):
        probe = ScriptedProbe(stamps)
        ts = old + target * 1000 - 1
        assert first_offset_at(probe, T, 0, ts) == target
        assert probe.scanned <= 1000 + 1000 and probe.reads <= 13


def test_objects_whose_timestamps_run_back_without_an_answer() -> None:
    """The fallback also finds an object out of order within DISORDER_WINDOW before the
    bisection's answer (the consumer harness drives the same through seek_to_time)."""
    old, now = 946_684_800_000, 1_800_000_000_000
    stamps = [(now, m) for m in (old, now, old + 1, old + 2, old + 3)]
    probe = ScriptedProbe(stamps, answer=always(None))
    assert first_offset_at(probe, T, 0, now - 3_600_000) == 1


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[tuple[int, int]], int]:
    """Notifications published 0-3 s apart, brokers' clocks up to 2 s apart (Kafka
    timestamps out of order), each object's newest record up to 10 s before its publish
    or up to CLOCK_SKEW_MS after it; a time around them."""
    n = draw(st.integers(0, 80))
    stamps, t = [], BASE
    for _ in range(n):
        t += draw(st.integers(0, 3000))
        kafka_ts = t + draw(st.integers(-2000, 2000))
        stamps.append((kafka_ts, kafka_ts + draw(st.integers(-10_000, CLOCK_SKEW_MS))))
    ts = draw(st.integers(BASE - 20_000, t + CLOCK_SKEW_MS + 20_000))
    return stamps, ts


@settings(max_examples=300, deadline=None)
@given(partitions())
def test_property_exact_when_clocks_run_ahead_at_most_the_skew(
    case: tuple[list[tuple[int, int]], int],
) -> None:
    stamps, ts = case
    probe = ScriptedProbe(stamps)
    assert first_offset_at(probe, T, 0, ts, steps=100, window=100) == exact(stamps, ts)
    assert probe.reads == 0  # from Kafka's answer: no bisection


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=60),
    st.integers(0, 10**6),
    st.sampled_from(["kafka", "none", "zero", "beyond", "random"]),
    st.integers(-5, 100),
)
def test_property_never_earlier_than_exact_and_always_reaching(
    stamps: list[tuple[int, int]], ts: int, mode: str, garbage: int
) -> None:
    """Whatever the timestamps and whatever Kafka answers: the answer is the end or an
    object reaching ts, and never before the first one."""
    answers: dict[str, Callable[[int], int | None] | None] = {
        "kafka": None, "none": always(None), "zero": always(0),
        "beyond": always(len(stamps) + 1), "random": always(garbage),
    }  # fmt: skip
    probe = ScriptedProbe(stamps, answer=answers[mode])
    got = first_offset_at(probe, T, 0, ts, skew_ms=1000, steps=7, window=5)
    assert exact(stamps, ts) <= got <= len(stamps)
    assert got == len(stamps) or stamps[got][1] >= ts
