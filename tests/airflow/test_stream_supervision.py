"""The control plane end to end with real drivers (spark-submit, detached) and the real operators
and trigger: double deploy → one driver; triggerer restart → the live driver is adopted; kill -9
→ restarted automatically; on-call restart with a reason → in the event log; stop → stays
stopped; and every layer exactly once throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from spark_jobs import catalog
from spark_jobs.control import eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.driver import read_launch
from spark_jobs.control.status import pipeline_status
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from tests.airflow.supervision_harness import DRIVER_CONF, LOCAL_MASTER, context
from tests.helpers import assert_exactly_once, table
from tests.support.inline import expect_deferred, next_event, tear_down, wait_running
from tests.support.polling import wait_for
from tests.support.recovery_times import RecoveryTimes

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(1500)]
P = "playback"
STARTUP_S = 400


@pytest.fixture
def local_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", LOCAL_MASTER)


def silver_ids(spark, home: WeirHome) -> set[str]:
    path = PipelineTables.of(home, catalog.load(P)).silver
    return {r[0] for r in table(spark, path).select("event_id").collect()}


def test_deploy_adopt_kill_restart_stop(home: WeirHome, spark, local_spark: None) -> None:
    from weir_airflow.operators import StreamRestartOperator, StreamStopOperator, StreamSupervisorOperator
    from weir_airflow.triggers import DriverWatchTrigger

    ctx = context("oncall-alice")
    written = generate(home.landing(P), files=2, sessions_per_file=4, seed=11, prefix="a")
    supervisor = StreamSupervisorOperator(task_id="supervise", pipeline=P, spark_conf=DRIVER_CONF)
    times = RecoveryTimes("embedded default (local driver, files)", home, P)
    try:
        times.deployed()
        deferred = expect_deferred(supervisor.execute, ctx)
        first_launch = read_launch(home, P)
        assert first_launch is not None

        # Double deploy (a second P_stream run, or a scheduler that lost track): adopted, not doubled.
        second = StreamSupervisorOperator(task_id="supervise", pipeline=P, spark_conf=DRIVER_CONF)
        expect_deferred(second.execute, ctx)
        assert read_launch(home, P).pid == first_launch.pid  # type: ignore[union-attr]

        wait_running(home, P, STARTUP_S)
        wait_for("a first committed batch", times.first_batch, STARTUP_S, poll_s=0.2)
        driver_pid = leases.holder(home, P).pid  # type: ignore[union-attr]
        # A driver started by hand beside it refuses and exits non-zero.
        manual = subprocess.run([sys.executable, "-m", "spark_jobs.stream", P], capture_output=True,
                                text=True, timeout=120, env={**os.environ, "WEIR_HOME": str(home.root)})
        assert manual.returncode == 3 and "already running" in manual.stderr, manual.stderr[-2000:]
        assert leases.holder(home, P).pid == driver_pid  # type: ignore[union-attr]

        # The triggerer restarts: the trigger is rebuilt from its serialised form and keeps
        # watching the same live driver (no event, nothing launched).
        classpath, kwargs = deferred.trigger.serialize()
        assert classpath == "weir_airflow.triggers.DriverWatchTrigger"
        rebuilt = DriverWatchTrigger(**kwargs)
        with pytest.raises(TimeoutError):
            next_event(rebuilt, 4)
        assert read_launch(home, P).pid == first_launch.pid  # type: ignore[union-attr]

        # kill -9 the driver: detected, cleaned up and restarted by the supervisor.
        killed_at = time.monotonic()
        times.killed()
        os.kill(driver_pid, signal.SIGKILL)
        event = next_event(rebuilt, 30)
        times.detected()
        detection_s = time.monotonic() - killed_at
        assert event["verdict"] == "dead" and detection_s < 10, (event, detection_s)
        more = generate(home.landing(P), files=2, sessions_per_file=4, seed=12, prefix="b")
        deferred = expect_deferred(supervisor.on_driver_event, ctx, event)
        assert read_launch(home, P).pid != first_launch.pid  # type: ignore[union-attr]
        expected = written.event_ids | more.event_ids
        wait_for("the successor's first committed batch", times.successor_batch, STARTUP_S, poll_s=0.2)
        print(f"\n{times.report()}")
        wait_for("every event in silver after the restart", lambda: silver_ids(spark, home) >= expected,
                 STARTUP_S, poll_s=3)
        status = pipeline_status(home, P)
        assert status["state"] == "RUNNING" and status["restarts"] == 1, status

        # On-call restart with a reason: the driver stops at a batch boundary, P_stream's run ends,
        # and the next P_stream run (triggered by P_restart) deploys a fresh driver.
        restart = StreamRestartOperator(task_id="restart", pipeline=P, reason="INC-42: stuck consumer")
        assert restart.execute(ctx)["stop"] == "graceful"
        event = next_event(deferred.trigger, 30)
        assert event["verdict"] == "stopped"
        assert supervisor.on_driver_event(ctx, event) is None
        [logged] = [e for e in eventlog.read(home, P)
                    if e["action"] == "restart" and e["outcome"] == "requested"]
        assert logged["reason"] == "INC-42: stuck consumer" and logged["actor"] == "oncall-alice"

        redeploy = StreamSupervisorOperator(task_id="supervise", pipeline=P, spark_conf=DRIVER_CONF)
        deferred = expect_deferred(redeploy.execute, ctx)
        wait_for("the redeployed driver's lease", lambda: leases.holder(home, P), STARTUP_S)

        # Stop: graceful, and it stays stopped (the supervisor ends instead of restarting).
        stop = StreamStopOperator(task_id="stop", pipeline=P, reason="end of test")
        assert stop.execute(ctx)["outcome"] == "graceful"
        event = next_event(deferred.trigger, 30)
        assert event["verdict"] == "stopped"
        assert redeploy.on_driver_event(ctx, event) is None
        time.sleep(3)
        assert leases.holder(home, P) is None
        assert not read_launch(home, P).process.alive()  # type: ignore[union-attr]
        assert pipeline_status(home, P)["state"] == "STOPPED"

        # Exactly once through two deaths/stops: every valid event once in silver, every line
        # once in bronze.
        tables = PipelineTables.of(home, catalog.load(P))
        assert_exactly_once(table(spark, tables.silver), ["event_id"], expected, "silver")
        bronze = table(spark, tables.bronze)
        assert bronze.count() == bronze.select("source", "position").distinct().count() \
            == written.lines + more.lines
        actions = [(e["action"], e["outcome"]) for e in eventlog.read(home, P)]
        for expected_action in [("deploy", "launched"), ("adopt", "ok"), ("driver_lost", "dead"),
                                ("restart", "launched"), ("restart", "requested"), ("stop", "graceful")]:
            assert expected_action in actions, actions
    finally:
        tear_down(home, P)
