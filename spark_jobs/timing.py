"""How long each step of a unit of work took — a micro-batch, a back-fill — for its log line and
its record (steps run side by side overlap, so their times may add up to more than the whole)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


class StepTimes:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}

    def time(self, step: str, action: Callable[[], T]) -> T:
        began = time.monotonic()
        try:
            return action()
        finally:   # a step timed again adds up
            self.seconds[step] = self.seconds.get(step, 0.0) + time.monotonic() - began

    def timed(self, actions: dict[str, Callable[[], T]]) -> dict[str, Callable[[], T]]:
        """`actions`, each timed as its step. The steps are listed in the order given, whichever
        ends first when they run side by side (`concurrently`): a log line and a record read alike
        from one run to the next."""
        for name in actions:
            self.seconds.setdefault(name, 0.0)
        return {name: functools.partial(self.time, name, action) for name, action in actions.items()}

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def rounded(self, digits: int = 2) -> dict[str, float]:
        return {step: round(s, digits) for step, s in self.seconds.items()}

    def __str__(self) -> str:
        return describe(self.seconds)


def describe(seconds: Mapping[str, float]) -> str:
    """`step 1.2s, step 0.4s`: step times as a log line or the CLI shows them."""
    return ", ".join(f"{step} {s:.1f}s" for step, s in seconds.items())
