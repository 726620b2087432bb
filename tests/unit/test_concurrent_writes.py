"""`stream.run_concurrently`: the ingest batch's independent writes run side by side, and a failure is
raised only once every write has ended (none is left writing behind a failed batch)."""

from __future__ import annotations

import threading
import time

import pytest

from spark_jobs.stream import run_concurrently


def test_actions_overlap_and_all_run() -> None:
    barrier = threading.Barrier(3, timeout=5)
    done: list[str] = []

    def action(name: str):
        def run() -> None:
            barrier.wait()          # only passes if all three run at the same time
            done.append(name)
        return run

    run_concurrently({n: action(n) for n in ("bronze", "quarantine", "silver")}, what="test")
    assert sorted(done) == ["bronze", "quarantine", "silver"]


def test_a_failure_is_raised_after_the_other_writes_end() -> None:
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.3)
        finished.set()

    def broken() -> None:
        raise ValueError("commit refused")

    with pytest.raises(ValueError, match="commit refused"):
        run_concurrently({"silver": slow, "bronze": broken}, what="test")
    assert finished.is_set()
