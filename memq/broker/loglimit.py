"""Log lines bounded per cause: a misdirected client that retries every second (a Kafka
consumer on the Kafka port, a Kafka client on the MemQ port) gets one line per
``interval``, and the next line says how many were left out."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

__all__ = ["LogLimiter"]


class LogLimiter:
    """At most one line per key per ``interval`` seconds (``max_keys`` keys remembered,
    the oldest forgotten first)."""

    def __init__(
        self,
        interval: float = 60.0,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.max_keys = max_keys
        self._clock = clock
        #: key -> (when its last line was logged, lines left out since)
        self._seen: OrderedDict[Hashable, tuple[float, int]] = OrderedDict()

    def log(
        self, logger: logging.Logger, level: int, key: Hashable, msg: str, *args: object
    ) -> bool:
        """Log ``msg % args`` unless ``key`` was logged in the last ``interval``; True when
        it was logged."""
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.interval:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        left_out = last[1] if last is not None else 0
        self._seen[key] = (now, 0)
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_keys:
            self._seen.popitem(last=False)
        if left_out:
            msg += " (%d more like this in the last %.0f s, not logged)"
            args = (*args, left_out, now - last[0]) if last is not None else args
        logger.log(level, msg, *args)
        return True
