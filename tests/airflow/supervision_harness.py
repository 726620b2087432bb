"""Drives Weir's deferrable operators the way Airflow does — execute until `TaskDeferred`, run the
trigger until its first event (as the triggerer does), resume the named method with the event —
without a scheduler, so a test can kill drivers between the steps."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from airflow.sdk.exceptions import TaskDeferred

from spark_jobs.control import lease as leases
from spark_jobs.control.driver import read_launch
from spark_jobs.control.processes import signal_group
from spark_jobs.control.status import pipeline_status
from spark_jobs.home import WeirHome

LOCAL_MASTER = json.dumps({"conn_type": "spark", "host": "local[2]"})
DRIVER_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
               "spark.default.parallelism": "2", "spark.driver.memory": "1g"}


class Context(dict):
    """The parts of an Airflow task context the operators read."""


def context(user: str = "tester") -> Context:
    class Run:
        triggering_user_name = user
        run_id = "manual__test"

    return Context(dag_run=Run(), params={})


def expect_deferred(call: Callable[..., Any], *args: Any, **kwargs: Any) -> TaskDeferred:
    try:
        result = call(*args, **kwargs)
    except TaskDeferred as deferred:
        return deferred
    raise AssertionError(f"expected the task to defer, it returned {result!r}")


def next_event(trigger: Any, timeout_s: float) -> Any:
    """The trigger's first event (its payload), like the triggerer would deliver it."""
    async def first() -> Any:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout_s))


def resume(operator: Any, deferred: TaskDeferred, ctx: Context, timeout_s: float) -> Any:
    """Wait for the deferred trigger's event and resume the operator with it (re-raising a new
    deferral as `TaskDeferred`)."""
    payload = next_event(deferred.trigger, timeout_s)
    return getattr(operator, deferred.method_name)(ctx, payload, **(deferred.kwargs or {}))


def wait_for(what: str, predicate: Callable[[], Any], timeout_s: float, poll_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def wait_running(home: WeirHome, pipeline: str, timeout_s: float, min_batch: int = 0) -> dict[str, Any]:
    """Until the driver reports progress of every query (batch >= min_batch)."""
    def ready() -> dict[str, Any] | None:
        status = pipeline_status(home, pipeline)
        batches = [q["last_batch_id"] for q in status["queries"]]
        ok = status["state"] == "RUNNING" and len(batches) >= 2 and all(
            b is not None and b >= min_batch for b in batches)
        return status if ok else None

    return wait_for(f"{pipeline} RUNNING", ready, timeout_s)


def tear_down(home: WeirHome, pipeline: str) -> None:
    """Leave no driver behind, whatever the test did."""
    holder = leases.read(home, pipeline)
    if holder is not None and holder.process.alive():
        os.kill(holder.pid, signal.SIGKILL)
    launch = read_launch(home, pipeline)
    if launch is not None:
        signal_group(launch.pid, signal.SIGKILL)


def python() -> str:
    return sys.executable
