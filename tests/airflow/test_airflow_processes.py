"""Weir's DAGs under a real Airflow — scheduler, dag-processor, triggerer and the execution API as
separate processes (SQLite, LocalExecutor), shared by this module's tests:

- Airflow's own back-fill (`airflow backfill create`) of `P_backfill` over two event dates repairs
  a damaged silver and gold, one successful run per date, recorded in the event log;
- a scheduler + triggerer crash (SIGKILL) while `P_stream` supervises a live driver: after the
  restart the same driver is still the lease holder, alone, the task still deferred, input still
  flows exactly once; `P_stop` then stops it and nothing is left running.

Each test adds what it lands to one ledger, so the stream's exactly-once check covers everything
this module's WEIR_HOME received, whichever tests ran."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import time
from collections.abc import Iterator

import pytest

from spark_jobs import catalog, stream
from spark_jobs.control import eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.driver import read_launch
from spark_jobs.control.status import pipeline_status
from spark_jobs.generator import Written, generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.tables import delta_version
from spark_jobs.topology import queries_of
from tests.airflow.airflow_services import AirflowServices, driver_processes
from tests.helpers import assert_exactly_once, table
from tests.support.inline import tear_down

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(1500)]
P = "playback"
DAY_1 = dt.datetime(2026, 11, 19, 21, 0, tzinfo=dt.UTC)
DAY_2 = dt.datetime(2026, 11, 20, 8, 0, tzinfo=dt.UTC)
DAGS = [f"{P}_stream", f"{P}_stop", f"{P}_backfill"]
STARTUP_S = 400
RUNS_S = 900


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServices]:
    root = tmp_path_factory.mktemp("real-airflow")
    home = WeirHome(root / "weir")
    home.root.mkdir()
    airflow = AirflowServices(root / "airflow", home)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIR_HOME", str(home.root))
        try:
            airflow.migrate()
            airflow.start()   # parses the DAGs while a test lands its data (see `ready`)
            yield airflow
        finally:
            tear_down(home, P)
            airflow.stop_all()


def ready(services: AirflowServices) -> None:
    """The module's DAGs parsed and unpaused."""
    services.ready(DAGS, unpause=f"^{P}_(stream|stop|backfill)$")


@pytest.fixture(scope="module")
def landed() -> Written:
    """Everything landed in the module's WEIR_HOME so far."""
    return Written()


def land(services: AirflowServices, landed: Written, *, seed: int, start: dt.datetime,
         prefix: str) -> Written:
    written = generate(services.home.landing(P), files=2, sessions_per_file=4, seed=seed, prefix=prefix,
                       start=start)
    landed.add(written)
    return written


def run_once(spark, home: WeirHome) -> None:
    """What `weir run playback --once` does, on the test's Spark."""
    stream.run(catalog.load(P), once=True, home=home, spark=spark)


def silver_ids(spark, tables: PipelineTables) -> set[str]:
    if delta_version(tables.silver) is None:
        return set()
    return {r[0] for r in table(spark, tables.silver).select("event_id").collect()}


def test_airflow_backfill_repairs_silver_and_gold_one_run_per_event_date(
        services: AirflowServices, spark, landed: Written) -> None:
    from delta.tables import DeltaTable
    from pyspark.testing import assertDataFrameEqual

    home, pipeline = services.home, catalog.load(P)
    tables = PipelineTables.of(home, pipeline)
    land(services, landed, seed=41, start=DAY_1, prefix="bf")
    land(services, landed, seed=42, start=DAY_2, prefix="bf")
    run_once(spark, home)
    assert_exactly_once(table(spark, tables.silver), ["event_id"], landed.event_ids, "silver")
    gold_before = table(spark, tables.gold).collect()
    assert {str(r["event_date"]) for r in gold_before} == {"2026-11-19", "2026-11-20"}

    # Damage both dates: silver loses a date and part of another and gains duplicates; gold
    # loses a date and has wrong counts in the other.
    silver = DeltaTable.forPath(spark, str(tables.silver))
    silver.delete("event_date = '2026-11-19'")
    silver.delete("event_date = '2026-11-20' AND event_type = 'heartbeat'")
    table(spark, tables.silver).where("event_type = 'start'").write.format("delta").mode("append") \
        .save(str(tables.silver))
    gold = DeltaTable.forPath(spark, str(tables.gold))
    gold.delete("event_date = '2026-11-19'")
    gold.update("event_date = '2026-11-20'", {"events": "events + 100"})
    damaged = table(spark, tables.silver)
    assert damaged.count() < len(landed.event_ids) and damaged.count() > damaged.distinct().count()

    ready(services)
    services.cli("backfill", "create", "--dag-id", f"{P}_backfill", "--from-date", "2026-11-19",
                 "--to-date", "2026-11-20")
    runs = services.wait_runs_done(f"{P}_backfill", 2, RUNS_S, run_type="backfill")
    assert [(r["logical_date"][:10], r["state"]) for r in runs] == [
        ("2026-11-19", "success"), ("2026-11-20", "success")], (runs, services.logs_tail())
    for run in runs:
        states = {t: ti["state"] for t, ti in services.task_instances(f"{P}_backfill", run["run_id"]).items()}
        assert states == {"backfill": "success", "dq": "success"}, (run, states)
    assert not [r for r in services.dag_runs(f"{P}_backfill") if r["run_type"] != "backfill"]

    assert_exactly_once(table(spark, tables.silver), ["event_id"], landed.event_ids, "silver")
    assertDataFrameEqual(table(spark, tables.gold), gold_before, checkRowOrder=False)
    logged = eventlog.read(home, P)
    backfills = sorted((e["details"]["from"], e["outcome"], e["actor"]) for e in logged
                       if e["action"] == "backfill")
    user = getpass.getuser()
    assert backfills == [("2026-11-19", "ok", user), ("2026-11-20", "ok", user)], backfills
    checks = sorted((e["details"]["from"], e["outcome"]) for e in logged if e["action"] == "dq")
    assert checks == [("2026-11-19", "success"), ("2026-11-20", "success")], checks


