"""Consumer-group lag in the auditor: what it needs of a lag source, and the measuring loop.

The measurement itself is :class:`memq.consumer.groups.LagCollector` (the one ``memq
group exporter`` serves): the auditor cannot import the consumer (both are roles, see
docs/architecture.md), so its composition root (:mod:`memq.run.auditor`) builds one
from the ``lag`` section of the configuration and hands it over as a :class:`LagSource`.
The auditor measures the audited topics every ``lag.interval_s`` on a thread of its own
(:func:`measure_until`), registers the source with its ``/metrics`` registry, serves the
last measurement at ``/api/lag`` (see :func:`lag_document`) and leaves topics the
cluster no longer has out of its listing (see :meth:`LagSource.listing`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

from memq.audit.config import AuditLagConfig

__all__ = ["LagSource", "lag_document", "measure_until"]

log = logging.getLogger(__name__)

#: What the page and ``/api/lag`` say when no lag source is configured.
NOT_CONFIGURED = (
    "consumer lag is not measured: set lag.bootstrap_servers (the MemQ brokers) in the "
    "auditor configuration"
)


#: What to check when a measurement fails.
FAILED_HINT = (
    "check that the auditor reaches lag.bootstrap_servers (the MemQ brokers) and the Kafka "
    "of the topics' notifications"
)


class LagSource(Protocol):
    """A lag measurement (:class:`memq.consumer.groups.LagCollector`)."""

    def refresh(self, topics: Collection[str] | None = None) -> None:
        """Measure the groups on ``topics`` (all MemQ topics: None); never raises."""

    def snapshot(self) -> dict[str, Any]:
        """The last measurement: ``groups``, ``measured_ms``, ``error``, ``errors``."""
        ...

    def collect(self) -> Iterable[Any]:
        """Prometheus metric families of the last measurement."""
        ...

    def listing(self) -> tuple[frozenset[str], int] | None:
        """The MemQ topics the cluster had at the last measurement, and when (epoch ms);
        None before one."""
        ...

    def close(self) -> None:
        """Release the Kafka clients (never while :meth:`refresh` runs)."""
        ...


def lag_document(source: LagSource | None, config: AuditLagConfig) -> dict[str, Any]:
    """``/api/lag``: the last measurement with the settings it was taken with.

    ``enabled`` false: no source (``error`` says what to set); ``measured_ms`` null and no
    ``error``: the first measurement is under way; ``error``: the last one failed (one
    line, ``ErrorType: message``, with a ``hint``; ``groups`` are then the last good
    measurement's)."""
    doc: dict[str, Any] = {
        "enabled": source is not None,
        "interval_s": config.interval_s,
        "group_patterns": list(config.groups),
        "topics": list(config.topics),
    }
    if source is None:
        none: dict[str, Any] = {"measured_ms": None, "error": NOT_CONFIGURED, "errors": 0}
        return {**doc, **none, "groups": [], "hint": None}
    snap = source.snapshot()
    return {**doc, **snap, "hint": FAILED_HINT if snap.get("error") else None}


def measure_until(
    source: LagSource,
    config: AuditLagConfig,
    stop: threading.Event,
    audited: Callable[[], Collection[str]],
) -> None:
    """Refresh ``source`` every ``config.interval_s`` until ``stop`` is set (the
    configured topics, or by default the ``audited`` ones, the store's), then close it:
    the target of the auditor's lag thread, so the source's clients are made, used and
    released on that one thread, and a measurement under way when the auditor stops is
    never waited for (the thread is a daemon; each request has its deadline)."""
    try:
        while not stop.is_set():
            try:
                source.refresh(set(config.topics) if config.topics else set(audited()))
            except Exception:  # the source reports its own failures; this is a bug
                log.exception("measuring consumer lag failed")
            stop.wait(config.interval_s)
    finally:
        try:
            source.close()
        except Exception:
            log.exception("closing the consumer lag clients failed")
