"""`concurrently.run_concurrently`: the ingest batch's independent writes run side by side, and a failure is
raised only once every write has ended (none is left writing behind a failed batch); each write's
thread carries its own copy of the caller's Spark local properties."""

from __future__ import annotations

import threading
import time

import pytest

from spark_jobs.concurrently import run_concurrently


def test_actions_overlap_and_all_run(spark) -> None:
    barrier = threading.Barrier(3, timeout=5)
    done: list[str] = []

    def action(name: str):
        def run() -> None:
            barrier.wait()          # only passes if all three run at the same time
            done.append(name)
        return run

    run_concurrently({n: action(n) for n in ("bronze", "quarantine", "silver")}, what="test", spark=spark)
    assert sorted(done) == ["bronze", "quarantine", "silver"]


def test_a_failure_is_raised_after_the_other_writes_end(spark) -> None:
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.3)
        finished.set()

    def broken() -> None:
        raise ValueError("commit refused")

    with pytest.raises(ValueError, match="commit refused"):
        run_concurrently({"silver": slow, "bronze": broken}, what="test", spark=spark)
    assert finished.is_set()


def test_each_thread_carries_its_own_copy_of_the_callers_local_properties(spark) -> None:
    """A thread's SQL executions set their id in its local properties: threads sharing one set took
    each other's ids, and some executions never ended in the status store (a test session's later
    modules ran several times slower)."""
    context = spark.sparkContext
    context.setLocalProperty("weir.test.caller", "batch 7")
    barrier = threading.Barrier(2, timeout=10)

    def setter() -> str | None:
        context.setLocalProperty("weir.test.own", "set by one thread")
        barrier.wait()
        return context.getLocalProperty("weir.test.caller")

    def reader() -> tuple[str | None, str | None]:
        barrier.wait()
        return context.getLocalProperty("weir.test.caller"), context.getLocalProperty("weir.test.own")

    try:
        done = run_concurrently({"setter": setter, "reader": reader}, what="test", spark=spark)
    finally:
        context.setLocalProperty("weir.test.caller", None)
    assert done == {"setter": "batch 7", "reader": ("batch 7", None)}
