"""What the control-plane tests add to the inline driver of deferrable operators
(`tests.support.inline`): a local Spark master for `spark_default`, small drivers, a task context
of a named user."""

from __future__ import annotations

from tests.support.inline import SMALL_DRIVER_CONF, TaskContext, spark_connection, task_context

LOCAL_MASTER = spark_connection("local[2]")
DRIVER_CONF = SMALL_DRIVER_CONF


def context(user: str = "tester") -> TaskContext:
    """A task context whose DAG run was triggered by `user`."""
    return task_context(user, run_id="manual__test")
