"""Operators of the control plane: deploy-and-supervise, stop and on-call restart of a stream.

`StreamSupervisorOperator` carries out what `spark_jobs.control.supervisor` decides: it launches
the driver through its spark-submit hook when told to (or lets the live one be adopted), defers
to `DriverWatchTrigger`, and when the driver dies or stalls it resumes, asks the supervisor again
and restarts after the backoff it was given, or fails for good when the restart budget is spent
(its failure callback alerts). A deliberate stop ends it successfully. The library records every
lifecycle action in the event log; the operators record nothing themselves.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from spark_jobs.control.deploy_gate import IncompatibleCodeError
from spark_jobs.control.driver import STREAM_ENTRY
from spark_jobs.control.oncall import restart
from spark_jobs.control.stop import GRACEFUL_TIMEOUT_S, stop_driver
from spark_jobs.control.supervisor import Finish, GiveUp, Launch, Supervisor
from spark_jobs.home import WeirHome
from weir_airflow.hooks import WeirSparkSubmitHook
from weir_airflow.tasks import approved, checkpoint_action, submitted_compat_check
from weir_airflow.triggers import DriverWatchTrigger

log = logging.getLogger(__name__)
SHORT_BACKOFF_S = 5.0


def budget_exhausted(message: str) -> Exception:
    """The driver failed more often than its restart policy allows: fail the task for good (no
    Airflow retry; its retries are for the supervisor itself dying, e.g. with the scheduler)."""

    return AirflowFailException(message)


def actor_of(context: Any) -> str:
    """Who asked: the user who triggered the DAG run, else `airflow` (a schedule or a sensor)."""
    run = context.get("dag_run") if context else None
    return getattr(run, "triggering_user_name", None) or "airflow"


def weir_home() -> Any:
    return WeirHome.from_env()


class StreamSupervisorOperator(BaseOperator):
    """Deploy `pipeline`'s stream and keep it alive (see the module docstring)."""

    template_fields: Sequence[str] = ("pipeline", "conn_id")
    ui_color = "#d6eaf8"

    def __init__(self, *, pipeline: str, conn_id: str = "spark_default",
                 spark_conf: dict[str, str] | None = None, poll_interval_s: float = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.conn_id = conn_id
        self.spark_conf = spark_conf
        self.poll_interval_s = poll_interval_s

    def _supervisor(self) -> Any:
        # The deploy gate's check of changed code is a submitted job: no JVM in this worker.
        return Supervisor(weir_home(), self.pipeline,
                          compat_check=submitted_compat_check(conn_id=self.conn_id))

    # -- deploy -----------------------------------------------------------------------------
    def execute(self, context: Any) -> None:
        supervisor = self._supervisor()
        ti = context.get("ti") if context else None
        # A new deploy starts a new restart budget, a retry of this task does not.
        decision = self._guarded(lambda: supervisor.deploy(
            actor=actor_of(context), fresh=getattr(ti, "try_number", 1) <= 1))
        self._carry_out(supervisor, decision)
        self._watch(supervisor)

    def _guarded(self, decide: Any) -> Any:
        """A deploy refused by the gate (code that does not fit the checkpoint) fails for good."""

        try:
            return decide()
        except IncompatibleCodeError as err:
            raise AirflowFailException(str(err)) from err

    def _carry_out(self, supervisor: Any, decision: Any) -> None:
        """Launch when the supervisor said `Launch`; an `Adopt` needs nothing more."""

        if not isinstance(decision, Launch):
            log.info("%s: adopted the live driver pid %s; watching it from the triggerer",
                     self.pipeline, getattr(decision, "driver_pid", "?"))
            return
        hook = WeirSparkSubmitHook(conn_id=self.conn_id, conf=self.spark_conf,
                                   name=f"weir-{self.pipeline}", application_args=[self.pipeline])
        record = hook.launch_detached(supervisor.home, self.pipeline, str(STREAM_ENTRY))
        supervisor.launched(record, master=hook.master)
        log.info("%s: driver launched (%s %s); watching it from the triggerer", self.pipeline,
                 record.driver.backend, record.driver.id)

    def _watch(self, supervisor: Any) -> None:
        self.defer(trigger=DriverWatchTrigger(self.pipeline, str(supervisor.home.root),
                                              supervisor.policy.stall_after_s, self.poll_interval_s),
                   method_name="on_driver_event")

    # -- resume -----------------------------------------------------------------------------
    def on_driver_event(self, context: Any, event: dict[str, Any]) -> None:
        supervisor = self._supervisor()
        decision = supervisor.after_loss(event["verdict"], event["detail"], event)
        if isinstance(decision, Finish):
            return
        if isinstance(decision, GiveUp):
            raise budget_exhausted(decision.message)
        kwargs = {"verdict": decision.verdict, "detail": decision.detail,
                  "backoff_s": decision.backoff_s, "attempt": decision.attempt}
        if decision.backoff_s <= SHORT_BACKOFF_S:
            time.sleep(decision.backoff_s)
            self.relaunch(context, None, **kwargs)
            return

        wake_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=decision.backoff_s)
        self.defer(trigger=DateTimeTrigger(wake_at), method_name="relaunch", kwargs=kwargs)

    def relaunch(self, context: Any, event: Any = None, **kwargs: Any) -> None:
        supervisor = self._supervisor()
        decision = self._guarded(lambda: supervisor.relaunch(
            verdict=kwargs.get("verdict"), detail=kwargs.get("detail"), attempt=kwargs.get("attempt"),
            backoff_s=kwargs.get("backoff_s")))
        if isinstance(decision, Finish):
            return
        self._carry_out(supervisor, decision)
        self._watch(supervisor)


