"""Drivers in cluster deploy mode on a real YARN (ResourceManager and NodeManager from Hadoop's
artifacts, `infra/yarn`), deployed and supervised through the real operators and trigger: the
supervisor tracks the driver by its application id; YARN killing the application is detected
through the backend and the driver restarted in a new application; tables exactly once; a stop
stays stopped; a back-fill runs as a YARN cluster job. One test: each YARN application costs
tens of seconds on this machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs import catalog
from spark_jobs.control import eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.backends import DriverState, YarnBackend
from spark_jobs.control.driver import read_launch
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from tests.airflow.supervision_harness import DRIVER_CONF, context
from tests.helpers import assert_exactly_once, table
from tests.support.inline import expect_deferred, next_event
from tests.support.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[2]
YARN = REPO / "infra" / "yarn" / "yarn.py"
P = "playback"
STARTUP_S = 400
# The driver is YARN's application master (1 GB + overhead), one executor of 1 GB beside it.
CONF = {**DRIVER_CONF, "spark.executor.memory": "1g", "spark.executor.instances": "1"}


@pytest.fixture(scope="module")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One ResourceManager and NodeManager for the module, in a home of their own."""
    env = {**os.environ, "WEIR_HOME": str(tmp_path_factory.mktemp("yarn-home"))}
    started = subprocess.run([sys.executable, str(YARN), "start", "--json"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:] + started.stdout[-3000:]
    state = json.loads(started.stdout.strip().splitlines()[-1])
    try:
        yield state
    finally:
        subprocess.run([sys.executable, str(YARN), "stop"], env=env, timeout=120, check=False)


@pytest.fixture
def on_yarn(yarn: dict, monkeypatch: pytest.MonkeyPatch) -> YarnBackend:
    monkeypatch.setenv("HADOOP_CONF_DIR", yarn["conf_dir"])
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", yarn["airflow_conn_spark_default"])
    return YarnBackend(yarn["rm_url"])


def silver_ids(spark, home: WeirHome) -> set[str]:
    path = PipelineTables.of(home, catalog.load(P)).silver
    if not (path / "_delta_log").is_dir():
        return set()
    return {r[0] for r in table(spark, path).select("event_id").collect()}


def test_driver_in_yarn_cluster_mode_is_killed_restarted_stopped(home: WeirHome, spark,
                                                                  on_yarn: YarnBackend) -> None:
    from weir_airflow.operators import StreamStopOperator, StreamSupervisorOperator

    ctx = context("oncall-alice")
    written = generate(home.landing(P), files=2, sessions_per_file=4, seed=31, prefix="y")
    supervisor = StreamSupervisorOperator(task_id="supervise", pipeline=P, spark_conf=CONF)
    tables = PipelineTables.of(home, catalog.load(P))
    try:
        deployed_at = time.monotonic()
        deferred = expect_deferred(supervisor.execute, ctx)
        first = read_launch(home, P)
        assert first is not None and first.driver.backend == "yarn", first
        app = on_yarn.application(first.driver.id)
        assert app is not None and app["name"] == "weir-playback" and app["applicationType"] == "SPARK"
        assert "--deploy-mode cluster" in " ".join(first.command)
        # A second deploy while the application runs adopts it by its id: never two drivers.
        second_deploy = StreamSupervisorOperator(task_id="supervise", pipeline=P, spark_conf=CONF)
        expect_deferred(second_deploy.execute, ctx)
        assert read_launch(home, P) == first
        assert [a["id"] for a in _running_apps(on_yarn)] == [first.driver.id]

        wait_for("silver filled by the driver in YARN", lambda: silver_ids(spark, home) >= written.event_ids,
                 STARTUP_S, poll_s=3)
        first_batch_s = time.monotonic() - deployed_at
        holder = leases.holder(home, P)
        assert holder is not None
        # The driver is the application master's Python, a child of the NodeManager's container.
        assert first.driver.id.replace("application_", "container_") in Path(
            f"/proc/{holder.pid}/cwd").resolve().name

        # The cluster manager kills the driver (REST, as `yarn application -kill` does).
        killed_at = time.monotonic()
        assert on_yarn.kill(first.driver)
        event = next_event(deferred.trigger, 120)
        detection_s = time.monotonic() - killed_at
        assert event["verdict"] == "dead" and "KILLED" in event["detail"], event
        assert first.driver.id in event["detail"]
        more = generate(home.landing(P), files=1, sessions_per_file=4, seed=32, prefix="z")
        deferred = expect_deferred(supervisor.on_driver_event, ctx, event)
        second = read_launch(home, P)
        assert second is not None and second.driver.id != first.driver.id
        assert on_yarn.state(first.driver) is DriverState.FAILED
        expected = written.event_ids | more.event_ids
        wait_for("every event in silver after the restart in a new application",
                 lambda: silver_ids(spark, home) >= expected, STARTUP_S, poll_s=3)
        restart_s = time.monotonic() - killed_at

        # Stop: at a batch boundary; the application ends by itself and it stays stopped.
        outcome = StreamStopOperator(task_id="stop", pipeline=P, reason="end of test").execute(ctx)
        assert outcome["outcome"] == "graceful", outcome
        event = next_event(deferred.trigger, 60)
        assert event["verdict"] == "stopped", event
        assert supervisor.on_driver_event(ctx, event) is None
        assert on_yarn.wait_ended(second.driver, 60)
        time.sleep(3)
        assert leases.holder(home, P) is None and read_launch(home, P) == second
        assert [a["id"] for a in _running_apps(on_yarn)] == []

        # Exactly once through a kill by the cluster manager and a stop.
        assert_exactly_once(table(spark, tables.silver), ["event_id"], expected, "silver")
        bronze = table(spark, tables.bronze)
        assert bronze.count() == bronze.select("source", "position").distinct().count() \
            == written.lines + more.lines
        actions = [(e["action"], e["outcome"]) for e in eventlog.read(home, P)]
        for wanted in [("deploy", "launched"), ("driver_lost", "dead"), ("restart", "launched"),
                       ("stop", "graceful")]:
            assert wanted in actions, actions
        launched = [e for e in eventlog.read(home, P) if e["outcome"] == "launched"]
        assert [e["details"]["driver"]["id"] for e in launched] == [first.driver.id, second.driver.id]

        # A back-fill through the DAG's task code: a blocking submit, its driver a YARN application.
        from weir_airflow.tasks import backfill_date

        backfill_date(P, "2026-11-19", actor="oncall-alice")
        [backfill] = [a for a in _apps(on_yarn) if a["name"] == "weir-backfill-playback"]
        assert (backfill["state"], backfill["finalStatus"]) == ("FINISHED", "SUCCEEDED"), backfill
        assert ("backfill", "ok") in [(e["action"], e["outcome"]) for e in eventlog.read(home, P)]
        assert_exactly_once(table(spark, tables.silver), ["event_id"], expected, "silver after back-fill")
        print(f"\nYARN cluster mode: deploy → first rows in silver {first_batch_s:.0f}s, kill → "
              f"detected {detection_s:.1f}s, kill → successor's rows in silver {restart_s:.0f}s")
    finally:
        # Not `tear_down`: the recorded pid is spark-submit's, long gone (maybe recycled).
        _kill_all(on_yarn)
        holder = leases.read(home, P)
        if holder is not None and holder.process.alive():
            os.kill(holder.pid, signal.SIGKILL)


def _apps(backend: YarnBackend, states: str | None = None) -> list[dict]:
    query = f"?states={states}" if states else ""
    with urllib.request.urlopen(f"{backend.rm_url}/ws/v1/cluster/apps{query}", timeout=10) as response:
        return list((json.loads(response.read()).get("apps") or {}).get("app") or [])


def _running_apps(backend: YarnBackend) -> list[dict]:
    return _apps(backend, "NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING")


def _kill_all(backend: YarnBackend) -> None:
    from spark_jobs.control.backends import DriverHandle

    for app in _running_apps(backend):
        backend.kill(DriverHandle("yarn", app["id"], backend.rm_url))
