"""The driver's side of supervision: heartbeat, progress listener and stop requests.

`DriverMonitor` runs inside the streaming driver while it holds the lease. Every second its thread
writes the pipeline's heartbeat to the control store (`spark_jobs.control.store`: the file
`control/<P>/heartbeat.json`, replaced atomically, or a row in PostgreSQL) with the driver's pid and,
per query, the last batch id, the time of the last progress and whether a trigger is running and
since when — what the supervisor needs to tell RUNNING from STALLED. The same thread polls the
pipeline's stop request (`stop-request`): a request addressed to this driver sets the stop event, and the
driver stops its queries at a batch boundary. A driver that lost its lease (`Lease.lost`) writes
no more heartbeats — the file is its successor's — and stops; leaving the monitor then raises
`LeaseLostError`, so the driver exits non-zero whatever stopped its queries.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_jobs.control import progress as progress_table
from spark_jobs.control.lease import (
    Lease,
    LeaseLostError,
    iso,
    now_utc,
    parse_iso,
)
from spark_jobs.control.store import HEARTBEAT, STOP_REQUEST, control_store
from spark_jobs.home import WeirHome

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)
HEARTBEAT_EVERY_S = 1.0
LISTENER_DRAIN_S = 10.0   # at most this long for the progress events already posted at exit


def read_heartbeat(home: WeirHome, pipeline: str) -> dict[str, Any] | None:
    return control_store(home).get(pipeline, HEARTBEAT)


def read_stop_request(home: WeirHome, pipeline: str) -> dict[str, Any] | None:
    """The pipeline's pending stop request, if any (to whichever driver it is addressed)."""
    return control_store(home).get(pipeline, STOP_REQUEST)


def heartbeat_age_s(beat: dict[str, Any] | None) -> float | None:
    if not beat or not beat.get("at"):
        return None
    return (now_utc() - parse_iso(beat["at"])).total_seconds()


def stop_requested_for(home: WeirHome, lease: Lease) -> dict[str, Any] | None:
    """The stop request addressed to this lease holder (by token, or to whoever holds the lease
    when it was made after this lease was taken)."""
    request = read_stop_request(home, lease.pipeline)
    if not request:
        return None
    token = request.get("token")
    if token == lease.token:
        return request
    if token is None and parse_iso(request["requested_at"]) >= parse_iso(lease.record.acquired_at):
        return request
    return None


