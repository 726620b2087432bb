"""Drive a deferrable operator inline, as Airflow would: `execute` until it defers, rebuild its
trigger from the serialised form and run it until its first event (as the triggerer does), resume
the named method with that event — all in this process, without scheduler, triggerer or metadata
database. Tests and the recovery benchmark use it to put real faults (kill -9) between the steps.

Also what they need around Weir's supervisor: a small local Spark master for `spark_default`,
waiting until a pipeline runs, and leaving no driver behind. Test support only: nothing here runs
in a deployment (it is not under `plugins/`, which Airflow's plugin loader imports).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tests.support.polling import wait_for

if TYPE_CHECKING:
    from airflow.sdk.exceptions import TaskDeferred
    from airflow.triggers.base import BaseTrigger

    from spark_jobs.home import WeirHome

# Driver settings small enough for a shared 2-core machine.
SMALL_DRIVER_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                     "spark.default.parallelism": "2", "spark.driver.memory": "1g"}


def spark_connection(master: str = "local[2]") -> str:
    """`spark_default` as the value of `AIRFLOW_CONN_SPARK_DEFAULT` (JSON), pointing at `master`."""
    return json.dumps({"conn_type": "spark", "host": master})


class TaskContext(dict):
    """The parts of an Airflow task context Weir's operators read (the DAG run's triggering user)."""


def task_context(user: str = "airflow", run_id: str = "manual__inline") -> TaskContext:
    class DagRun:
        triggering_user_name = user

    run = DagRun()
    run.run_id = run_id  # type: ignore[attr-defined]
    return TaskContext(dag_run=run, params={})


def expect_deferred(call: Callable[..., Any], *args: Any, **kwargs: Any) -> TaskDeferred:
    """Call an operator method that must defer; its `TaskDeferred`."""
    from airflow.sdk.exceptions import TaskDeferred

    try:
        result = call(*args, **kwargs)
    except TaskDeferred as deferred:
        return deferred
    raise AssertionError(f"expected the task to defer, it returned {result!r}")


def rebuilt(trigger: BaseTrigger) -> BaseTrigger:
    """A fresh trigger from `trigger.serialize()`, as the triggerer loads it (so state that is not
    serialised is lost here too)."""
    from airflow.sdk.module_loading import import_string

    classpath, kwargs = trigger.serialize()
    return import_string(classpath)(**kwargs)


class TriggerRun:
    """A trigger running in its own thread and event loop until its first event, the way the
    triggerer runs it — started before a fault, so that the time to notice it is measured."""

    def __init__(self, trigger: BaseTrigger) -> None:
        self.trigger = rebuilt(trigger)
        self._result: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[Any] | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True,
                                        name=f"trigger-{type(trigger).__name__}")
        self._thread.start()
        self._started.wait()

    async def _first_event(self) -> Any:
        try:
            async for event in self.trigger.run():
                return event.payload
            raise RuntimeError(f"{type(self.trigger).__name__} ended without an event")
        finally:
            await self.trigger.cleanup()

    def _main(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        self._task = loop.create_task(self._first_event())
        self._started.set()
        try:
            outcome = loop.run_until_complete(self._task)
            self._settle(self._result.set_result, outcome)
        except asyncio.CancelledError:
            self._settle(self._result.cancel)
        except BaseException as err:  # handed to whoever waits for the event
            self._settle(self._result.set_exception, err)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    def _settle(self, action: Callable[..., Any], *args: Any) -> None:
        if not self._result.done():
            action(*args)

    def event(self, timeout_s: float) -> Any:
        """The first event's payload; `TimeoutError` if none comes within `timeout_s` (the
        trigger keeps running)."""
        try:
            return self._result.result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"{type(self.trigger).__name__}: no event within {timeout_s:.0f}s") from None

    def done(self) -> bool:
        return self._result.done()

    def cancel(self) -> None:
        """Stop the trigger (as the triggerer does when its task goes away) and wait for it."""
        if self._task is not None and not self._task.done():
            try:
                self._loop.call_soon_threadsafe(self._task.cancel)
            except RuntimeError:  # the loop closed meanwhile: the trigger has ended anyway
                pass
        self._thread.join(30)

    def __enter__(self) -> TriggerRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


def next_event(trigger: BaseTrigger, timeout_s: float) -> Any:
    """Run `trigger` until its first event and return the payload; `TimeoutError` (and the
    trigger cancelled) if none comes within `timeout_s`."""
    with TriggerRun(trigger) as run:
        return run.event(timeout_s)


def resume(operator: Any, deferred: TaskDeferred, context: TaskContext, timeout_s: float,
           event: Any = None) -> Any:
    """Resume the operator with its trigger's event (`event` if already received, else the first
    one within `timeout_s`); a new deferral is raised as `TaskDeferred`, as in a worker."""
    payload = event if event is not None else next_event(deferred.trigger, timeout_s)
    return getattr(operator, deferred.method_name)(context, payload, **(deferred.kwargs or {}))


def resume_until(operator: Any, deferred: TaskDeferred, context: TaskContext, *, method_name: str,
                 timeout_s: float, event: Any = None) -> TaskDeferred:
    """Resume the operator, and again after each deferral (e.g. a back-off timer), until it defers
    to `method_name`; that deferral. `event` is the first trigger's event if already received."""
    while True:
        deferred = expect_deferred(resume, operator, deferred, context, timeout_s, event)
        event = None
        if deferred.method_name == method_name:
            return deferred


# -- Weir's supervisor ---------------------------------------------------------------------------
def wait_running(home: WeirHome, pipeline: str, timeout_s: float, min_batch: int = 0) -> dict[str, Any]:
    """Until the pipeline is RUNNING and its driver has reported a finished batch >= `min_batch`
    of every query; the status then."""
    from spark_jobs.control.status import pipeline_status

    def ready() -> dict[str, Any] | None:
        status = pipeline_status(home, pipeline)
        batches = [q["last_batch_id"] for q in status["queries"]]
        ok = status["state"] == "RUNNING" and len(batches) >= 2 and all(
            b is not None and b >= min_batch for b in batches)
        return status if ok else None

    return wait_for(f"{pipeline} RUNNING", ready, timeout_s, poll_s=1.0)


def tear_down(home: WeirHome, pipeline: str) -> None:
    """Leave no driver behind: SIGKILL the lease holder and the process group of its launch."""
    from spark_jobs.control import lease as leases
    from spark_jobs.control.driver import read_launch
    from spark_jobs.control.processes import signal_group

    holder = leases.read(home, pipeline)
    if holder is not None and holder.process.alive():
        os.kill(holder.pid, signal.SIGKILL)
    launch = read_launch(home, pipeline)
    if launch is not None:  # the group may outlive its leader
        signal_group(launch.pid, signal.SIGKILL)
