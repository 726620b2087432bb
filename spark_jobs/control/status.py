"""The status of a pipeline, for `weir status` and runbooks: its state, driver, restarts, and per
query the last batch and when progress was last reported.

States: RUNNING, STARTING, STALLED, STOPPING, STOPPED, RESTARTING (the supervisor is about to
start a successor), FAILED (the driver died, or the restart budget is spent), NOT_DEPLOYED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_jobs import catalog
from spark_jobs.control import eventlog, progress
from spark_jobs.control.health import assess
from spark_jobs.control.lease import iso, now_utc
from spark_jobs.control.supervision import SupervisorState, recent_restarts, stopped_marker
from spark_jobs.control.supervisor import automatic_restarts
from spark_jobs.home import WeirHome
from spark_jobs.topology import queries_of, query_name

if TYPE_CHECKING:
    from spark_jobs.catalog import Pipeline

STATES = {"running": "RUNNING", "starting": "STARTING", "stalled": "STALLED", "stopping": "STOPPING",
          "stopped": "STOPPED", "absent": "NOT_DEPLOYED"}


def _queries_from_history(home: WeirHome, pipeline: Pipeline) -> list[dict[str, Any]]:
    expected = tuple(query_name(pipeline, query) for query in queries_of(pipeline))
    latest = progress.latest_by_query(home, pipeline.name, expected=expected)
    return [{"name": name, "last_batch_id": row["batch_id"],
             "last_progress_at": iso(row["progress_at"]) if row["progress_at"] else None}
            for name, row in sorted(latest.items())]


def pipeline_status(home: WeirHome, name: str) -> dict[str, Any]:
    pipeline = catalog.load(name)
    health = assess(home, name, stall_after_s=pipeline.restart_policy.stall_after_s)
    supervisor = SupervisorState.load(home, name)
    state = STATES.get(health.verdict, "FAILED")
    if health.verdict in ("dead", "stopped"):
        marker = stopped_marker(home, name)
        if supervisor.state == "restarting" or (marker and marker.get("intent") == "restart"):
            state = "RESTARTING"
        elif health.verdict == "dead":
            state = "FAILED"
    beat = health.heartbeat or {}
    queries = [{"name": qname, "last_batch_id": q.get("last_batch_id"),
                "last_progress_at": q.get("last_progress_at")}
               for qname, q in sorted((beat.get("queries") or {}).items())]
    if not queries or health.verdict not in ("running", "starting", "stalled", "stopping"):
        queries = _queries_from_history(home, pipeline) or queries
    return {
        "pipeline": name,
        "state": state,
        "detail": health.detail,
        "driver_pid": health.driver_pid,
        "restarts": len(recent_restarts(list(automatic_restarts(eventlog.read(home, name))),
                                        pipeline.restart_policy, now_utc())),
        "supervisor": supervisor.state,
        "heartbeat_at": beat.get("at"),
        "queries": queries,
    }


def all_status(home: WeirHome, names: list[str] | None = None) -> list[dict[str, Any]]:
    return [pipeline_status(home, n) for n in (names or catalog.names())]
