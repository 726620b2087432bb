"""Recovery benchmark: time from kill -9 of a supervised streaming driver to its detection, and to
the first committed micro-batch of its successor — through the real Airflow supervisor, driven
inline (no `make up` needed):

    python -m bench.worker recovery '{"workdir": "DIR"}'    # as `make bench` runs it
    .venv/bin/python bench/recovery.py [--kills 3] [--workdir DIR] [--json]

`StreamSupervisorOperator` executes and defers with `DriverWatchTrigger`; the trigger runs as the
triggerer runs it (rebuilt from its serialised form, in its own event loop, already watching when
the driver is killed); its event resumes the operator, which cleans up and relaunches under the
pipeline's restart policy — `weir_airflow.inline` drives those steps in this process, with a fresh
WEIR_HOME under WORKDIR, the catalog's `playback` pipeline, and `spark_default` on local[2] with
small driver settings. Real spark-submit drivers, real SIGKILL.

Each round waits until the stream is RUNNING with a committed batch, writes a landing file (so the
successor has a batch to commit), SIGKILLs the lease holder and times
- detection: kill → the trigger's `dead` event (its `detected_at`);
- successor started: → the successor's launch, → its lease (the driver is up);
- first batch: → the successor's first ingest batch with input rows starting (its progress
  timestamp), and committed (timestamp + trigger duration).
The restart policy backs off exponentially (2 s, 4 s, 8 s, …): later kills include longer waits,
reported as `backoff_s`. After the rounds, silver must hold every valid event exactly once and
bronze every input line exactly once. Goals on the reference machine: detection ≤ 10 s, first
committed batch of the successor ≤ 45 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: `python bench/recovery.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.home import REPO_ROOT

log = logging.getLogger("bench.recovery")
PIPELINE = "playback"
MASTER = "local[2]"
GOAL_DETECTION_S = 10.0
GOAL_FIRST_COMMIT_S = 45.0
STARTUP_S = 480.0           # the first driver: JVM, Delta tables, first batch, on a loaded machine
EVENT_S = 60.0              # kill → the trigger's event
SUCCESSOR_S = 300.0         # the successor's lease, then its first committed batch
SETTLE_S = 120.0            # every input line through to silver after the last round
RESULTS = REPO_ROOT / "bench" / "results" / "recovery.jsonl"


@dataclass(frozen=True)
class Kill:
    """One kill -9 and the successor's way back, as wall-clock times (UTC)."""

    victim_pid: int
    successor_pid: int
    successor_batch_id: int
    backoff_s: float | None
    code_changed: bool        # the deploy gate re-checked changed code during the restart
    killed_at: dt.datetime
    detected_at: dt.datetime
    launched_at: dt.datetime
    lease_at: dt.datetime
    batch_started_at: dt.datetime
    committed_at: dt.datetime
    batch_durations_ms: dict[str, int]   # Spark's split of that batch (addBatch, walCommit, ...)

    def seconds(self) -> dict[str, Any]:
        def s(a: dt.datetime, b: dt.datetime) -> float:
            return round((b - a).total_seconds(), 2)

        return {
            "detection_s": s(self.killed_at, self.detected_at),
            "first_commit_s": s(self.killed_at, self.committed_at),
            "breakdown": {
                "kill_to_detection_s": s(self.killed_at, self.detected_at),
                "detection_to_launch_s": s(self.detected_at, self.launched_at),
                "launch_to_lease_s": s(self.launched_at, self.lease_at),
                "detection_to_lease_s": s(self.detected_at, self.lease_at),
                "lease_to_first_batch_start_s": s(self.lease_at, self.batch_started_at),
                "first_batch_start_to_commit_s": s(self.batch_started_at, self.committed_at),
            },
            "backoff_s": self.backoff_s, "code_changed": self.code_changed,
            "victim_pid": self.victim_pid, "successor_pid": self.successor_pid,
            "successor_batch_id": self.successor_batch_id,
            "first_batch_durations_ms": self.batch_durations_ms,
            "killed_at": self.killed_at.isoformat(timespec="milliseconds"),
        }


