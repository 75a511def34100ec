"""Shared corruption checks: truncations and bit flips must raise MemqFormatError only."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from memq.errors import MemqFormatError


def assert_rejects(decode: Callable[[bytes], Any], data: bytes) -> None:
    """``decode(data)`` must raise a MemqFormatError subclass (and nothing else)."""
    with pytest.raises(MemqFormatError):
        decode(data)


def every_truncation(decode: Callable[[bytes], Any], data: bytes) -> None:
    for n in range(len(data)):
        assert_rejects(decode, data[:n])


def every_bit_flip(decode: Callable[[bytes], Any], data: bytes) -> None:
    buf = bytearray(data)
    for i in range(len(buf)):
        for bit in range(8):
            buf[i] ^= 1 << bit
            assert_rejects(decode, bytes(buf))
            buf[i] ^= 1 << bit


def random_flips(decode: Callable[[bytes], Any], data: bytes, seed: int, rounds: int = 200) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        buf = bytearray(data)
        for _ in range(rng.randint(2, 16)):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        if bytes(buf) != data:
            assert_rejects(decode, bytes(buf))
