"""The inline driver of deferrable operators (`tests.support.inline`) and the one poll loop
(`tests.support.polling`): no Spark, a few seconds."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import BaseOperator

from tests.support.inline import TriggerRun, expect_deferred, next_event, resume, resume_until, task_context
from tests.support.polling import WaitAborted, WaitTimeout, wait_for

pytestmark = pytest.mark.airflow


def soon(seconds: float) -> DateTimeTrigger:
    return DateTimeTrigger(moment=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds))


class TwoTimers(BaseOperator):
    """Defers to a timer, then to a second one, then ends with what it was given."""

    def execute(self, context: Any) -> None:
        self.defer(trigger=soon(0.1), method_name="after_first", kwargs={"step": 1})

    def after_first(self, context: Any, event: Any, step: int) -> None:
        self.defer(trigger=soon(0.1), method_name="after_second", kwargs={"step": step + 1})

    def after_second(self, context: Any, event: Any, step: int) -> dict[str, Any]:
        return {"step": step, "user": context["dag_run"].triggering_user_name, "event": event}


def test_an_operator_is_resumed_with_its_triggers_event_until_it_ends() -> None:
    operator, context = TwoTimers(task_id="timers"), task_context("alice")
    first = expect_deferred(operator.execute, context)
    second = resume_until(operator, first, context, method_name="after_second", timeout_s=10)
    assert second.kwargs == {"step": 2}
    result = resume(operator, second, context, timeout_s=10)
    assert result["step"] == 2 and result["user"] == "alice" and isinstance(result["event"], dt.datetime)
    with pytest.raises(AssertionError, match="expected the task to defer"):
        expect_deferred(operator.after_second, context, None, step=0)


def test_a_trigger_runs_in_the_background_rebuilt_from_its_serialised_form() -> None:
    original = soon(0.5)
    run = TriggerRun(original)
    assert run.trigger is not original and run.trigger.serialize() == original.serialize()
    assert not run.done()
    assert run.event(10) == original.moment and run.done()
    run.cancel()


def test_a_trigger_without_an_event_times_out_and_is_cancelled() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        next_event(soon(3600), 0.5)
    with TriggerRun(soon(3600)) as run:
        with pytest.raises(TimeoutError):
            run.event(0.2)
    assert not run._thread.is_alive() and time.monotonic() - started < 10


def test_wait_for_returns_the_value_or_says_what_it_waited_for() -> None:
    looks = iter([None, 0, "there"])
    assert wait_for("a value", lambda: next(looks), 5, poll_s=0.01) == "there"
    with pytest.raises(WaitTimeout, match="waiting for the moon"):
        wait_for("the moon", lambda: None, 0.05, poll_s=0.01)
    with pytest.raises(WaitAborted, match=r"driver exited \(3\) while waiting for a batch"):
        wait_for("a batch", lambda: None, 5, poll_s=0.01, abort=lambda: "driver exited (3)")
