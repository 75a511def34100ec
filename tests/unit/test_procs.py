from __future__ import annotations

import subprocess
import sys
import time

import pytest

from memq.devstack.procs import ProcessRef, free_port, is_alive, spawn, stop, wait_for
from memq.errors import DevStackError


def test_spawn_stop_and_identity(tmp_path):
    proc, ref = spawn(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        tmp_path / "p.log",
    )
    assert is_alive(ref)
    wait_for(
        lambda: True if "up" in (tmp_path / "p.log").read_text() else None,
        timeout=10,
        what="child output",
    )
    # Same pid but another start time is a different process: never signalled.
    assert not is_alive(ProcessRef(ref.pid, (ref.start_time or 0) + 1))
    assert stop(ref, timeout=5) is False
    assert not is_alive(ref)
    assert proc.poll() is not None


def test_stop_escalates_to_sigkill(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('x', flush=True); time.sleep(60)"
    _, ref = spawn([sys.executable, "-c", code], tmp_path / "p.log")
    wait_for(
        lambda: True if "x" in (tmp_path / "p.log").read_text() else None,
        timeout=10,
        what="child ready",
    )
    t0 = time.monotonic()
    assert stop(ref, timeout=0.5) is True
    assert time.monotonic() - t0 < 5
    assert not is_alive(ref)


def test_wait_for_deadline_and_abort():
    with pytest.raises(DevStackError, match="not ready"):
        wait_for(lambda: None, timeout=0.2, what="never")
    with pytest.raises(DevStackError, match="died"):
        wait_for(lambda: None, timeout=10, what="x", abort=lambda: "died")


def test_free_port_is_bindable():
    import socket

    p = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))


def test_spawn_log_lists_what_a_subprocess_spawns(tmp_path, monkeypatch):
    from memq.devstack.procs import SPAWN_LOG_ENV, spawned

    log = tmp_path / "spawned.txt"
    monkeypatch.setenv(SPAWN_LOG_ENV, str(log))
    code = (
        "import sys; from pathlib import Path; from memq.devstack.procs import spawn; "
        "_, r = spawn([sys.executable, '-c', 'import time; time.sleep(60)'], Path(sys.argv[1])); "
        "print(r.pid, r.start_time)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "child.log")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )  # the grandchild outlives its parent, as `memq dev up`'s servers do
    pid, start = (int(x) for x in out.stdout.split())
    (ref,) = spawned(log)
    assert ref == ProcessRef(pid, start) and is_alive(ref)
    stop(ref, timeout=5)
    assert not is_alive(ref)
    assert spawned(tmp_path / "none.txt") == []