class StreamStopOperator(BaseOperator):
    """Stop the pipeline's stream at a batch boundary (forcefully after a timeout) and keep it
    stopped until it is deployed again."""

    # The DAG passes the timeout as a Param template: it must be rendered like the reason.
    template_fields: Sequence[str] = ("pipeline", "reason", "graceful_timeout_s")

    def __init__(self, *, pipeline: str, reason: str | None = None,
                 graceful_timeout_s: float | str = GRACEFUL_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.reason = reason
        self.graceful_timeout_s = graceful_timeout_s

    def execute(self, context: Any) -> dict[str, Any]:
        outcome = stop_driver(weir_home(), self.pipeline, actor=actor_of(context), reason=self.reason or None,
                              graceful_timeout_s=float(self.graceful_timeout_s))
        return {"outcome": outcome.outcome, "driver_pid": outcome.driver_pid}


class StreamRestartOperator(BaseOperator):
    """The on-call restart: stop the driver, optionally restore a checkpoint backup or reset the
    checkpoint (only once the task `approval_task_id` approved its plan), and leave the pipeline
    ready for the next `P_stream` run (triggered downstream), with the reason in the event log."""

    template_fields: Sequence[str] = ("pipeline", "reason", "mode", "backup_id", "reset_from")

    def __init__(self, *, pipeline: str, reason: str, mode: str = "restart", backup_id: str | None = None,
                 reset_from: str | None = None, approval_task_id: str | None = None,
                 graceful_timeout_s: float = GRACEFUL_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.reason = reason
        self.mode = mode
        self.backup_id = backup_id
        self.reset_from = reset_from
        self.approval_task_id = approval_task_id
        self.graceful_timeout_s = graceful_timeout_s

    def execute(self, context: Any) -> dict[str, Any]:
        # A restore or reset runs once approved (the approval stands for `--yes` and goes to its
        # event); it is a submitted `weir checkpoint` job: no JVM in this worker.
        approval = None
        if self.mode != "restart":
            approval = approved(context["ti"].xcom_pull(task_ids=self.approval_task_id),
                                f"{self.pipeline} restart ({self.mode})")
        return restart(weir_home(), self.pipeline, actor=actor_of(context), reason=self.reason,
                       mode=self.mode, backup_id=self.backup_id or None, reset_from=self.reset_from or None,
                       confirm=approval is not None, graceful_timeout_s=float(self.graceful_timeout_s),
                       checkpoint=partial(checkpoint_action, approval=approval))
