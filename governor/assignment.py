"""Which brokers write which topic: a pure, deterministic, capacity-aware assignment.

``assign(topics, brokers, current)`` decides, for every topic, its set of writers:

- how many: ``ceil(expected_mbps / (reference capacity x target utilisation))``,
  at least the topic's ``min_writers`` (for availability), at most the broker count;
  each writer is expected to take an equal share of the topic's traffic;
- which: brokers ranked by weighted rendezvous hashing (score = -capacity /
  ln(hash(topic, broker))), so adding or removing a broker moves only the topics whose
  top-ranked brokers change; picked in rank order, first from racks not used yet by
  the topic, and never past a broker's capacity;
- when the cluster lacks capacity for a topic: its current live writers are kept if
  they are at least as many as a fresh pick could place (no thrashing), and the
  missing capacity is reported as a shortfall instead of overloading anyone.

Memory is a second dimension: each writer of a topic is planned to hold
:func:`memory_demand` bytes of its broker's batch buffer pool (about two seconds of its
share of the ingest, at least one small buffer, at most ``ring_size`` full batches), and a
broker takes writers only while their demands fit in 80% of its pool. A topic that fits
nowhere is reported in ``shortfall`` (MB/s it could not place) and ``unplaced`` (writers
missing), never placed on a broker that cannot hold it.

The algorithm is chosen by name (:data:`ALGORITHMS`, the brokers' ``zookeeper.assignment``
setting): ``weighted-rendezvous`` (default, above: stable under membership changes) or
``least-loaded`` (each writer on the broker with the most free capacity: evens out load,
moves more topics when brokers come and go).

Pure: no I/O, no clock, no randomness; the same inputs give the same output whatever
their order. The governor's ZooKeeper loop only calls these functions.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ALGORITHMS",
    "Assignment",
    "BrokerSpec",
    "TopicSpec",
    "assign",
    "assign_least_loaded",
    "memory_demand",
    "rendezvous_score",
    "writers_needed",
]

#: The smallest batch buffer a writer holds while its batch is open (64 KiB + index).
SMALL_BUFFER = 100 * 1024
#: Share of a broker's buffer pool the plan may fill (the rest absorbs bursts).
MEMORY_UTILISATION = 0.8
INF = float("inf")


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    id: str
    capacity_mbps: float
    rack: str | None = None
    #: The broker's batch buffer pool (memory_limit_bytes); inf: not reported.
    memory_bytes: float = INF


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    #: Ingest to plan for: measured when the brokers reported it, else declared.
    expected_mbps: float
    min_writers: int = 1
    batch_bytes: int = 8 * 1024 * 1024
    ring_size: int = 4


def memory_demand(topic: TopicSpec, share_mbps: float) -> float:
    """Planned pool bytes of one writer taking ``share_mbps`` of ``topic``: two seconds of
    ingest (the open batch and one uploading), within [one small buffer, ring_size x
    batch.bytes]."""
    want = 2.0 * share_mbps * 1_000_000
    return min(max(want, SMALL_BUFFER), topic.ring_size * topic.batch_bytes)


@dataclass(frozen=True)
class Assignment:
    #: topic -> writer broker ids, in rendezvous rank order
    writers: dict[str, tuple[str, ...]]
    #: topic -> MB/s the cluster could not place
    shortfall: dict[str, float] = field(default_factory=dict)
    #: broker -> MB/s assigned to it
    load: dict[str, float] = field(default_factory=dict)
    #: topic -> writers it needed but could not get (capacity or memory)
    unplaced: dict[str, int] = field(default_factory=dict)
    #: broker -> planned batch buffer bytes of its writers
    memory: dict[str, float] = field(default_factory=dict)

    def topics_of(self, broker: str) -> set[str]:
        return {t for t, ws in self.writers.items() if broker in ws}


def rendezvous_score(topic: str, broker: BrokerSpec) -> float:
    """Weighted rendezvous (HRW) score: higher ranks first; weight = capacity."""
    digest = hashlib.blake2b(f"{topic}\x00{broker.id}".encode(), digest_size=8).digest()
    u = (int.from_bytes(digest, "big") + 1) / (2**64 + 1)  # uniform in (0, 1)
    return -broker.capacity_mbps / math.log(u)


def writers_needed(
    topic: TopicSpec, brokers: int, reference_capacity: float, utilisation: float = 0.8
) -> int:
    if brokers <= 0:
        return 0
    by_traffic = math.ceil(topic.expected_mbps / (reference_capacity * utilisation))
    return max(1, min(brokers, max(by_traffic, topic.min_writers)))


def _fits(b: BrokerSpec, share: float, mem: float, load: Mapping[str, float],
          used: Mapping[str, float]) -> bool:  # fmt: skip
    return (
        load[b.id] + share <= b.capacity_mbps + 1e-9
        and used[b.id] + mem <= b.memory_bytes * MEMORY_UTILISATION
    )


def _pick(
    ranked: list[BrokerSpec],
    n: int,
    share: float,
    mem: float,
    load: Mapping[str, float],
    used: Mapping[str, float],
) -> list[BrokerSpec]:
    chosen: list[BrokerSpec] = []
    racks: set[str | None] = set()
    for spread in (True, False):  # first one writer per rack, then fill from any rack
        for b in ranked:
            if len(chosen) == n:
                return chosen
            if b in chosen or not _fits(b, share, mem, load, used):
                continue
            if spread and b.rack is not None and b.rack in racks:
                continue
            chosen.append(b)
            racks.add(b.rack)
    return chosen


Ranking = Callable[[TopicSpec, list[BrokerSpec], Mapping[str, float]], list[BrokerSpec]]


def _by_rendezvous(
    t: TopicSpec, brokers: list[BrokerSpec], _load: Mapping[str, float]
) -> list[BrokerSpec]:
    return sorted(brokers, key=lambda b: (-rendezvous_score(t.name, b), b.id))


def _by_free_capacity(
    _t: TopicSpec, brokers: list[BrokerSpec], load: Mapping[str, float]
) -> list[BrokerSpec]:
    return sorted(brokers, key=lambda b: (-(b.capacity_mbps - load[b.id]), b.id))


def assign(
    topics: list[TopicSpec],
    brokers: list[BrokerSpec],
    current: Mapping[str, tuple[str, ...] | list[str]] | None = None,
    utilisation: float = 0.8,
) -> Assignment:
    """Weighted rendezvous placement (the default algorithm)."""
    return _assign(topics, brokers, current, utilisation, _by_rendezvous)


def assign_least_loaded(
    topics: list[TopicSpec],
    brokers: list[BrokerSpec],
    current: Mapping[str, tuple[str, ...] | list[str]] | None = None,
    utilisation: float = 0.8,
) -> Assignment:
    """Each topic's writers on the brokers with the most free capacity at that point."""
    return _assign(topics, brokers, current, utilisation, _by_free_capacity)


