"""Process helpers for the local stack: spawn detached, identify by pid + start time, stop.

A pid alone is not an identity (pids are reused), so every process we start is
recorded with its kernel start time (``/proc/<pid>/stat`` field 22) and only a
process with both the same pid and start time is ever signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from memq.errors import DevStackError

__all__ = [
    "SPAWN_LOG_ENV",
    "ProcessRef",
    "free_port",
    "is_alive",
    "port_open",
    "run_checked",
    "spawn",
    "spawned",
    "stop",
    "wait_for",
]

T = TypeVar("T")

#: When set, every process :func:`spawn` starts is appended to this file as a line
#: ``<pid> <start time>``, by whichever process spawns it (``memq dev up`` in a
#: subprocess too): the pytest plugin stops what is left at the end of a test session.
SPAWN_LOG_ENV = "MEMQ_SPAWN_LOG"


@dataclass(frozen=True, slots=True)
class ProcessRef:
    pid: int
    start_time: int | None  # kernel start time in clock ticks; None where /proc is missing


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def start_time_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def spawn(
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRef]:
    """Start ``argv`` in its own session with stdout/stderr appended to ``log_path``.

    The process outlives the caller (``memq dev up`` returns while servers run).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            raise DevStackError(f"cannot start {argv[0]}: {e}") from e
    ref = ProcessRef(proc.pid, start_time_of(proc.pid))
    if spawn_log := os.environ.get(SPAWN_LOG_ENV):
        with open(spawn_log, "a") as f:
            f.write(f"{ref.pid} {ref.start_time if ref.start_time is not None else '-'}\n")
    return proc, ref


def spawned(spawn_log: Path) -> list[ProcessRef]:
    """The processes a :data:`SPAWN_LOG_ENV` file lists."""
    try:
        lines = spawn_log.read_text().splitlines()
    except FileNotFoundError:
        return []
    refs = []
    for line in lines:
        pid, start = line.split()
        refs.append(ProcessRef(int(pid), None if start == "-" else int(start)))
    return refs


def is_alive(ref: ProcessRef) -> bool:
    """Whether the very process ``ref`` names is running (zombies count as dead)."""
    with contextlib.suppress(ChildProcessError, OSError):
        pid, _ = os.waitpid(ref.pid, os.WNOHANG)  # reap it if it is our exited child
        if pid == ref.pid:
            return False
    fields = _stat_fields(ref.pid)
    if fields is None:
        if Path("/proc/self/stat").exists():
            return False
        try:
            os.kill(ref.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in {"Z", "X"}:
        return False
    return ref.start_time is None or int(fields[19]) == ref.start_time


def _signal(ref: ProcessRef, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        # Our servers lead their own session/process group: signal the whole group.
        if os.getpgid(ref.pid) == ref.pid:
            os.killpg(ref.pid, sig)
        else:
            os.kill(ref.pid, sig)


def stop(ref: ProcessRef, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; True if it had to be killed."""
    if not is_alive(ref):
        return False
    _signal(ref, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(ref):
            return False
        time.sleep(0.05)
    _signal(ref, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while is_alive(ref) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_alive(ref):
        raise DevStackError(f"process {ref.pid} survived SIGKILL")
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (callers retry if another process takes it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    abort: Callable[[], str | None] | None = None,
) -> T:
    """Poll ``probe`` until it returns a non-None value or ``timeout`` passes.

    ``abort`` is checked each round; a non-None string stops the wait with that reason
    (e.g. the server process died).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if abort is not None and (reason := abort()) is not None:
            raise DevStackError(f"{what}: {reason}")
        if time.monotonic() >= deadline:
            raise DevStackError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(interval)


def run_checked(argv: Sequence[str], *, what: str, timeout: float) -> str:
    """Run a short command to completion; its output, or a DevStackError naming ``what``
    with the last lines it printed."""
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise DevStackError(f"{what}: no answer after {timeout:.0f} s") from e
    except OSError as e:
        raise DevStackError(f"{what}: cannot start {argv[0]}: {e}") from e
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise DevStackError(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout
