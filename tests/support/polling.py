"""Waiting for something another process does — a driver taking its lease, a batch committing, a
row reaching a table — by looking again until it is there, within a deadline. The one poll loop
of the tests, the benchmarks and the inline supervisor (`tests.support.inline`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """What was waited for did not happen within the deadline."""


class WaitAborted(RuntimeError):
    """Waiting stopped early: what it waited for can no longer happen (e.g. the process died)."""


def wait_for(what: str, check: Callable[[], T], timeout_s: float, *, poll_s: float = 0.5,
             abort: Callable[[], str | None] | None = None) -> T:
    """Call `check` every `poll_s` seconds until it returns something truthy, and return that.

    Raises `WaitTimeout` naming `what` after `timeout_s`, or `WaitAborted` as soon as `abort`
    (called after each unsuccessful look) returns a reason."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if abort is not None and (reason := abort()):
            raise WaitAborted(f"{reason} while waiting for {what}")
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(poll_s)
