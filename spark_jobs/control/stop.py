"""Stopping a pipeline's driver: at a batch boundary first, by force only when it does not comply.

1. mark the pipeline intentionally stopped (the supervisor will not restart it);
2. write a stop request addressed to the lease holder; its heartbeat thread sees it within a second
   and the driver stops its queries between two micro-batches;
3. after `graceful_timeout_s`, SIGTERM (the driver's handler stops at a batch boundary as well);
4. after `term_timeout_s` more, SIGKILL the whole launch group (the replay of an interrupted batch
   is a no-op, so even this loses nothing).
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass

from spark_jobs.control import lease as leases
from spark_jobs.control.driver import kill_launch, read_launch
from spark_jobs.control.heartbeat import stop_request_path
from spark_jobs.control.lease import iso, now_utc, write_json_atomically
from spark_jobs.control.processes import signal_process, wait_gone
from spark_jobs.control.supervision import mark_stopped
from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)
GRACEFUL_TIMEOUT_S = 90.0
TERM_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class StopOutcome:
    pipeline: str
    outcome: str  # "graceful", "terminated", "killed" or "not_running"
    driver_pid: int | None
    seconds: float


def request_stop(home: WeirHome, pipeline: str, token: str | None, *, actor: str,
                 reason: str | None) -> None:
    write_json_atomically(stop_request_path(home, pipeline), {
        "pipeline": pipeline, "token": token, "actor": actor, "reason": reason,
        "requested_at": iso(now_utc())})


def stop_driver(home: WeirHome, pipeline: str, *, actor: str, reason: str | None,
                intent: str = "stop", graceful_timeout_s: float = GRACEFUL_TIMEOUT_S,
                term_timeout_s: float = TERM_TIMEOUT_S) -> StopOutcome:
    """Stop the pipeline's driver and leave it stopped (see the module docstring)."""
    started = time.monotonic()
    mark_stopped(home, pipeline, actor=actor, reason=reason, intent=intent)
    holder = leases.holder(home, pipeline)
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
        stop_request_path(home, pipeline).unlink(missing_ok=True)
        return StopOutcome(pipeline, outcome, None, time.monotonic() - started)
    driver = holder.process
    request_stop(home, pipeline, holder.token, actor=actor, reason=reason)
    log.info("%s: stop requested of driver pid %d (%s)", pipeline, holder.pid, reason or "no reason")
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
            wait_gone(driver, 10.0)
    # spark-submit's JVM exits after its Python driver; make sure no part of the group lingers.
    if launch is not None and launch.process.alive() and not wait_gone(launch.process, 10.0):
        kill_launch(home, pipeline, signal.SIGKILL)
    leases.clear_stale(home, pipeline)
    stop_request_path(home, pipeline).unlink(missing_ok=True)
    return StopOutcome(pipeline, outcome, holder.pid, time.monotonic() - started)


