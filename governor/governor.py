"""The governor: one broker, elected through ZooKeeper, assigns topics to brokers.

Every broker runs a :class:`Governor`; a kazoo ``Election`` lets exactly one of them
lead. The leader recomputes the assignment (:func:`governor.assignment.assign`) whenever
a broker comes or goes or a topic is created, changed or deleted (ZooKeeper watches),
and every ``resync_s`` as a safety net, and writes it with a compare-and-set on the
node's version, so a stale governor can never overwrite a newer decision. A governor
whose session is lost (or suspended past its term) steps down at once; the election
then picks another.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from memq.governor.assignment import ALGORITHMS, BrokerSpec, TopicSpec
from memq.governor.zk import (
    AssignmentRecord,
    BrokerRecord,
    Layout,
    ZkClient,
    dumps,
    now_ms,
    read_json,
)

__all__ = ["MEASURED_HEADROOM", "REPORT_FRESH_MS", "Governor", "measured_mbps"]

#: Plan a measured topic for this much more than it carries (room to grow between looks).
MEASURED_HEADROOM = 1.25
#: A broker's load report counts for this long (brokers report every 10 s).
REPORT_FRESH_MS = 60_000


def measured_mbps(
    topic: str, writers: list[str], records: list[BrokerRecord], now: int
) -> float | None:
    """The topic's ingest as its current writers measured it (MB/s, summed), or None
    when any of them has no fresh report (then the declared expected_mbps is used)."""
    if not writers:
        return None
    by_id = {r.id: r for r in records}
    total = 0.0
    for w in writers:
        r = by_id.get(w)
        if r is None or now - r.reported_at > REPORT_FRESH_MS or topic not in r.topic_mbps:
            return None
        total += r.topic_mbps[topic]
    return total


def _close(a: dict[str, float], b: dict[str, float]) -> bool:
    """Loads equal within 10% (measured loads move a little all the time: no rewrite)."""
    if a.keys() != b.keys():
        return False
    return all(abs(a[k] - b[k]) <= 0.1 * max(abs(a[k]), abs(b[k]), 0.01) for k in a)


log = logging.getLogger(__name__)


class Governor:
    def __init__(
        self,
        zk: ZkClient,
        layout: Layout,
        broker_id: str,
        *,
        resync_s: float = 30.0,
        on_leadership: Callable[[bool], None] | None = None,
        algorithm: str = "weighted-rendezvous",
    ) -> None:
        self.zk = zk
        self.layout = layout
        self.broker_id = broker_id
        self.resync_s = resync_s
        self.on_leadership = on_leadership
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown assignment algorithm {algorithm!r}: {sorted(ALGORITHMS)}")
        self.algorithm = algorithm
        self.leading = False
        self.recomputes = 0
        self._term: object | None = None
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._term_over = threading.Event()
        self._election = zk.Election(layout.election, identifier=broker_id)
        self._thread = threading.Thread(target=self._run, name="memq-governor", daemon=True)

    def start(self) -> None:
        self.zk.add_listener(self._on_state)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._term_over.set()
        self._changed.set()
        try:
            self._election.cancel()
        except Exception as e:  # the session may already be gone
            log.debug("cancelling the election: %s", e)
        self._thread.join(timeout)
        self.zk.remove_listener(self._on_state)

    def contenders(self) -> list[str]:
        try:
            return [str(c) for c in self._election.contenders()]
        except Exception:
            return []

    def _on_state(self, state: str) -> None:
        if state == "LOST" and self.leading:
            log.warning("governor %s lost its ZooKeeper session: stepping down", self.broker_id)
            self._term_over.set()
            self._changed.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._election.run(self._lead)
            except Exception as e:
                if self._stop.is_set():
                    return
                log.warning("governor election interrupted (%s): rejoining", e)
                self._stop.wait(1.0)

    # --- leading ----------------------------------------------------------------------

    def _lead(self) -> None:
        self._term_over.clear()
        self.leading = True
        log.info("broker %s is the governor", self.broker_id)
        if self.on_leadership is not None:
            self.on_leadership(True)
        term = object()
        self._term = term
        try:
            self.zk.ChildrenWatch(self.layout.brokers, self._watch(term))
            self.zk.ChildrenWatch(self.layout.topics, self._watch_topics(term))
            while not self._stop.is_set() and not self._term_over.is_set():
                self._changed.clear()
                try:
                    self.recompute()
                except Exception:
                    log.exception("governor could not recompute assignments; retrying")
                self._changed.wait(self.resync_s)
        finally:
            self.leading = False
            self._term = None
            if self.on_leadership is not None:
                self.on_leadership(False)
            log.info("broker %s stopped governing", self.broker_id)

    def _watch(self, term: object) -> Callable[[Any], bool]:
        def changed(_children: Any) -> bool:
            if self._term is not term:
                return False  # a past term: drop this watch
            self._changed.set()
            return True

        return changed

    def _watch_topics(self, term: object) -> Callable[[Any], bool]:
        watched: set[str] = set()

        def changed(children: list[str]) -> bool:
            if self._term is not term:
                return False
            for name in set(children) - watched:  # config changes of each topic, too
                watched.add(name)
                self.zk.DataWatch(self.layout.topic(name), self._data_watch(term))
            self._changed.set()
            return True

        return changed

    def _data_watch(self, term: object) -> Callable[..., bool]:
        def changed(_data: Any, _stat: Any, *_event: Any) -> bool:
            if self._term is not term:
                return False
            self._changed.set()
            return True

        return changed

    def recompute(self) -> bool:
        """Read brokers and topics, assign, write if anything changed; True when written."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        self.recomputes += 1
        records = []
        for bid in self.zk.get_children(self.layout.brokers):
            data, _ = read_json(self.zk, self.layout.broker(bid))
            if data:
                records.append(BrokerRecord.model_validate(data))
        brokers = [
            BrokerSpec(r.id, r.capacity_mbps, r.rack, float(r.pool_limit_bytes or float("inf")))
            for r in records
        ]
        raw, stat = read_json(self.zk, self.layout.assignments)
        current = AssignmentRecord.model_validate(raw or {})
        topics = []
        measured_topics: list[str] = []
        for name in self.zk.get_children(self.layout.topics):
            data, _ = read_json(self.zk, self.layout.topic(name))
            if not data:
                continue
            declared = float(data.get("expected_mbps", 1.0))
            rate = measured_mbps(name, current.writers.get(name, []), records, now_ms())
            if rate is not None:
                measured_topics.append(name)
            topics.append(
                TopicSpec(
                    name,
                    declared if rate is None else max(rate * MEASURED_HEADROOM, 0.001),
                    int(data.get("min_writers", 1)),
                    int((data.get("batch") or {}).get("bytes", 8 << 20)),
                    int(data.get("ring_size", 4)),
                )
            )
        algorithm = ALGORITHMS[self.algorithm]
        result = algorithm(topics, brokers, {t: tuple(w) for t, w in current.writers.items()})
        new = AssignmentRecord(
            version=current.version + 1,
            governor=self.broker_id,
            updated_at=now_ms(),
            writers={t: list(w) for t, w in result.writers.items()},
            shortfall=result.shortfall,
            load=result.load,
            unplaced=result.unplaced,
            memory=result.memory,
            planned_mbps={t.name: round(t.expected_mbps, 3) for t in topics},
            measured=sorted(measured_topics),
        )
        same = (new.writers, new.shortfall, new.unplaced) == (
            current.writers,
            current.shortfall,
            current.unplaced,
        ) and _close(new.load, current.load)
        if same and current.governor == self.broker_id:
            return False
        try:
            if stat is None:
                self.zk.create(self.layout.assignments, dumps(new), makepath=True)
            else:
                self.zk.set(self.layout.assignments, dumps(new), version=stat.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            log.info("assignments changed under the governor: recomputing")
            self._changed.set()
            return False
        if result.shortfall:
            log.warning(
                "cluster lacks capacity or memory: shortfall (MB/s) %s, writers unplaced %s",
                result.shortfall,
                result.unplaced,
            )
        log.info("assignment v%d: %s", new.version, new.writers)
        return True
