"""Stopping a pipeline's driver: at a batch boundary first, by force only when it does not comply.

1. mark the pipeline intentionally stopped (the supervisor will not restart it);
2. write a stop request addressed to the lease holder; its heartbeat thread sees it within a second
   and the driver stops its queries between two micro-batches;
3. after `graceful_timeout_s`, SIGTERM (the driver's handler stops at a batch boundary as well);
4. after `term_timeout_s` more, SIGKILL the whole launch group (the replay of an interrupted batch
   is a no-op, so even this loses nothing).

A stop is reported `graceful` only when it was seen to end: on this host its process is gone; on
another host (no signal, no `/proc`) its lease was given back. A driver on another host that does
not give its lease back is `unconfirmed`: it cannot commit once its lease expires (fencing), but
nothing here saw it end. Every stop is written to the event log here, once, whoever asked.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass

from spark_jobs.control import eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.driver import kill_launch, read_launch
from spark_jobs.control.lease import LeaseRecord, iso, now_utc
from spark_jobs.control.liveness import Liveness
from spark_jobs.control.processes import signal_process, wait_gone
from spark_jobs.control.store import STOP_REQUEST, control_store
from spark_jobs.control.supervision import mark_stopped
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)
GRACEFUL_TIMEOUT_S = 90.0
TERM_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class StopOutcome:
    pipeline: str
    outcome: str  # "graceful", "terminated", "killed", "unconfirmed" or "not_running"
    driver_pid: int | None
    seconds: float


def request_stop(home: WeirHome, pipeline: str, token: str | None, *, actor: str,
                 reason: str | None) -> None:
    control_store(home).put(pipeline, STOP_REQUEST, {
        "pipeline": pipeline, "token": token, "actor": actor, "reason": reason,
        "requested_at": iso(now_utc())})


def clear_stop_request(home: WeirHome, pipeline: str) -> None:
    control_store(home).delete(pipeline, STOP_REQUEST)


def lease_given_back(home: WeirHome, record: LeaseRecord, timeout_s: float,
                     poll_s: float = 0.2) -> bool:
    """Wait until `record`'s holder no longer holds the lease (released, or taken over)."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = leases.read(home, record.pipeline)
        if current is None or current.token != record.token:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def stop_driver(home: WeirHome, pipeline: str, *, actor: str, reason: str | None,
                intent: str = "stop", graceful_timeout_s: float = GRACEFUL_TIMEOUT_S,
                term_timeout_s: float = TERM_TIMEOUT_S) -> StopOutcome:
    """Stop the pipeline's driver, leave it stopped and record the stop (see the module
    docstring). The one entry point of `weir stop`, the stop and restart DAGs and the runbooks."""
    outcome = _stop(home, pipeline, actor=actor, reason=reason, intent=intent,
                    graceful_timeout_s=graceful_timeout_s, term_timeout_s=term_timeout_s)
    eventlog.record(pipeline, "stop", outcome.outcome, actor=actor, reason=reason, home=home,
                    details={"driver_pid": outcome.driver_pid, "seconds": round(outcome.seconds, 1),
                             "intent": intent})
    return outcome


def _stop(home: WeirHome, pipeline: str, *, actor: str, reason: str | None, intent: str,
          graceful_timeout_s: float, term_timeout_s: float) -> StopOutcome:
    started = time.monotonic()
    holder = leases.read(home, pipeline)
    if holder is not None and leases.liveness(holder) is Liveness.GONE:
        holder = None  # its process ended without giving the lease back: nothing to stop
    if holder is not None and not holder.is_driver:
        # Killing a restore, rewind or reset half-way would leave a half-installed checkpoint.
        raise UserError(f"{pipeline} is held by {holder.holder} (pid {holder.pid}); "
                        "no driver to stop: wait until it has finished")
    mark_stopped(home, pipeline, actor=actor, reason=reason, intent=intent)
    launch = read_launch(home, pipeline)
    if holder is None:
        # No lease holder; a launch that has not taken the lease yet is stopped outright.
        if launch is not None and launch.process.alive():
            kill_launch(home, pipeline, signal.SIGTERM)
            if not wait_gone(launch.process, term_timeout_s):
                kill_launch(home, pipeline, signal.SIGKILL)
            outcome = "terminated"
        else:
            outcome = "not_running"
        clear_stop_request(home, pipeline)
        return StopOutcome(pipeline, outcome, None, time.monotonic() - started)
    driver = holder.process
    request_stop(home, pipeline, holder.token, actor=actor, reason=reason)
    log.info("%s: stop requested of driver pid %d (%s)", pipeline, holder.pid, reason or "no reason")
    if driver.alive() is None:
        # No signal reaches another host, and no `/proc` tells whether it ended: only the lease
        # it gives back at its end does.
        seen = lease_given_back(home, holder, graceful_timeout_s)
        if not seen:
            log.warning("%s: driver pid %d on %s did not give its lease back within %.0fs; its "
                        "end is unconfirmed (fenced once the lease expires)", pipeline, holder.pid,
                        holder.host, graceful_timeout_s)
        clear_stop_request(home, pipeline)
        return StopOutcome(pipeline, "graceful" if seen else "unconfirmed", holder.pid,
                           time.monotonic() - started)
    outcome = "graceful"
    if not wait_gone(driver, graceful_timeout_s):
        outcome = "terminated"
        log.warning("%s: driver pid %d still up after %.0fs; SIGTERM", pipeline, holder.pid,
                    graceful_timeout_s)
        signal_process(holder.pid, signal.SIGTERM)
        if not wait_gone(driver, term_timeout_s):
            outcome = "killed"
            log.warning("%s: driver pid %d ignored SIGTERM; SIGKILL", pipeline, holder.pid)
            signal_process(holder.pid, signal.SIGKILL)
            kill_launch(home, pipeline, signal.SIGKILL)
            if not wait_gone(driver, 10.0):
                outcome = "unconfirmed"
    # spark-submit's JVM exits after its Python driver; make sure no part of the group lingers.
    if launch is not None and launch.process.alive() and not wait_gone(launch.process, 10.0):
        kill_launch(home, pipeline, signal.SIGKILL)
    leases.clear_stale(home, pipeline)
    clear_stop_request(home, pipeline)
    return StopOutcome(pipeline, outcome, holder.pid, time.monotonic() - started)