def _assign(
    topics: list[TopicSpec],
    brokers: list[BrokerSpec],
    current: Mapping[str, tuple[str, ...] | list[str]] | None,
    utilisation: float,
    rank: Ranking,
) -> Assignment:
    current = current or {}
    by_id = {b.id: b for b in sorted(brokers, key=lambda b: b.id)}
    if not by_id:
        return Assignment(
            {t.name: () for t in topics},
            {t.name: t.expected_mbps for t in topics if t.expected_mbps > 0},
            {},
            {t.name: max(1, t.min_writers) for t in topics},
        )
    caps = sorted(b.capacity_mbps for b in by_id.values())
    reference = caps[len(caps) // 2]  # the median broker's capacity
    load = dict.fromkeys(by_id, 0.0)
    used = dict.fromkeys(by_id, 0.0)  # planned pool bytes
    writers: dict[str, tuple[str, ...]] = {}
    shortfall: dict[str, float] = {}
    unplaced: dict[str, int] = {}
    # Biggest topics first (they are hardest to place), then by name: deterministic.
    for t in sorted(topics, key=lambda t: (-t.expected_mbps, t.name)):
        n = writers_needed(t, len(by_id), reference, utilisation)
        share = t.expected_mbps / n
        mem = memory_demand(t, share)
        ranked = rank(t, list(by_id.values()), load)
        chosen = _pick(ranked, n, share, mem, load, used)
        if len(chosen) < n:
            # Not enough room: keep the live current writers if that is no worse.
            kept = [by_id[b] for b in current.get(t.name, ()) if b in by_id]
            kept = [b for b in kept if _fits(b, share, mem, load, used)]
            if len(kept) >= len(chosen):
                chosen = sorted(kept, key=ranked.index)
            shortfall[t.name] = round((n - len(chosen)) * share, 6)
            unplaced[t.name] = n - len(chosen)
        for b in chosen:
            load[b.id] += share
            used[b.id] += mem
        writers[t.name] = tuple(b.id for b in chosen)
    return Assignment(
        writers,
        shortfall,
        {b: round(v, 6) for b, v in load.items()},
        unplaced,
        {b: round(v) for b, v in used.items()},
    )


#: Assignment algorithms by name (the brokers' ``zookeeper.assignment`` setting).
ALGORITHMS: dict[str, Callable[..., Assignment]] = {
    "weighted-rendezvous": assign,
    "least-loaded": assign_least_loaded,
}
