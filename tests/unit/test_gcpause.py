"""The GC pause used around bulk decoding nests and always restores the collector."""

from __future__ import annotations

import gc
import threading

import pytest

from memq.formats.gcpause import gc_paused


def test_pause_nests_and_restores() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause is still running
    assert gc.isenabled()


def test_restored_after_an_exception() -> None:
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_keeps_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_threads_end_enabled() -> None:
    inside = threading.Barrier(2)
    leave = threading.Event()

    def worker() -> None:
        with gc_paused():
            inside.wait(10)
            leave.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    with gc_paused():
        inside.wait(10)
    assert not gc.isenabled()  # the other thread is still decoding
    leave.set()
    t.join(10)
    assert gc.isenabled()