def test_scheduler_and_triggerer_killed_and_restarted_adopt_the_live_driver(
        services: AirflowServices, spark, landed: Written) -> None:
    from spark_jobs.control.deploy_gate import admit

    home, pipeline = services.home, catalog.load(P)
    tables = PipelineTables.of(home, pipeline)
    land(services, landed, seed=51, start=DAY_2 + dt.timedelta(hours=3), prefix="rs")
    # The deploy gate checks the code against an existing checkpoint once per code change; do it
    # here on the test's Spark rather than in a JVM of its own inside the task.
    admit(home, pipeline, actor="test", spark=spark)
    stream_dag = f"{P}_stream"
    ready(services)
    try:
        services.cli("dags", "trigger", stream_dag)

        def running() -> dict | None:
            status = pipeline_status(home, P)
            ok = status["state"] == "RUNNING" and len(status["queries"]) == len(queries_of(pipeline)) and \
                all(q["last_batch_id"] is not None for q in status["queries"])
            return status if ok else None

        services.wait_for(f"{P} RUNNING under Airflow", running, STARTUP_S)
        services.wait_for("the first files in silver",
                          lambda: silver_ids(spark, tables) >= landed.event_ids, STARTUP_S, poll_s=3)
        [run] = services.dag_runs(stream_dag)
        ti = services.task_instances(stream_dag, run["run_id"])["supervise"]
        assert ti["state"] == "deferred" and ti["trigger_id"] is not None, ti
        old_triggerer = services.wait_for(
            "the trigger assigned", lambda: (services.trigger(ti["trigger_id"]) or {}).get("triggerer_id"),
            60)
        driver_pid = leases.holder(home, P).pid  # type: ignore[union-attr]
        launch_pid = read_launch(home, P).pid  # type: ignore[union-attr]
        drivers = driver_processes(home, P)
        assert drivers["python"] == [driver_pid] and len(drivers["jvm"]) == 1, drivers
        events_before = len(eventlog.read(home, P))

        # The crash: scheduler and triggerer die with everything they started; then they come back.
        services.kill("scheduler", "triggerer")
        assert pipeline_status(home, P)["state"] == "RUNNING"
        services.start("scheduler", "triggerer")

        def taken_over() -> bool:
            trigger = services.trigger(ti["trigger_id"]) or {}
            owner = trigger.get("triggerer_id")
            return owner is not None and owner != old_triggerer and owner in services.live_triggerer_ids()

        services.wait_for("the trigger taken over by the new triggerer", taken_over, 180)
        time.sleep(5)   # the new trigger has looked at the driver a few times (poll: 1 s)

        [after] = services.dag_runs(stream_dag)
        ti_after = services.task_instances(stream_dag, run["run_id"])["supervise"]
        assert after["state"] == "running", after
        assert (ti_after["state"], ti_after["try_number"], ti_after["trigger_id"]) == (
            "deferred", ti["try_number"], ti["trigger_id"]), ti_after
        assert leases.holder(home, P).pid == driver_pid  # type: ignore[union-attr]
        assert read_launch(home, P).pid == launch_pid  # type: ignore[union-attr]
        assert driver_processes(home, P) == drivers
        since = [(e["action"], e["outcome"]) for e in eventlog.read(home, P)[events_before:]]
        assert not [a for a in since if a[0] in ("deploy", "restart", "driver_lost", "adopt")], since

        # New input still flows, every layer exactly once.
        land(services, landed, seed=52, start=DAY_2 + dt.timedelta(hours=4), prefix="rs")
        services.wait_for("the new files in silver",
                          lambda: silver_ids(spark, tables) >= landed.event_ids, STARTUP_S, poll_s=3)
        assert_exactly_once(table(spark, tables.silver), ["event_id"], landed.event_ids, "silver")
        bronze = table(spark, tables.bronze)
        assert bronze.count() == bronze.select("source", "position").distinct().count() == landed.lines

        # Stop through P_stop: the driver ends at a batch boundary and P_stream's run ends with it.
        services.cli("dags", "trigger", f"{P}_stop", "--conf",
                     json.dumps({"reason": "restart test done", "graceful_timeout_s": 60}))
        [stop_run] = services.wait_runs_done(f"{P}_stop", 1, 300)
        [stream_run] = services.wait_runs_done(stream_dag, 1, 120)
        assert (stop_run["state"], stream_run["state"]) == ("success", "success"), services.logs_tail()
        services.wait_for("no driver left",
                          lambda: driver_processes(home, P) == {"python": [], "jvm": []}, 60)
        assert leases.holder(home, P) is None
        assert pipeline_status(home, P)["state"] == "STOPPED"
        [stopped] = [e for e in eventlog.read(home, P)[events_before:] if e["action"] == "stop"]
        assert (stopped["outcome"], stopped["reason"]) == ("graceful", "restart test done"), stopped
    finally:
        tear_down(home, P)
    services.stop_all()   # Airflow down too (the module's last test): nothing may outlive it
    deadline = time.monotonic() + 30
    while services.leftovers() and time.monotonic() < deadline:
        time.sleep(1)
    assert not services.leftovers(), services.leftovers()
    assert not [pid for pid in (driver_pid, launch_pid) if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
