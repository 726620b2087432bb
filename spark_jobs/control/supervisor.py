"""The stream supervisor: what to do about a pipeline's driver, decided here, carried out by
whoever runs it (the Airflow operator, a test, a benchmark).

The decisions are pure functions of an `Observation` (lease holder, launch, stop marker, health
verdict, automatic restarts so far): adopt a live driver, launch one (after cleaning up a dead
one), restart after a backoff, give up when the restart budget is spent, or finish when the
pipeline was stopped on purpose. `Supervisor` observes the files and the event log, carries out
the decisions that need no Airflow (clean-up, adoption) and records every lifecycle action in the
event log, once. Launching and waiting belong to the caller: the operator builds its spark-submit
hook and defers to its trigger.

Restarts are not kept anywhere but in the event log: the budget counts the automatic restarts
since the last fresh deploy within the policy's window.
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
from dataclasses import dataclass, field
from typing import Any

from spark_jobs import catalog
from spark_jobs.catalog import RestartPolicy
from spark_jobs.control import eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.backends import LocalProcessBackend
from spark_jobs.control.deploy_gate import CompatCheck, admit
from spark_jobs.control.driver import LaunchRecord, kill_launch, read_launch
from spark_jobs.control.lease import iso, now_utc
from spark_jobs.control.processes import signal_process, wait_gone
from spark_jobs.control.supervision import (
    SupervisorState,
    clear_stopped,
    next_backoff_s,
    recent_restarts,
    stopped_marker,
)
from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)


# -- what the supervisor sees ----------------------------------------------------------------------
@dataclass(frozen=True)
class Observation:
    """The facts a decision rests on, gathered by `Supervisor.observe` (or written by a test)."""

    pipeline: str
    holder_pid: int | None = None          # the live lease holder
    starting_pid: int | None = None        # a launch still alive that has not taken the lease yet
    lease_left: bool = False               # a lease on file whose holder is gone or expired
    stopped: bool = False                  # stopped on purpose (stopped.json)
    restarts: tuple[str, ...] = ()         # automatic restarts since the last fresh deploy
    now: dt.datetime = field(default_factory=now_utc)


# -- the decisions -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Adopt:
    driver_pid: int


@dataclass(frozen=True)
class Launch:
    clean_up_first: bool    # a dead or expired holder's lease (and launch group) to clear first


@dataclass(frozen=True)
class Restart:
    verdict: str
    detail: str
    backoff_s: float
    attempt: int


@dataclass(frozen=True)
class GiveUp:
    message: str


@dataclass(frozen=True)
class Finish:
    reason: str


def decide_start(seen: Observation) -> Adopt | Launch:
    """Deploy or relaunch: adopt the live holder (or a launch still starting), else launch."""
    if seen.holder_pid is not None:
        return Adopt(seen.holder_pid)
    if seen.starting_pid is not None and not seen.lease_left:
        return Adopt(seen.starting_pid)
    return Launch(clean_up_first=seen.lease_left)


def decide_after_loss(seen: Observation, verdict: str, detail: str,
                      policy: RestartPolicy) -> Finish | Restart | GiveUp:
    """The watch fired: end when stopped on purpose, else restart within the budget or give up."""
    if verdict == "stopped":
        return Finish(f"stopped on purpose ({detail})")
    backoff = next_backoff_s(list(seen.restarts), policy, seen.now)
    if backoff is None:
        return GiveUp(f"{seen.pipeline}: driver {verdict} ({detail}) and the restart budget is spent: "
                      f"{len(seen.restarts)} restarts within {policy.window_s:.0f}s")
    attempt = len(recent_restarts(list(seen.restarts), policy, seen.now)) + 1
    return Restart(verdict, detail, backoff, attempt)


def decide_relaunch(seen: Observation) -> Finish | Adopt | Launch:
    """After the backoff: nothing when it was stopped meanwhile, else as a start."""
    if seen.stopped:
        return Finish("stopped while waiting to restart")
    return decide_start(seen)


def automatic_restarts(events: list[dict[str, Any]]) -> tuple[str, ...]:
    """The times of the automatic restarts recorded since the last fresh deploy (oldest first)."""
    restarts: list[str] = []
    for event in events:
        details = event.get("details") or {}
        if details.get("fresh"):
            restarts = []
        elif details.get("automatic") and event["action"] in ("restart", "adopt"):
            restarts.append(iso(event["event_time"]))
    return tuple(restarts)


# -- observing and carrying out -------------------------------------------------------------------
class Supervisor:
    """One pipeline's supervisor: observes, decides, records; the caller launches and waits."""

    def __init__(self, home: WeirHome, pipeline: str, policy: RestartPolicy | None = None, *,
                 compat_check: CompatCheck | None = None) -> None:
        self.home = home
        self.pipeline = pipeline
        self.policy = policy or catalog.load(pipeline).restart_policy
        # How the deploy gate checks changed code (the operator submits it: no JVM in Airflow).
        self.compat_check = compat_check
        # What the last `Launch` was for, recorded once the caller reports the launch.
        self._pending: tuple[str, str, str | None, dict[str, Any]] = ("deploy", "airflow", None, {})

    def observe(self) -> Observation:
        record = leases.read(self.home, self.pipeline)
        live = record is not None and not leases.is_stale(record)
        launch = read_launch(self.home, self.pipeline)
        starting = launch.pid if launch is not None and launch.process.alive() and record is None else None
        return Observation(
            self.pipeline, holder_pid=record.pid if live and record else None, starting_pid=starting,
            lease_left=record is not None and not live,
            stopped=stopped_marker(self.home, self.pipeline) is not None,
            restarts=automatic_restarts(eventlog.read(self.home, self.pipeline)))

    def _state(self, state: str, reason: str | None = None, *, keep_reason: bool = True) -> None:
        saved = SupervisorState.load(self.home, self.pipeline)
        saved.state = state
        if reason is not None or not keep_reason:
            saved.last_reason = reason
        saved.save(self.home)

    def deploy(self, *, actor: str, fresh: bool) -> Adopt | Launch:
        """Deploying is the intent to run: clear a stop, decide, adopt now or hand back a `Launch`.
        A fresh deploy (not a retry of the supervisor task) starts a new restart budget."""
        clear_stopped(self.home, self.pipeline)
        self._state("running", keep_reason=not fresh)
        decision = decide_start(self.observe())
        return self._start(decision, action="deploy", actor=actor, reason=None, details={"fresh": fresh})

    def after_loss(self, verdict: str, detail: str, event: dict[str, Any]) -> Finish | Restart | GiveUp:
        """The watch fired with `verdict`: record it, clean up what is left, decide what follows."""
        decision = decide_after_loss(self.observe(), verdict, detail, self.policy)
        if isinstance(decision, Finish):
            self._state("stopped")
            log.info("%s: %s; supervision ends", self.pipeline, decision.reason)
            return decision
        eventlog.record(self.pipeline, "driver_lost", verdict, actor="airflow", reason=detail,
                        details=event, home=self.home)
        self.clean_up(kill_driver=verdict == "stalled")
        if isinstance(decision, GiveUp):
            self._state("failed", f"restart budget spent ({verdict})")
            eventlog.record(self.pipeline, "restart", "budget_exhausted", actor="airflow", reason=detail,
                            details={"restarts": list(self.observe().restarts)}, home=self.home)
            return decision
        self._state("restarting", f"driver {verdict}: {detail}")
        log.info("%s: restarting in %.0fs (attempt %d)", self.pipeline, decision.backoff_s, decision.attempt)
        return decision

    def relaunch(self, *, verdict: str | None, detail: str | None, attempt: int | None,
                 backoff_s: float | None) -> Finish | Adopt | Launch:
        """After the backoff: adopt or hand back a `Launch` (recorded as an automatic restart)."""
        decision = decide_relaunch(self.observe())
        if isinstance(decision, Finish):
            log.info("%s: %s; supervision ends", self.pipeline, decision.reason)
            return decision
        self._state("running")
        return self._start(decision, action="restart", actor="airflow",
                           reason=f"automatic: driver {verdict} ({detail})",
                           details={"automatic": True, "attempt": attempt, "backoff_s": backoff_s})

    def _start(self, decision: Adopt | Launch, *, action: str, actor: str, reason: str | None,
               details: dict[str, Any]) -> Adopt | Launch:
        self._pending = (action, actor, reason, details)
        if isinstance(decision, Adopt):
            launch = read_launch(self.home, self.pipeline)
            eventlog.record(self.pipeline, "adopt", "ok", actor=actor, reason=reason, home=self.home,
                            details={"driver_pid": decision.driver_pid, "after": action,
                                     "driver": launch.handle if launch else None, **details})
            return decision
        if decision.clean_up_first:
            self.clean_up(kill_driver=False)
        # Changed code must fit the checkpoint (raises IncompatibleCodeError, recorded by the gate).
        admit(self.home, catalog.load(self.pipeline), actor=actor, check=self.compat_check)
        return decision

    def launched(self, record: LaunchRecord, *, master: str) -> None:
        """The caller launched the driver the last `Launch` asked for: record it."""
        action, actor, reason, details = self._pending
        eventlog.record(self.pipeline, action, "launched", actor=actor, reason=reason, home=self.home,
                        details={"launch_pid": record.pid, "master": master, "log": record.log_path,
                                 "driver": record.handle, **details})

    def clean_up(self, *, kill_driver: bool) -> None:
        """Leave nothing of a lost driver: kill it when stalled, and its launch through its backend
        (the whole local process group, or the cluster's application), wait for it to go, drop
        its lease."""
        record = leases.read(self.home, self.pipeline)
        launch = read_launch(self.home, self.pipeline)
        in_process = launch is None or launch.driver.backend == LocalProcessBackend.name
        if kill_driver and in_process and record is not None and record.process.alive():
            log.warning("%s: killing stalled driver pid %d", self.pipeline, record.pid)
            signal_process(record.pid, signal.SIGKILL)
        if kill_launch(self.home, self.pipeline, signal.SIGKILL) and launch is not None:
            log.warning("%s: killed %s", self.pipeline, launch.backend.describe(launch.driver))
        if launch is not None and not in_process:
            wait_gone(launch.process, 30.0)
        if record is not None and record.process.local:
            wait_gone(record.process, 15.0)
        leases.clear_stale(self.home, self.pipeline)
