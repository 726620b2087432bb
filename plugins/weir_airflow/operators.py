"""Operators of the control plane: deploy-and-supervise, stop and on-call restart of a stream.

`StreamSupervisorOperator` deploys the pipeline's driver (or adopts the live one), then defers
to `DriverWatchTrigger`; when the driver dies or stalls it wakes, cleans up and restarts it
under the pipeline's restart policy (exponential backoff, a budget per window; budget spent →
the task fails and its failure callback alerts). A deliberate stop ends it successfully.
Every lifecycle action is written to the event log.
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

log = logging.getLogger(__name__)
SHORT_BACKOFF_S = 5.0


def budget_exhausted(message: str) -> Exception:
    """The driver failed more often than its restart policy allows: fail the task for good (no
    Airflow retry; its retries are for the supervisor itself dying, e.g. with the scheduler)."""
    from airflow.sdk.exceptions import AirflowFailException

    return AirflowFailException(message)


def actor_of(context: Any) -> str:
    """Who asked: the user who triggered the DAG run, else `airflow` (a schedule or a sensor)."""
    run = context.get("dag_run") if context else None
    return getattr(run, "triggering_user_name", None) or "airflow"


def weir_home() -> Any:
    from spark_jobs.home import WeirHome

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

    # -- deploy -----------------------------------------------------------------------------
    def execute(self, context: Any) -> None:
        from spark_jobs.control.supervision import SupervisorState, clear_stopped

        home = weir_home()
        clear_stopped(home, self.pipeline)  # deploying is the intent to run
        state = SupervisorState.load(home, self.pipeline)
        ti = context.get("ti") if context else None
        if getattr(ti, "try_number", 1) <= 1:  # a new deploy resets the budget, a retry does not
            state.restarts, state.last_reason = [], None
        state.state = "running"
        state.save(home)
        adopted = self._ensure_driver(context, action="deploy", reason=None)
        log.info("%s: %s; watching it from the triggerer", self.pipeline,
                 "adopted the live driver" if adopted else "driver launched")
        self._watch()

    def _ensure_driver(self, context: Any, *, action: str, reason: str | None,
                       details: dict[str, Any] | None = None) -> bool:
        """Adopt the live lease holder (or a launch still starting), else launch; True when adopted."""
        from spark_jobs.control import eventlog
        from spark_jobs.control import lease as leases
        from spark_jobs.control.driver import STREAM_ENTRY, kill_launch, read_launch

        home = weir_home()
        holder = leases.holder(home, self.pipeline)
        launch = read_launch(home, self.pipeline)
        starting = holder is None and launch is not None and launch.process.alive() and \
            leases.read(home, self.pipeline) is None
        if holder is not None or starting:
            pid = holder.pid if holder is not None else launch.pid  # type: ignore[union-attr]
            eventlog.record(self.pipeline, "adopt", "ok", actor=actor_of(context), reason=reason,
                            details={"driver_pid": pid, "after": action, **(details or {})}, home=home)
            return True
        if leases.read(home, self.pipeline) is not None:
            # A dead holder's lease: its spark-submit JVM may linger; clear both before launching.
            kill_launch(home, self.pipeline, signal.SIGKILL)
            leases.clear_stale(home, self.pipeline)
        from spark_jobs import catalog
        from spark_jobs.control.deploy_gate import IncompatibleCodeError, admit

        try:   # changed code must fit the checkpoint (a restart of unchanged code skips the check)
            admit(home, catalog.load(self.pipeline), actor=actor_of(context))
        except IncompatibleCodeError as err:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(str(err)) from err
        hook = self._hook()
        record = hook.launch_detached(home, self.pipeline, str(STREAM_ENTRY))
        eventlog.record(self.pipeline, action, "launched", actor=actor_of(context), reason=reason,
                        details={"launch_pid": record.pid, "master": hook.master, "log": record.log_path,
                                 **(details or {})}, home=home)
        return False

    def _hook(self) -> Any:
        from weir_airflow.hooks import WeirSparkSubmitHook

        return WeirSparkSubmitHook(conn_id=self.conn_id, conf=self.spark_conf,
                                   name=f"weir-{self.pipeline}", application_args=[self.pipeline])

    def _policy(self) -> Any:
        from spark_jobs import catalog

        return catalog.load(self.pipeline).restart_policy

    def _watch(self) -> None:
        from weir_airflow.triggers import DriverWatchTrigger

        self.defer(trigger=DriverWatchTrigger(self.pipeline, str(weir_home().root),
                                              self._policy().stall_after_s, self.poll_interval_s),
                   method_name="on_driver_event")

    # -- resume -----------------------------------------------------------------------------
    def on_driver_event(self, context: Any, event: dict[str, Any]) -> None:
        from spark_jobs.control import eventlog
        from spark_jobs.control.supervision import SupervisorState, next_backoff_s

        home = weir_home()
        verdict = event["verdict"]
        if verdict == "stopped":
            state = SupervisorState.load(home, self.pipeline)
            state.state = "stopped"
            state.save(home)
            log.info("%s: stopped on purpose (%s); supervision ends", self.pipeline, event["detail"])
            return
        eventlog.record(self.pipeline, "driver_lost", verdict, actor="airflow", reason=event["detail"],
                        details=event, home=home)
        self._clean_up(verdict, event)
        state = SupervisorState.load(home, self.pipeline)
        backoff = next_backoff_s(state.restarts, self._policy())
        if backoff is None:
            state.state, state.last_reason = "failed", f"restart budget spent ({verdict})"
            state.save(home)
            eventlog.record(self.pipeline, "restart", "budget_exhausted", actor="airflow",
                            reason=event["detail"], details={"restarts": state.restarts}, home=home)
            raise budget_exhausted(
                f"{self.pipeline}: driver {verdict} ({event['detail']}) and the restart budget is spent: "
                f"{len(state.restarts)} restarts within {self._policy().window_s:.0f}s")
        state.restarts.append(dt.datetime.now(dt.UTC).isoformat())
        state.state, state.last_reason = "restarting", f"driver {verdict}: {event['detail']}"
        state.save(home)
        kwargs = {"verdict": verdict, "detail": event["detail"], "backoff_s": backoff,
                  "attempt": len(state.restarts)}
        if backoff <= SHORT_BACKOFF_S:
            time.sleep(backoff)
            self.relaunch(context, None, **kwargs)
            return
        from airflow.providers.standard.triggers.temporal import DateTimeTrigger

        log.info("%s: restarting in %.0fs (attempt %d)", self.pipeline, backoff, len(state.restarts))
        self.defer(trigger=DateTimeTrigger(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=backoff)),
                   method_name="relaunch", kwargs=kwargs)

    def relaunch(self, context: Any, event: Any = None, **kwargs: Any) -> None:
        from spark_jobs.control.supervision import SupervisorState, stopped_marker

        home = weir_home()
        if stopped_marker(home, self.pipeline) is not None:
            log.info("%s: stopped while waiting to restart; supervision ends", self.pipeline)
            return
        self._ensure_driver(context, action="restart",
                            reason=f"automatic: driver {kwargs.get('verdict')} ({kwargs.get('detail')})",
                            details={k: kwargs.get(k) for k in ("attempt", "backoff_s")})
        state = SupervisorState.load(home, self.pipeline)
        state.state = "running"
        state.save(home)
        self._watch()

    def _clean_up(self, verdict: str, event: dict[str, Any]) -> None:
        """Make sure nothing of the lost driver remains: kill a stalled one (and its whole
        launch group), drop its lease."""
        from spark_jobs.control import lease as leases
        from spark_jobs.control.driver import kill_launch
        from spark_jobs.control.processes import signal_process

        home = weir_home()
        record = leases.read(home, self.pipeline)
        if verdict == "stalled" and record is not None and record.process.alive():
            log.warning("%s: killing stalled driver pid %d", self.pipeline, record.pid)
            signal_process(record.pid, signal.SIGKILL)
        kill_launch(home, self.pipeline, signal.SIGKILL)
        if record is not None:
            from spark_jobs.control.processes import wait_gone

            wait_gone(record.process, 15.0)
        leases.clear_stale(home, self.pipeline)


class StreamStopOperator(BaseOperator):
    """Stop the pipeline's stream at a batch boundary (forcefully after a timeout) and keep it
    stopped until it is deployed again."""

    # The DAG passes the timeout as a Param template: it must be rendered like the reason.
    template_fields: Sequence[str] = ("pipeline", "reason", "graceful_timeout_s")

    def __init__(self, *, pipeline: str, reason: str | None = None, graceful_timeout_s: float | str = 90.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.reason = reason
        self.graceful_timeout_s = graceful_timeout_s

    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs.control import eventlog
        from spark_jobs.control.stop import stop_driver

        home = weir_home()
        actor = actor_of(context)
        outcome = stop_driver(home, self.pipeline, actor=actor, reason=self.reason or None,
                              graceful_timeout_s=float(self.graceful_timeout_s))
        eventlog.record(self.pipeline, "stop", outcome.outcome, actor=actor, reason=self.reason or None,
                        details={"driver_pid": outcome.driver_pid, "seconds": round(outcome.seconds, 1)},
                        home=home)
        return {"outcome": outcome.outcome, "driver_pid": outcome.driver_pid}


class StreamRestartOperator(BaseOperator):
    """The on-call restart: stop the driver, optionally restore a checkpoint backup or reset the
    checkpoint, and leave the pipeline ready for the next `P_stream` run (triggered downstream),
    with the reason in the event log."""

    template_fields: Sequence[str] = ("pipeline", "reason", "mode", "backup_id", "reset_from", "confirm")

    def __init__(self, *, pipeline: str, reason: str, mode: str = "restart", backup_id: str | None = None,
                 reset_from: str | None = None, confirm: bool | str = False,
                 graceful_timeout_s: float = 90.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.reason = reason
        self.mode = mode
        self.backup_id = backup_id
        self.reset_from = reset_from
        self.confirm = confirm
        self.graceful_timeout_s = graceful_timeout_s

    def execute(self, context: Any) -> dict[str, Any]:
        from spark_jobs.control import eventlog
        from spark_jobs.control.stop import stop_driver

        home = weir_home()
        actor = actor_of(context)
        reason = (self.reason or "").strip()
        if not reason:
            raise ValueError("an on-call restart needs a reason")
        if self.mode not in ("restart", "restore_backup", "reset"):
            raise ValueError(f"unknown restart mode {self.mode!r}")
        confirmed = str(self.confirm).lower() in ("true", "1", "yes")
        if self.mode != "restart" and not confirmed:
            raise ValueError(f"mode {self.mode} rewrites the checkpoint: set confirm=true to proceed")
        outcome = stop_driver(home, self.pipeline, actor=actor, reason=reason, intent="restart",
                              graceful_timeout_s=self.graceful_timeout_s)
        result: dict[str, Any] = {"stop": outcome.outcome, "driver_pid": outcome.driver_pid,
                                  "mode": self.mode}
        if self.mode != "restart":
            from spark_jobs.checkpoints import run_action

            action = "restore" if self.mode == "restore_backup" else "reset"
            result["checkpoint"] = run_action(
                self.pipeline, action, backup_id=self.backup_id or None, reset_from=self.reset_from or None,
                confirm=True, actor=actor, reason=reason)
        eventlog.record(self.pipeline, "restart", "requested", actor=actor, reason=reason,
                        details=result, home=home)
        return result
