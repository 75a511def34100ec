"""Client statistics: periodic callbacks and a Prometheus collector.

Producers and consumers keep counters in a plain dict (``producer.stats``,
``consumer.stats_dict()``; every key is documented in docs/clients.md). Two ways out:

- ``statistics.interval.ms`` with a ``stats_cb`` (as confluent-kafka users know it): the
  client calls ``stats_cb(stats_dict)`` every interval from a background thread;
- :class:`StatsCollector`: register it in a Prometheus registry (yours, or the default
  one served by ``prometheus_client.start_http_server``) and every scrape reads the
  counters, as ``memq_<role>_<key>`` gauges labelled with the client id; nested maps
  (``errors``) become one labelled gauge each.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from memq.errors import ConfigError

__all__ = ["StatsCollector", "StatsTicker", "split_stats_cb", "stats_ticker"]

StatsCallback = Callable[[dict[str, Any]], Any]


def split_stats_cb(config: Any, kwargs: dict[str, Any]) -> tuple[Any, StatsCallback | None]:
    """Take ``stats_cb`` out of a client's settings (mapping or keyword) before they are
    validated; returns (settings, callback)."""
    cb = kwargs.pop("stats_cb", None)
    if isinstance(config, Mapping) and "stats_cb" in config:
        cb = cb or config["stats_cb"]
        config = {k: v for k, v in config.items() if k != "stats_cb"}
    if cb is not None and not callable(cb):
        raise ConfigError("stats_cb must be a callable taking the stats dict")
    return config, cb


def stats_ticker(
    source: Callable[[], Mapping[str, Any]],
    callback: StatsCallback | None,
    interval_ms: int,
    name: str,
) -> StatsTicker | None:
    """A ticker when both a callback and an interval are set; an error when only one is."""
    if callback is None:
        return None
    if interval_ms <= 0:
        raise ConfigError("stats_cb is set but statistics.interval.ms is 0: set the interval")
    return StatsTicker(source, callback, interval_ms / 1000, name)


log = logging.getLogger(__name__)


class StatsCollector(Collector):
    """Prometheus collector over a client's stats dict (``source()`` per scrape)."""

    def __init__(self, source: Callable[[], Mapping[str, Any]], role: str, client_id: str) -> None:
        self.source = source
        self.role = role
        self.client_id = client_id

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            stats = self.source()
        except Exception as e:  # a closed client: nothing to report
            log.debug("no stats from %s %s: %s", self.role, self.client_id, e)
            return
        for key, value in sorted(stats.items()):
            name = f"memq_{self.role}_{key}"
            if isinstance(value, Mapping):
                g = GaugeMetricFamily(
                    name, f"MemQ {self.role} {key} by kind", labels=["client_id", "kind"]
                )
                for kind, v in sorted(value.items()):
                    g.add_metric([self.client_id, str(kind)], float(v))
                yield g
            elif isinstance(value, int | float) and not isinstance(value, bool):
                g = GaugeMetricFamily(name, f"MemQ {self.role} {key}", labels=["client_id"])
                g.add_metric([self.client_id], float(value))
                yield g


class StatsTicker:
    """Calls ``callback(source())`` every ``interval_s`` on a daemon thread until stopped.

    A callback that raises is logged and the ticker goes on."""

    def __init__(
        self,
        source: Callable[[], Mapping[str, Any]],
        callback: Callable[[dict[str, Any]], Any],
        interval_s: float,
        name: str,
    ) -> None:
        self.source = source
        self.callback = callback
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.callback(dict(self.source()))
            except Exception:
                log.exception("stats_cb raised")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5)