@contextmanager
def inline_airflow(workdir: Path) -> Iterator[Path]:
    """The environment the supervisor runs in: a fresh WEIR_HOME and AIRFLOW_HOME under `workdir`,
    `spark_default` on a small local master, and `plugins/` on sys.path as Airflow puts it."""
    from_here = {"WEIR_HOME": str(workdir / "weir"), "AIRFLOW_HOME": str(workdir / "airflow"),
                 "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                 "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
                 "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
                 "WEIR_SPARK_LOG_LEVEL": os.environ.get("WEIR_SPARK_LOG_LEVEL", "WARN")}
    for name in ("weir", "airflow"):
        shutil.rmtree(workdir / name, ignore_errors=True)
        (workdir / name).mkdir(parents=True)
    saved = {k: os.environ.get(k) for k in [*from_here, "AIRFLOW_CONN_SPARK_DEFAULT"]}
    os.environ.update(from_here)
    if str(REPO_ROOT / "plugins") not in sys.path:
        sys.path.insert(0, str(REPO_ROOT / "plugins"))
    from tests.support.inline import spark_connection

    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_connection(MASTER)
    try:
        yield workdir / "weir"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def successor_first_batch(home: Any, victim_pid: int, since: dt.datetime) -> dict[str, Any] | None:
    """The first ingest batch with input rows of a driver other than the victim, after the kill."""
    from spark_jobs.control import progress

    for row in progress.read(home, PIPELINE):
        if (row["query"] == f"{PIPELINE}_ingest" and row["driver_pid"] != victim_pid
                and row["num_input_rows"] and row["progress_at"] and row["progress_at"] >= since):
            return row
    return None


def restart_backoff_s(home: Any, since: dt.datetime) -> float | None:
    """The back-off the supervisor applied before the restart that followed `since`."""
    from spark_jobs.control import eventlog

    for event in eventlog.read(home, PIPELINE):
        if event["action"] == "restart" and event["outcome"] == "launched" and event["event_time"] >= since:
            return (event["details"] or {}).get("backoff_s")
    return None


