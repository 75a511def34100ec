from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq.errors import StorageAccessError, StorageError
from memq.retry import RetryPolicy, call_with_retries

policies = st.builds(
    RetryPolicy,
    attempts=st.integers(1, 20),
    base=st.floats(0.001, 1.0),
    cap=st.just(10.0),
    deadline=st.none() | st.floats(0.1, 100.0),
)


@given(policies, st.integers(1, 100), st.integers(0, 2**32))
def test_delay_is_bounded_by_cap_and_exponential_ceiling(policy, attempt, seed):
    d = policy.delay(attempt, random.Random(seed))
    assert 0 <= d <= min(policy.cap, policy.base * 2 ** (attempt - 1))


@given(policies, st.integers(1, 30), st.floats(0, 200), st.floats(0, 10))
def test_should_retry_respects_attempts_deadline_and_retriability(policy, attempt, elapsed, delay):
    assert not policy.should_retry(attempt, elapsed, delay, retriable=False)
    ok = policy.should_retry(attempt, elapsed, delay, retriable=True)
    out_of_attempts = attempt >= policy.attempts
    past_deadline = policy.deadline is not None and elapsed + delay >= policy.deadline
    assert ok is not (out_of_attempts or past_deadline)


def test_jitter_spreads_delays():
    rng = random.Random(1)
    delays = {round(RetryPolicy(base=1, cap=8).delay(4, rng), 3) for _ in range(50)}
    assert len(delays) > 40


def test_call_with_retries_retries_only_retriable_errors():
    calls = []
    slept = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise StorageError("503 SlowDown")
        return "ok"

    assert call_with_retries(flaky, RetryPolicy(attempts=5), sleep=slept.append) == "ok"
    assert len(calls) == 3 and len(slept) == 2

    def denied():
        calls.append(1)
        raise StorageAccessError("AccessDenied")

    calls.clear()
    with pytest.raises(StorageAccessError):
        call_with_retries(denied, RetryPolicy(attempts=5), sleep=slept.append)
    assert len(calls) == 1


def test_call_with_retries_gives_up_after_attempts():
    calls = []

    def down():
        calls.append(1)
        raise StorageError("down")

    with pytest.raises(StorageError):
        call_with_retries(down, RetryPolicy(attempts=4), sleep=lambda _s: None)
    assert len(calls) == 4


def test_invalid_policy():
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
