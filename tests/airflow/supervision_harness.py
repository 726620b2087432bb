"""Drives Weir's deferrable operators the way Airflow does, without a scheduler, so a test can
kill drivers between the steps: the machinery is `weir_airflow.inline` (the recovery benchmark
uses it too); here only what the control-plane tests add to it."""

from __future__ import annotations

from weir_airflow.inline import (
    SMALL_DRIVER_CONF,
    TaskContext,
    TriggerRun,
    expect_deferred,
    next_event,
    resume,
    spark_connection,
    task_context,
    tear_down,
    wait_running,
)

from spark_jobs.control.polling import wait_for

__all__ = ["DRIVER_CONF", "LOCAL_MASTER", "TriggerRun", "context", "expect_deferred", "next_event",
           "resume", "tear_down", "wait_for", "wait_running"]

LOCAL_MASTER = spark_connection("local[2]")
DRIVER_CONF = SMALL_DRIVER_CONF


def context(user: str = "tester") -> TaskContext:
    """A task context whose DAG run was triggered by `user`."""
    return task_context(user, run_id="manual__test")
