"""Options shared by several commands, and the validators that turn a bad value into a
one-line usage error (exit 2) before anything runs."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

import typer

__all__ = [
    "STATE_DIR",
    "StopOnInterrupt",
    "acks_value",
    "compression_value",
    "http_url",
    "human_bytes",
    "key_value_pairs",
    "non_empty",
    "positive",
    "topic_name",
    "usage_error",
]

STATE_DIR = typer.Option(
    None,
    "--state-dir",
    envvar="MEMQ_STATE_DIR",
    help="Where the local stack keeps its state, pids and logs (default: .memq).",
)


@contextmanager
def usage_error(*kinds: type[Exception]) -> Iterator[None]:
    """A validator's own error (its message says what to do) -> a one-line usage error."""
    try:
        yield
    except kinds as e:
        raise typer.BadParameter(str(e)) from None


class StopOnInterrupt:
    """Ctrl-C as a request to stop at the next safe point, for commands that then finish
    what they hold (print, commit, flush) and print their summary: :attr:`requested` turns
    True; a second Ctrl-C raises KeyboardInterrupt at once. Exit with :data:`EXIT_INTERRUPTED`
    afterwards, as a shell tool stopped by SIGINT does."""

    EXIT_INTERRUPTED = 130  # 128 + SIGINT

    def __init__(self, say: Any) -> None:
        self._say = say
        self.requested = False
        self._now = False
        self._old: Any = None

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A wait that holds nothing (reading stdin, pacing): a Ctrl-C inside it raises
        KeyboardInterrupt at once, with :attr:`requested` True."""
        self._now = True
        try:
            if self.requested:
                raise KeyboardInterrupt
            yield
        finally:
            self._now = False

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        first = not self.requested
        self.requested = True
        if first:
            self._say("stopping: finishing what is in hand (Ctrl-C again to stop at once)")
        if not first or self._now:
            raise KeyboardInterrupt


def human_bytes(n: float) -> str:
    """``3,912 B``, ``1.50 MB``: decimal units, never ``0.00 MB`` for a few KB."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


#: Kafka's spellings of acks (what ``--acks`` accepts).
ACKS = ("0", "1", "all", "-1")


def topic_name(value: str) -> str:
    """A valid topic name (1-249 of A-Z a-z 0-9 . _ -), else a usage error."""
    from memq.errors import MalformedError
    from memq.formats.keys import validate_name

    with usage_error(MalformedError):
        return validate_name("topic", value)


def acks_value(value: str) -> str:
    """``0``, ``1``, ``all`` or ``-1`` (as ``all``), as Kafka accepts them."""
    v = value.strip().lower()
    if v not in ACKS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(ACKS)}")
    return "all" if v == "-1" else v


def compression_value(value: str) -> str:
    from memq.errors import MemqError
    from memq.formats.compression import parse_compression

    with usage_error(MemqError):
        parse_compression(value)
    return value


def positive(value: float | None) -> float | None:
    """A number above 0 (None: not given)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value:g} must be above 0")
    return value


def http_url(value: str | None) -> str | None:
    """An http(s)://host[:port] URL (None: not given), else a usage error (urllib and
    boto3 raise a ValueError deep inside for one without a scheme)."""
    from urllib.parse import urlsplit

    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise typer.BadParameter(f"{value!r} is not a URL: use http(s)://host:port")
    return value


def parse_time(text: str) -> int:
    """ISO-8601 (a naive time is UTC) or epoch milliseconds -> epoch ms
    (:func:`memq.formats.times.time_to_ms`), else a usage error; before 1970 too."""
    from memq.formats.times import time_to_ms

    with usage_error(ValueError):
        ms = time_to_ms(text)
    if ms < 0:
        raise typer.BadParameter(f"{text!r} is before 1970 (epoch ms must be 0 or more)")
    return ms


def time_option(value: str | None) -> str | None:
    """A --from-time/--from/--to value :func:`parse_time` accepts (None: not given)."""
    if value is not None:
        parse_time(value)
    return value


def since_window(value: str) -> str:
    """A window start the auditor accepts (a duration, ISO-8601, epoch ms; in the past),
    else a usage error (not the auditor's 400 after a round trip)."""
    import time

    from memq.audit.window import parse_since
    from memq.errors import ConfigError

    with usage_error(ConfigError):
        parse_since(value, int(time.time() * 1000))
    return value


def grace_period(value: str | None) -> str | None:
    """A duration the auditor accepts (30s, 10m; None: not given), else a usage error."""
    from memq.audit.window import parse_duration_s
    from memq.errors import ConfigError

    if value is not None:
        with usage_error(ConfigError):
            parse_duration_s(value)
    return value


def non_empty(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


BOOTSTRAP = typer.Option(
    None,
    "--bootstrap-servers",
    "-b",
    envvar="MEMQ_BOOTSTRAP",
    help="Brokers host:port,... (default: the local stack).",
)
JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")


def key_value_pairs(values: list[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` strings of a repeatable option as a dict, else a usage error."""
    out: dict[str, str] = {}
    for pair in values:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{option} {pair!r}: use KEY=VALUE")
        out[key.strip()] = value
    return out