class InlineSupervision:
    """The supervisor of one deployment, driven inline, and the trigger watching its driver."""

    def __init__(self, home: Any, operator: Any, context: Any) -> None:
        self.home = home
        self.operator = operator
        self.context = context
        self.deferred: Any = None
        self.watch: Any = None

    def deploy(self) -> None:
        from tests.support.inline import expect_deferred

        self.follow(expect_deferred(self.operator.execute, self.context))

    def follow(self, deferred: Any) -> None:
        """The operator deferred: run its trigger from now on, as the triggerer would."""
        from tests.support.inline import TriggerRun

        if self.watch is not None:
            self.watch.cancel()
        self.deferred, self.watch = deferred, TriggerRun(deferred.trigger)

    def kill_and_recover(self, index: int, timeout_s: float) -> tuple[Kill, Any]:
        from spark_jobs.control import lease as leases
        from spark_jobs.control.deploy_gate import code_fingerprint
        from spark_jobs.control.driver import read_launch
        from spark_jobs.generator import generate
        from tests.support.inline import resume_until, wait_running
        from tests.support.polling import wait_for

        wait_running(self.home, PIPELINE, timeout_s)
        if self.watch.done():
            raise RuntimeError(f"the driver watch fired before the kill: {self.watch.event(0)}")
        victim = leases.holder(self.home, PIPELINE)
        if victim is None:
            raise RuntimeError(f"{PIPELINE} is RUNNING but no live driver holds its lease")
        fingerprint = code_fingerprint()
        written = generate(self.home.landing(PIPELINE), files=1, sessions_per_file=10,
                           seed=900_000 + index, prefix=f"kill{index}")
        killed_at = dt.datetime.now(dt.UTC)
        os.kill(victim.pid, signal.SIGKILL)
        event = self.watch.event(EVENT_S)
        if event["verdict"] != "dead":
            raise RuntimeError(f"expected the trigger to report the driver dead, got {event}")
        log.info("kill %d: driver pid %d reported %s after %.1fs", index + 1, victim.pid,
                 event["verdict"], (parse_time(event["detected_at"]) - killed_at).total_seconds())
        # the operator wakes, cleans up, backs off and relaunches, then defers to a new watch
        self.follow(resume_until(self.operator, self.deferred, self.context, method_name="on_driver_event",
                                 timeout_s=timeout_s, event=event))
        launch = read_launch(self.home, PIPELINE)
        successor = wait_for("the successor's lease", lambda: (
            (r := leases.read(self.home, PIPELINE)) is not None and r.pid != victim.pid and r), timeout_s)
        batch = wait_for("the successor's first committed batch",
                         lambda: successor_first_batch(self.home, victim.pid, killed_at), timeout_s,
                         poll_s=1.0)
        kill = Kill(
            victim_pid=victim.pid, successor_pid=successor.pid, successor_batch_id=batch["batch_id"],
            backoff_s=restart_backoff_s(self.home, killed_at),
            code_changed=code_fingerprint() != fingerprint, killed_at=killed_at,
            detected_at=parse_time(event["detected_at"]),
            launched_at=parse_time(launch.launched_at) if launch else killed_at,
            lease_at=parse_time(successor.acquired_at), batch_started_at=batch["progress_at"],
            committed_at=batch["progress_at"] + dt.timedelta(milliseconds=batch["batch_duration_ms"] or 0),
            batch_durations_ms=json.loads(batch["durations_ms"] or "{}"))
        return kill, written

    def stop(self) -> dict[str, Any]:
        """Stop the stream at a batch boundary through P_stop's operator; the supervisor ends."""
        from weir_airflow.operators import StreamStopOperator

        outcome = StreamStopOperator(task_id="stop", pipeline=PIPELINE,
                                     reason="recovery benchmark done").execute(self.context)
        event = self.watch.event(EVENT_S)
        if event["verdict"] != "stopped":   # resuming would restart it: leave that to tear-down
            return {"stop": outcome["outcome"], "supervisor_ended": False, "stop_event": event}
        ended = self.operator.on_driver_event(self.context, event) is None
        return {"stop": outcome["outcome"], "supervisor_ended": ended}


def exactly_once(home: Any, expected_events: set[str], expected_lines: int) -> dict[str, Any]:
    """Silver: every valid event once; bronze: every input line once (read with delta-rs, no JVM)."""

    from spark_jobs import catalog
    from spark_jobs.control.platform_tables import read
    from spark_jobs.layers import PipelineTables

    tables = PipelineTables.of(home, catalog.load(PIPELINE))
    ids = [r["event_id"] for r in read(tables.silver, columns=["event_id"])]
    bronze = read(tables.bronze, columns=["source", "position"])
    distinct_ids = set(ids)
    bronze_keys = {(r["source"], r["position"]) for r in bronze}
    counts = {
        "silver_count": len(ids), "silver_distinct": len(distinct_ids),
        "expected_valid_events": len(expected_events),
        "silver_lost": len(expected_events - distinct_ids),
        "silver_extra": len(distinct_ids - expected_events),
        "bronze_count": len(bronze), "bronze_distinct": len(bronze_keys), "expected_lines": expected_lines,
    }
    ok = (counts["silver_count"] == counts["silver_distinct"] == counts["expected_valid_events"]
          and distinct_ids == expected_events
          and counts["bronze_count"] == counts["bronze_distinct"] == expected_lines)
    return {"exactly_once": ok, **counts}


def silver_has(home: Any, expected: set[str]) -> bool:
    from spark_jobs import catalog
    from spark_jobs.control.platform_tables import read
    from spark_jobs.layers import PipelineTables

    silver = PipelineTables.of(home, catalog.load(PIPELINE)).silver
    return {r["event_id"] for r in read(silver, columns=["event_id"])} >= expected


