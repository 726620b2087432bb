"""Answering Airflow's human-in-the-loop approvals from a test: the way Airflow's HITL REST endpoint
does it (response written to `hitl_detail`, the parked task resumed with `handle_event_submit`),
or a timeout the way the scheduler's `check_awaiting_input_timeouts` sweep does it."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any

from spark_jobs import catalog

ANSWER_WITHIN_S = 240
DAG_TEST_LOG = "airflow.sdk.definitions.dag"


class _DagTestWaits(logging.Handler):
    """Set once `DAG.test()` waits for input. It writes the state the task came back with
    (`TaskInstance.set_state`) *after* the task parked itself through the execution API: an answer
    given in between is overwritten, and the run waits forever (a CI run hung 15 minutes on it).
    Its loop logs that it waits only after that write; a person answers later still."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.waiting = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Waiting for Human-in-the-loop input"):
            self.waiting.set()


_dag_test = _DagTestWaits()


def parked(dag_id: str, task_id: str) -> Any:
    """The task instance of `dag_id.task_id` waiting for input (with its HITL request), once it is
    and `DAG.test()` has written its state (see `_DagTestWaits`)."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    deadline = time.monotonic() + ANSWER_WITHIN_S
    if not _dag_test.waiting.wait(ANSWER_WITHIN_S):
        raise AssertionError(f"DAG.test() of {dag_id} never waited for input")
    while time.monotonic() < deadline:
        with create_session() as session:
            ti = session.scalars(select(TI).where(TI.dag_id == dag_id, TI.task_id == task_id,
                                                  TI.state == TaskInstanceState.AWAITING_INPUT)
                                 .options(joinedload(TI.hitl_detail))).first()
            if ti is not None:
                session.expunge(ti)
                return ti
        time.sleep(0.5)
    raise AssertionError(f"{dag_id}.{task_id} never waited for input")


def respond(dag_id: str, option: str, reason: str, user: str, seen: dict) -> None:
    """What Airflow's `PATCH .../hitlDetails` does for `user`: record the response, resume the task."""
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.trigger import handle_event_submit
    from airflow.sdk import timezone
    from airflow.triggers.base import TriggerEvent
    from airflow.utils.session import create_session

    waiting = parked(dag_id, "approve")
    seen["subject"], seen["body"] = waiting.hitl_detail.subject, waiting.hitl_detail.body
    with create_session() as session:
        ti = session.get(TI, waiting.id)
        detail = session.get(HITLDetail, waiting.id)
        detail.responded_by = {"id": user, "name": user}
        detail.responded_at = timezone.utcnow()
        detail.chosen_options = [option]
        detail.params_input = {"reason": reason}
        session.add(detail)
        handle_event_submit(TriggerEvent(detail.as_resume_event_payload()), task_instance=ti,
                            session=session)


def time_out(dag_id: str, seen: dict) -> None:
    """The response deadline passes with no answer: the scheduler's own sweep resolves the task."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.sdk import timezone
    from airflow.utils.session import create_session

    waiting = parked(dag_id, "approve")
    seen["body"] = waiting.hitl_detail.body
    with create_session() as session:
        ti = session.get(TI, waiting.id)
        assert ti.trigger_timeout is not None, "the approval waits without a deadline"
        ti.trigger_timeout = timezone.utcnow() - dt.timedelta(seconds=1)
    SchedulerJobRunner(job=Job()).check_awaiting_input_timeouts()


def run_answered(dag_id: str, answer: Any, **conf: Any) -> tuple[Any, dict]:
    """`DAG.test()` of `dag_id` (a DAG of a catalog pipeline) while `answer(dag_id, seen)` answers
    its approval from a thread."""
    # Everything imported and every mapper configured here first: a thread importing Airflow's
    # models while `DAG.test()` does deadlocks on the import and SQLAlchemy's configure locks.
    import airflow.jobs.scheduler_job_runner
    import airflow.models.hitl
    import airflow.models.trigger  # noqa: F401
    from sqlalchemy.orm import configure_mappers
    from weir_airflow.dag_factory import pipeline_dags

    [dag] = [d for name in catalog.names() for i, d in pipeline_dags(name).items() if i == dag_id]
    configure_mappers()
    seen: dict = {}
    errors: list[BaseException] = []

    def answering() -> None:
        try:
            answer(dag_id, seen)
        except BaseException as err:  # reported by the test, not lost in the thread
            errors.append(err)
            unblock(dag_id)

    logger = logging.getLogger(DAG_TEST_LOG)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(_dag_test)
    _dag_test.waiting.clear()
    helper = threading.Thread(target=answering, daemon=True)
    helper.start()
    try:
        run = dag.test(run_conf=conf)
    finally:
        logger.removeHandler(_dag_test)
        logger.setLevel(level)
    helper.join(timeout=30)
    assert not errors, errors
    return run, seen


def unblock(dag_id: str) -> None:
    """Fail whatever still waits for input, so that a failed answer ends `DAG.test()`."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import update

    with create_session() as session:
        session.execute(update(TI).where(TI.dag_id == dag_id, TI.state == TaskInstanceState.AWAITING_INPUT)
                        .values(state=TaskInstanceState.FAILED))