class DriverMonitor:
    """Listener + heartbeat + stop-request polling for one driver holding `lease`."""

    def __init__(self, spark: SparkSession, home: WeirHome, lease: Lease,
                 stop: threading.Event | None = None, every_s: float = HEARTBEAT_EVERY_S) -> None:
        self.spark = spark
        self.home = home
        self.lease = lease
        self.stop = stop
        self.every_s = every_s
        self.started_at = iso(now_utc())
        self.queries: list[StreamingQuery] = []
        self._elsewhere: Callable[[], dict[str, dict[str, Any]]] | None = None
        self.state = "starting"
        self._per_query: dict[str, dict[str, Any]] = {}
        self._task_fingerprint: tuple[Any, ...] | None = None
        self.tasks_progress_at: str | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._writer = progress_table.ProgressWriter(home)
        self._listener: Any = None
        self._thread = threading.Thread(target=self._loop, name="weir-heartbeat", daemon=True)

    @property
    def pipeline(self) -> str:
        return self.lease.pipeline

    def __enter__(self) -> DriverMonitor:
        self._writer.start()
        self._listener = progress_table.make_listener(self.pipeline, self._writer, self._on_progress)
        self.spark.streams.addListener(self._listener)
        self.beat()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._thread.join(5.0)
        try:
            # Spark hands progress events to the listener on a thread of its own, after a query's
            # batch ends: wait until those posted so far are delivered (the last batch's progress
            # is recorded), then remove the listener, so none is delivered once this process's
            # Python side is gone (Spark logged that as an ERROR at every `--once` exit).
            self.spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(  # type: ignore[union-attr]
                int(LISTENER_DRAIN_S * 1000))
        except Exception:  # a timeout: what is still queued is not recorded
            log.warning("%s: progress events still queued after %.0fs at exit", self.pipeline,
                        LISTENER_DRAIN_S, exc_info=True)
        try:
            self.spark.streams.removeListener(self._listener)
        except Exception:  # the JVM may already be gone when the driver is torn down
            log.debug("%s: listener not removed", self.pipeline, exc_info=True)
        self._writer.close()
        self.state = "stopped"
        if self.lease.lost is not None:
            # Whatever ended the queries (a fenced batch failing them, or our own stop), this
            # driver was fenced off: say so, and leave with an error.
            raise LeaseLostError(f"{self.pipeline}: driver pid {os.getpid()} lost its lease "
                                 f"(fencing token {self.lease.fencing_token}): {self.lease.lost}")
        self.beat()

    def watch(self, queries: list[StreamingQuery], *,
              elsewhere: Callable[[], dict[str, dict[str, Any]]] | None = None) -> None:
        """Report these queries in the heartbeat (the driver calls it once they are started), and
        the states `elsewhere` returns: those of the queries the driver runs in a process of its
        own (`spark_jobs.derived`), each as that process reported it."""
        self.queries = list(queries)
        self._elsewhere = elsewhere
        self.state = "running"

    def _on_progress(self, progress: dict[str, Any]) -> None:
        name = progress.get("name") or progress.get("id")
        with self._lock:
            entry = self._per_query.setdefault(name, {})
            entry["last_batch_id"] = progress.get("batchId")
            entry["last_progress_at"] = progress.get("timestamp")
            entry["last_input_rows"] = progress.get("numInputRows")
            entry["progress_seen_at"] = iso(now_utc())

    def _query_states(self) -> dict[str, dict[str, Any]]:
        now = iso(now_utc())
        with self._lock:
            states = {name: dict(entry) for name, entry in self._per_query.items()}
        for query in self.queries:
            name = query.name or query.id
            entry = states.setdefault(name, {})
            try:
                status = query.status
                active = query.isActive
            except Exception:  # a py4j error means the JVM side is going away
                status, active = {}, False
            previous = self._per_query.get(name, {})
            trigger_active = bool(status.get("isTriggerActive"))
            since = previous.get("trigger_active_since") if trigger_active else None
            if trigger_active and since is None:
                since = now
            with self._lock:
                self._per_query.setdefault(name, {})["trigger_active_since"] = since
            entry.update(active=active, is_trigger_active=trigger_active, trigger_active_since=since,
                         is_data_available=bool(status.get("isDataAvailable")),
                         message=status.get("message"), tasks_progress_at=self.tasks_progress_at)
        return states

    def query_states(self) -> dict[str, dict[str, Any]]:
        """Every query's state: this process's, and those reported from elsewhere."""
        self._note_task_progress()
        states = self._query_states()
        if self._elsewhere is not None:
            states.update(self._elsewhere())
        return states

    def _note_task_progress(self) -> None:
        """Remember when Spark last made progress inside a batch (a task finished, a stage or job
        started), so a long but working micro-batch is never mistaken for a stalled one."""
        try:
            tracker = self.spark.sparkContext.statusTracker()
            stages = sorted(tracker.getActiveStageIds())
            done = 0
            for stage in stages:
                info = tracker.getStageInfo(stage)
                if info is not None:
                    done += info.numCompletedTasks
            fingerprint: tuple[Any, ...] = (tuple(stages), done, tuple(sorted(tracker.getActiveJobsIds())))
        except Exception:  # the JVM side is going away
            return
        if fingerprint != self._task_fingerprint:
            self._task_fingerprint = fingerprint
            self.tasks_progress_at = iso(now_utc())

    def beat(self) -> None:
        """Write the heartbeat once (atomic rename)."""
        queries = self.query_states()
        payload = {
            "pipeline": self.pipeline, "pid": os.getpid(), "host": self.lease.record.host,
            "token": self.lease.token, "at": iso(now_utc()), "started_at": self.started_at,
            "state": self.state, "tasks_progress_at": self.tasks_progress_at, "queries": queries,
        }
        self.lease.store.put(self.pipeline, HEARTBEAT, payload)

    def stop_request(self) -> dict[str, Any] | None:
        """The pending stop request addressed to this driver, if any."""
        return stop_requested_for(self.home, self.lease)

    def _loop(self) -> None:
        while not self._closed.wait(self.every_s):
            try:
                self.lease.check()
            except LeaseLostError:
                pass  # recorded in `lease.lost`, handled below
            except Exception:
                log.exception("%s: lease check failed", self.pipeline)
            if self.lease.lost is not None:
                if self.stop is not None and not self.stop.is_set():
                    self.state = "stopping"
                    self.stop.set()
                continue
            try:
                self.beat()
                request = self.stop_request()
                if request and self.stop is not None and not self.stop.is_set():
                    log.info("%s: stop requested by %s (%s); stopping at a batch boundary",
                             self.pipeline, request.get("actor"), request.get("reason") or "no reason")
                    self.state = "stopping"
                    self.stop.set()
            except Exception:
                log.exception("%s: heartbeat failed", self.pipeline)
