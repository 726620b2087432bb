"""How a pipeline's driver is doing, judged from the files it and its launcher leave under
`control/<P>/` — no JVM, no Airflow: the deferrable trigger, the operator and `weir status` all
call `assess`.

Whether the lease holder still counts is `spark_jobs.control.liveness`'s judgement, applied by
`lease.liveness`; this module adds what the heartbeat tells about a live holder, and what the
cluster manager tells about a driver it runs (`backends`): a YARN application that has ended is a
dead driver at once, before its lease would expire and wherever its host is.

Verdicts: `running`; `starting` (launched, no query progress reported yet); `stalled` (its lease
expired while its process may still run, or its heartbeat stopped, or a micro-batch has run
longer than the policy's `stall_after_s` with no Spark task finishing meanwhile, or it never
finished starting); `stopping` (a stop was requested and it is still up); `dead` (it was
launched or held the lease and is gone); `stopped` (intentionally stopped, nothing running);
`absent` (never deployed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark_jobs.control import lease as leases
from spark_jobs.control.backends import DriverState, LocalProcessBackend
from spark_jobs.control.driver import LaunchRecord, read_launch
from spark_jobs.control.heartbeat import heartbeat_age_s, read_heartbeat, read_stop_request
from spark_jobs.control.lease import now_utc, parse_iso
from spark_jobs.control.liveness import Liveness, lease_ttl_s
from spark_jobs.control.supervision import stopped_marker
from spark_jobs.home import WeirHome

STARTUP_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Health:
    verdict: str
    detail: str
    driver_pid: int | None = None
    launch_pid: int | None = None
    heartbeat: dict[str, Any] | None = field(default=None, compare=False)


def _age_s(text: str | None) -> float | None:
    return None if not text else (now_utc() - parse_iso(text)).total_seconds()


def _ended_in_cluster(launch: LaunchRecord | None, state: DriverState | None) -> str | None:
    """How the cluster manager reports the end of a driver it ran; None while it runs, when it
    cannot tell, or for a local process (whose end `/proc` and the lease tell)."""
    if launch is None or state is None or state.alive is not False:
        return None
    if launch.driver.backend == LocalProcessBackend.name:
        return None
    return launch.backend.describe(launch.driver)


def assess(home: WeirHome, pipeline: str, *, stall_after_s: float,
           heartbeat_stale_s: float | None = None,
           startup_timeout_s: float = STARTUP_TIMEOUT_S) -> Health:
    """The verdict on `pipeline`'s driver; a heartbeat older than `heartbeat_stale_s` (default: the
    lease TTL) from a live holder means it is stuck."""
    heartbeat_stale_s = lease_ttl_s() if heartbeat_stale_s is None else heartbeat_stale_s
    record = leases.read(home, pipeline)
    holder_state = leases.liveness(record) if record is not None else None
    launch = read_launch(home, pipeline)
    launch_state = launch.driver.state() if launch is not None else None
    launch_alive = launch_state is DriverState.RUNNING
    launch_pid = launch.pid if launch else None
    beat = read_heartbeat(home, pipeline)
    ended = _ended_in_cluster(launch, launch_state)
    if ended is not None and (record is None or record.process.alive() is not True):
        # The cluster manager saw its driver end: no need to wait for its lease to lapse.
        marker = stopped_marker(home, pipeline)
        return Health("stopped" if marker else "dead", ended, None, launch_pid, beat)
    if record is not None and holder_state is Liveness.LIVE:
        if beat is None or beat.get("token") != record.token:
            return Health("starting", "lease taken, no heartbeat yet", record.pid, launch_pid)
        age = heartbeat_age_s(beat) or 0.0
        if age > heartbeat_stale_s:
            return Health("stalled", f"heartbeat {age:.0f}s old while pid {record.pid} lives",
                          record.pid, launch_pid, beat)
        if read_stop_request(home, pipeline) is not None or beat.get("state") == "stopping":
            return Health("stopping", "stop requested", record.pid, launch_pid, beat)
        for name, query in (beat.get("queries") or {}).items():
            # the Spark tasks of the query's own process (`spark_jobs.derived`: not the heartbeat's)
            idle_tasks = _age_s(query.get("tasks_progress_at") or beat.get("tasks_progress_at"))
            busy = _age_s(query.get("trigger_active_since"))
            if (busy is not None and busy > stall_after_s and query.get("active", True)
                    and (idle_tasks is None or idle_tasks > stall_after_s)):
                return Health("stalled", f"{name}: micro-batch running for {busy:.0f}s with no Spark "
                              f"task finished for {idle_tasks or busy:.0f}s", record.pid, launch_pid, beat)
        if beat.get("state") == "starting" or not beat.get("queries"):
            started = _age_s(beat.get("started_at")) or 0.0
            if started > startup_timeout_s:
                return Health("stalled", f"still starting after {started:.0f}s", record.pid, launch_pid, beat)
            return Health("starting", "queries starting", record.pid, launch_pid, beat)
        return Health("running", "heartbeat fresh", record.pid, launch_pid, beat)
    marker = stopped_marker(home, pipeline)
    if record is not None and holder_state is Liveness.EXPIRED and record.process.alive() is not False:
        # Paused, hung or out of reach: fenced from committing, but possibly still there.
        return Health("stalled", f"lease of pid {record.pid} on {record.host} not renewed for "
                      f"{record.renewal_age_s():.0f}s", record.pid, launch_pid, beat)
    if record is not None:
        # The lease holder is gone (its spark-submit JVM may linger: it is cleaned up).
        verdict = "stopped" if marker and not launch_alive else "dead"
        return Health(verdict, f"driver pid {record.pid} is gone", None, launch_pid, beat)
    if launch_alive and launch is not None:
        started = _age_s(launch.launched_at) or 0.0
        if marker is None and started > startup_timeout_s:
            return Health("stalled", f"launched {started:.0f}s ago, lease never taken", None, launch_pid)
        return Health("stopping" if marker else "starting", "launched, lease not taken yet",
                      None, launch_pid)
    if marker is not None:
        return Health("stopped", f"stopped by {marker.get('actor')}: {marker.get('reason') or 'no reason'}",
                      None, launch_pid, beat)
    if launch is not None:
        return Health("dead", f"launch pid {launch.pid} ended", None, launch_pid, beat)
    return Health("absent", "never deployed")