def median_of(kills: list[dict[str, Any]], key: str, part: str | None = None) -> float:
    return round(statistics.median(k[part][key] if part else k[key] for k in kills), 2)


def measure(*, quick: bool = False, workdir: Path, kills: int | None = None) -> dict[str, Any]:
    """Kill the supervised driver 1 (`quick`) or 3 times; medians, per-kill values and their
    breakdown, and whether the tables stayed exactly once (see the module docstring)."""
    rounds = kills or (1 if quick else 3)
    workdir = workdir.absolute()
    started = time.monotonic()
    load_before = os.getloadavg()
    with inline_airflow(workdir) as root:
        from weir_airflow.operators import StreamSupervisorOperator

        from spark_jobs.generator import generate
        from spark_jobs.home import WeirHome
        from tests.support.inline import SMALL_DRIVER_CONF, task_context, tear_down
        from tests.support.polling import WaitTimeout, wait_for

        home = WeirHome(root)
        written = generate(home.landing(PIPELINE), files=2, sessions_per_file=4 if quick else 8,
                           seed=7, prefix="start")
        operator = StreamSupervisorOperator(task_id="supervise", pipeline=PIPELINE,
                                            spark_conf=SMALL_DRIVER_CONF)
        run = InlineSupervision(home, operator, task_context("recovery-bench"))
        measured: list[dict[str, Any]] = []
        try:
            run.deploy()
            for index in range(rounds):
                kill, more = run.kill_and_recover(index, STARTUP_S if index == 0 else SUCCESSOR_S)
                written.add(more)
                measured.append(kill.seconds())
                log.info("kill %d: detection %.1fs, first commit of the successor %.1fs", index + 1,
                         measured[-1]["detection_s"], measured[-1]["first_commit_s"])
            try:
                wait_for("every valid event in silver", lambda: silver_has(home, written.event_ids),
                         SETTLE_S, poll_s=2.0)
            except WaitTimeout as err:
                log.warning("%s; counting what is there", err)
            stopped = run.stop()
        finally:
            if run.watch is not None:
                run.watch.cancel()
            tear_down(home, PIPELINE)
        checked = exactly_once(home, written.event_ids, written.lines)
    result: dict[str, Any] = {
        "detection_s": median_of(measured, "detection_s"),
        "first_commit_s": median_of(measured, "first_commit_s"),
        "detection_s_max": max(k["detection_s"] for k in measured),
        "first_commit_s_max": max(k["first_commit_s"] for k in measured),
        "breakdown": {key: median_of(measured, key, "breakdown") for key in measured[0]["breakdown"]},
        "kills": measured,
        **checked,
        **stopped,
        "goals": {"detection_s": GOAL_DETECTION_S, "first_commit_s": GOAL_FIRST_COMMIT_S},
        "pipeline": PIPELINE, "master": MASTER, "driver_conf": SMALL_DRIVER_CONF, "quick": quick,
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
        "cpus": os.cpu_count(), "wall_s": round(time.monotonic() - started, 1),
    }
    result["goals_met"] = (result["detection_s_max"] <= GOAL_DETECTION_S
                           and result["first_commit_s_max"] <= GOAL_FIRST_COMMIT_S
                           and checked["exactly_once"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="work folder (default: a temporary one, removed afterwards)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="weir-recovery-"))
    try:
        result = measure(workdir=workdir, kills=args.kills)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    result["at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS, "a", encoding="utf-8") as out:
        out.write(json.dumps(result, default=str) + "\n")
    print(json.dumps(result, default=str) if args.json else
          f"detection median {result['detection_s']:.1f}s, max {result['detection_s_max']:.1f}s "
          f"(goal {GOAL_DETECTION_S:.0f}s); first commit of the successor median "
          f"{result['first_commit_s']:.1f}s, max {result['first_commit_s_max']:.1f}s "
          f"(goal {GOAL_FIRST_COMMIT_S:.0f}s); exactly once: {result['exactly_once']}; "
          f"load average {result['load_average_before'][0]:.1f} on {result['cpus']} CPUs")
    return 0 if result["goals_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
