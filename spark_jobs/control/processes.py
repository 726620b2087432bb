"""Process identity on this host: a pid plus its kernel start time, so a recycled pid is never
mistaken for the driver that once held it, and a zombie counts as dead."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)
HAS_PROC = os.path.exists("/proc/self/stat")


def hostname() -> str:
    return socket.gethostname()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, the state first (so field N of
    proc(5) is item N - 3), or None when there is no such process or it is a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    fields = text[text.rfind(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else fields


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None
    when there is no such process or it is a zombie."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


@dataclass(frozen=True)
class ProcessRef:
    """A process on a named host, identified by pid and start time."""

    pid: int
    host: str
    start_ticks: int | None

    @classmethod
    def current(cls) -> ProcessRef:
        return cls(os.getpid(), hostname(), start_ticks(os.getpid()))

    @property
    def local(self) -> bool:
        return self.host == hostname()

    def alive(self) -> bool | None:
        """True/False for a process on this host; None (unknown) for one on another host, or on
        a system without `/proc` (where a missing stat file proves nothing)."""
        if not self.local or not HAS_PROC:
            return None
        ticks = start_ticks(self.pid)
        if ticks is None:
            return False
        return self.start_ticks is None or ticks == self.start_ticks


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Send `sig` to the process group led by `pid` (a detached launch leads its own group);
    False when nothing was there."""
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False


def signal_process(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


class Tracked(Protocol):
    """A process, or a cluster's driver (`backends.DriverHandle`), whose life can be watched."""

    def alive(self) -> bool | None: ...


def wait_gone(ref: Tracked, timeout_s: float, poll_s: float = 0.2) -> bool:
    """Wait until the process (or driver) is gone; whether it was seen gone within the timeout
    (never for one whose life this host cannot see)."""
    deadline = time.monotonic() + timeout_s
    while ref.alive() is not False:
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True
