"""Retry decisions as pure functions: bounded attempts, full-jitter exponential backoff.

The loops that retry (S3 uploads, notification publishes, producer requests) only
call :meth:`RetryPolicy.delay` and :meth:`RetryPolicy.should_retry`; the decisions
themselves are side-effect free and property-tested.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from memq.errors import MemqError

__all__ = ["RetryPolicy", "call_with_retries"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` total tries; delays grow from ``base`` to ``cap`` seconds, fully jittered.

    ``deadline`` (seconds from the first try) bounds the whole operation: no retry
    starts once its delay would end past it.
    """

    attempts: int = 5
    base: float = 0.1
    cap: float = 5.0
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base <= 0 or self.cap < self.base:
            raise ValueError(f"invalid retry policy {self}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Sleep before try number ``attempt + 1`` (``attempt`` >= 1 tries already failed).

        Full jitter (AWS architecture blog): uniform in [0, min(cap, base * 2**(attempt-1))].
        """
        ceiling = min(self.cap, self.base * (2 ** min(attempt - 1, 62)))
        return (rng or random).uniform(0.0, ceiling)

    def should_retry(self, attempt: int, elapsed: float, delay: float, retriable: bool) -> bool:
        """Whether to try again after ``attempt`` failed tries, ``elapsed`` seconds in."""
        if not retriable or attempt >= self.attempts:
            return False
        return self.deadline is None or elapsed + delay < self.deadline


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    is_retriable: Callable[[BaseException], bool] = lambda e: (
        isinstance(e, MemqError) and e.retriable
    ),
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``fn`` until it succeeds or the policy says stop; re-raises the last error."""
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as e:
            delay = policy.delay(attempt)
            if not policy.should_retry(attempt, time.monotonic() - start, delay, is_retriable(e)):
                raise
            if on_retry is not None:
                on_retry(attempt, e, delay)
            sleep(delay)
