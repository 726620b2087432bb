"""Restart policy arithmetic, Kafka lag from a progress event, and health verdicts from files."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

from spark_jobs.catalog import RestartPolicy
from spark_jobs.control import lease as leases
from spark_jobs.control.driver import spawn
from spark_jobs.control.health import assess
from spark_jobs.control.processes import wait_gone
from spark_jobs.control.progress import kafka_lag, progress_row
from spark_jobs.control.supervision import mark_stopped, next_backoff_s
from spark_jobs.home import WeirHome

NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)


def test_backoff_doubles_and_the_budget_is_per_window() -> None:
    policy = RestartPolicy(initial_backoff_s=2, max_backoff_s=10, max_restarts=4, window_s=600)
    at = [(NOW - dt.timedelta(seconds=s)).isoformat() for s in (500, 400, 300)]
    assert next_backoff_s([], policy, NOW) == 2
    assert next_backoff_s(at[:1], policy, NOW) == 4
    assert next_backoff_s(at[:2], policy, NOW) == 8
    assert next_backoff_s(at, policy, NOW) == 10  # capped
    assert next_backoff_s([*at, NOW.isoformat()], policy, NOW) is None  # budget spent
    later = NOW + dt.timedelta(seconds=150)  # the oldest restart left the window
    assert next_backoff_s([*at, NOW.isoformat()], policy, later) == 10


def test_kafka_lag_is_latest_minus_end_per_partition() -> None:
    sources = [{"description": "KafkaV2[Subscribe[events]]",
                "startOffset": {"events": {"0": 0, "1": 0}},
                "endOffset": json.dumps({"events": {"0": 90, "1": 40}}),
                "latestOffset": {"events": {"0": 100, "1": 40}}, "numInputRows": 130}]
    assert kafka_lag(sources) == (10, {"events-0": 10, "events-1": 0})
    files = [{"description": "FileStreamSource[file:/x]", "endOffset": {"logOffset": 3}}]
    assert kafka_lag(files) == (None, None)
    row = progress_row("p", {"name": "p_ingest", "batchId": 7, "numInputRows": 130,
                             "inputRowsPerSecond": "NaN", "timestamp": "2026-11-20T12:00:00.000Z",
                             "durationMs": {"triggerExecution": 900}, "sources": sources,
                             "stateOperators": [{"numRowsTotal": 5, "numRowsUpdated": 2}],
                             "eventTime": {"watermark": "2026-11-20T11:50:00.000Z"}}, 42)
    assert (row["batch_id"], row["kafka_lag"]) == (7, 10)
    assert (row["state_rows_total"], row["batch_duration_ms"]) == (5, 900)
    assert row["input_rows_per_second"] is None and row["watermark"].startswith("2026-11-20T11:50")


def test_health_follows_the_driver_files(home: WeirHome) -> None:
    assert assess(home, "playback", stall_after_s=60).verdict == "absent"
    launched = spawn(home, "playback", [sys.executable, "-c", "import time; time.sleep(30)"])
    assert assess(home, "playback", stall_after_s=60).verdict == "starting"
    # A driver taking the lease, beating, then stalling in a batch.
    held = leases.acquire(home, "playback")
    beat = {"pipeline": "playback", "pid": held.record.pid, "token": held.token, "state": "running",
            "at": leases.iso(leases.now_utc()), "started_at": leases.iso(leases.now_utc()),
            "queries": {"playback_ingest": {"active": True, "last_batch_id": 3,
                                            "trigger_active_since": leases.iso(leases.now_utc())}}}
    leases.write_json_atomically(leases.heartbeat_path(home, "playback"), beat)
    assert assess(home, "playback", stall_after_s=60).verdict == "running"
    long_ago = leases.iso(leases.now_utc() - dt.timedelta(seconds=120))
    beat["queries"]["playback_ingest"]["trigger_active_since"] = long_ago
    beat["tasks_progress_at"] = leases.iso(leases.now_utc())  # slow, but Spark tasks still finish
    leases.write_json_atomically(leases.heartbeat_path(home, "playback"), beat)
    assert assess(home, "playback", stall_after_s=60).verdict == "running"
    beat["tasks_progress_at"] = long_ago  # nothing moved for two minutes
    leases.write_json_atomically(leases.heartbeat_path(home, "playback"), beat)
    assert assess(home, "playback", stall_after_s=60).verdict == "stalled"
    # a query is judged by the tasks of its own process (the driver's second one: `spark_jobs.derived`)
    beat["tasks_progress_at"] = leases.iso(leases.now_utc())
    beat["queries"]["playback_ingest"]["tasks_progress_at"] = long_ago
    leases.write_json_atomically(leases.heartbeat_path(home, "playback"), beat)
    assert assess(home, "playback", stall_after_s=60).verdict == "stalled"
    held.release()
    subprocess.run(["kill", "-9", str(launched.pid)], check=True)
    assert wait_gone(launched.process, 10)
    assert assess(home, "playback", stall_after_s=60).verdict == "dead"
    mark_stopped(home, "playback", actor="tester", reason="test")
    assert assess(home, "playback", stall_after_s=60).verdict == "stopped"
