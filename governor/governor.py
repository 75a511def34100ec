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

from memq.governor.assignment import BrokerSpec, TopicSpec, assign
from memq.governor.zk import (
    AssignmentRecord,
    BrokerRecord,
    Layout,
    ZkClient,
    dumps,
    now_ms,
    read_json,
)

__all__ = ["Governor"]

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
    ) -> None:
        self.zk = zk
        self.layout = layout
        self.broker_id = broker_id
        self.resync_s = resync_s
        self.on_leadership = on_leadership
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
        brokers = []
        for bid in self.zk.get_children(self.layout.brokers):
            data, _ = read_json(self.zk, self.layout.broker(bid))
            if data:
                rec = BrokerRecord.model_validate(data)
                brokers.append(BrokerSpec(rec.id, rec.capacity_mbps, rec.rack))
        topics = []
        for name in self.zk.get_children(self.layout.topics):
            data, _ = read_json(self.zk, self.layout.topic(name))
            if data:
                topics.append(
                    TopicSpec(
                        name,
                        float(data.get("expected_mbps", 1.0)),
                        int(data.get("min_writers", 1)),
                    )
                )
        raw, stat = read_json(self.zk, self.layout.assignments)
        current = AssignmentRecord.model_validate(raw or {})
        result = assign(topics, brokers, {t: tuple(w) for t, w in current.writers.items()})
        new = AssignmentRecord(
            version=current.version + 1,
            governor=self.broker_id,
            updated_at=now_ms(),
            writers={t: list(w) for t, w in result.writers.items()},
            shortfall=result.shortfall,
            load=result.load,
        )
        same = (new.writers, new.shortfall, new.load) == (
            current.writers,
            current.shortfall,
            current.load,
        )
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
            log.warning("cluster lacks capacity: shortfall (MB/s) %s", result.shortfall)
        log.info("assignment v%d: %s", new.version, new.writers)
        return True
