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

Pure: no I/O, no clock, no randomness; the same inputs give the same output whatever
their order. The governor's ZooKeeper loop only calls this function.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Assignment", "BrokerSpec", "TopicSpec", "assign", "rendezvous_score", "writers_needed"]


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    id: str
    capacity_mbps: float
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    expected_mbps: float
    min_writers: int = 1


@dataclass(frozen=True)
class Assignment:
    #: topic -> writer broker ids, in rendezvous rank order
    writers: dict[str, tuple[str, ...]]
    #: topic -> MB/s the cluster could not place
    shortfall: dict[str, float] = field(default_factory=dict)
    #: broker -> MB/s assigned to it
    load: dict[str, float] = field(default_factory=dict)

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


def _pick(
    ranked: list[BrokerSpec], n: int, share: float, load: Mapping[str, float]
) -> list[BrokerSpec]:
    chosen: list[BrokerSpec] = []
    racks: set[str | None] = set()
    for spread in (True, False):  # first one writer per rack, then fill from any rack
        for b in ranked:
            if len(chosen) == n:
                return chosen
            if b in chosen or load[b.id] + share > b.capacity_mbps + 1e-9:
                continue
            if spread and b.rack is not None and b.rack in racks:
                continue
            chosen.append(b)
            racks.add(b.rack)
    return chosen


def assign(
    topics: list[TopicSpec],
    brokers: list[BrokerSpec],
    current: Mapping[str, tuple[str, ...] | list[str]] | None = None,
    utilisation: float = 0.8,
) -> Assignment:
    current = current or {}
    by_id = {b.id: b for b in sorted(brokers, key=lambda b: b.id)}
    if not by_id:
        return Assignment(
            {t.name: () for t in topics},
            {t.name: t.expected_mbps for t in topics if t.expected_mbps > 0},
            {},
        )
    caps = sorted(b.capacity_mbps for b in by_id.values())
    reference = caps[len(caps) // 2]  # the median broker's capacity
    load = dict.fromkeys(by_id, 0.0)
    writers: dict[str, tuple[str, ...]] = {}
    shortfall: dict[str, float] = {}
    # Biggest topics first (they are hardest to place), then by name: deterministic.
    for t in sorted(topics, key=lambda t: (-t.expected_mbps, t.name)):
        n = writers_needed(t, len(by_id), reference, utilisation)
        share = t.expected_mbps / n
        ranked = sorted(by_id.values(), key=lambda b: (-rendezvous_score(t.name, b), b.id))
        chosen = _pick(ranked, n, share, load)
        if len(chosen) < n:
            # Not enough room: keep the live current writers if that is no worse.
            kept = [by_id[b] for b in current.get(t.name, ()) if b in by_id]
            kept = [b for b in kept if load[b.id] + share <= b.capacity_mbps + 1e-9]
            if len(kept) >= len(chosen):
                chosen = sorted(kept, key=ranked.index)
            shortfall[t.name] = round((n - len(chosen)) * share, 6)
        for b in chosen:
            load[b.id] += share
        writers[t.name] = tuple(b.id for b in chosen)
    return Assignment(writers, shortfall, {b: round(v, 6) for b, v in load.items()})
