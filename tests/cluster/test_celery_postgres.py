"""The whole production profile on this machine: Airflow's metadata DB on PostgreSQL and the
CeleryExecutor (Redis broker, PostgreSQL result backend) with two workers, the settings of
infra/airflow/cluster.env and the servers of infra/cluster/services.sh; drivers and back-fills in
YARN cluster deploy mode (infra/yarn); Weir's control state in PostgreSQL (WEIR_CONTROL_STORE) —
no lease, heartbeat or stop file under WEIR_HOME.

- the dialect and the executor are queried (the scheduler's job row in PostgreSQL, the Celery
  result in PostgreSQL, the worker that ran the task), not assumed;
- `playback_stream` is deployed through Airflow; its supervisor task is SIGKILLed with its worker
  right after it submitted the driver to YARN: the task is retried on the other worker, which
  adopts the live application (one application and one lease holder throughout);
- YARN kills the application: the triggerer's watch sees it through the ResourceManager and the
  supervisor restarts the driver in a new application; `playback_stop` then stops it and it stays
  stopped; `airflow backfill create` runs the back-fill as a YARN application; every layer exactly
  once."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import catalog
from spark_jobs.control import eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.driver import read_launch
from spark_jobs.control.status import pipeline_status
from spark_jobs.control.store import PostgresStore, control_store
from spark_jobs.generator import Written, generate
from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.ports import free_ports
from spark_jobs.tables import delta_version
from tests.airflow.airflow_services import AIRFLOW, COMPONENTS, AirflowServices
from tests.cluster.conftest import ClusterServices, YarnCluster
from tests.helpers import assert_exactly_once, table
from tests.support.recovery_times import RecoveryTimes

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(2400)]
P = "playback"
WORKERS = ("worker-1", "worker-2")
CLUSTER_ENV = REPO_ROOT / "infra" / "airflow" / "cluster.env"
STARTUP_S = 400


@dataclass
class CeleryAirflow(AirflowServices):
    """`AirflowServices` on PostgreSQL + CeleryExecutor, with two `airflow celery worker`s."""

    cluster: ClusterServices | None = None
    yarn: YarnCluster | None = None
    metadata_url: str = ""
    control_url: str = ""

    @cached_property
    def env(self) -> dict[str, str]:
        env = dict(super().env)
        assert self.cluster is not None
        out = subprocess.run(["bash", "-c", 'set -a; source "$1"; env -0', "bash", str(CLUSTER_ENV)],
                             capture_output=True, check=True, env={
                                 "PATH": os.environ.get("PATH", ""),
                                 "WEIR_PG_PORT": str(self.cluster.pg_port),
                                 "WEIR_REDIS_PORT": str(self.cluster.redis_port),
                                 "WEIR_AIRFLOW_PORT": str(self.ports[0])})
        pairs = dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
        env.update({k: v for k, v in pairs.items()
                    if k.startswith("AIRFLOW__") or k in ("WEIR_WORKER_LOG_PORT_BASE",)})
        database = self.metadata_url.rpartition("/")[2]
        env.update({
            # This module's own databases on the module's PostgreSQL (cluster.env names the
            # `airflow` and `weir` ones of `make up`).
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.metadata_url.replace(
                "postgresql://", "postgresql+psycopg2://"),
            "AIRFLOW__CELERY__RESULT_BACKEND": self.metadata_url.replace(
                "postgresql://", "db+postgresql+psycopg2://"),
            "WEIR_CONTROL_STORE": self.control_url,
            **(self.yarn.env if self.yarn is not None else {}),
            # A worker killed under a running task: the scheduler notices within seconds.
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "3",
        })
        assert database in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        return env

    def migrate(self) -> None:
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        self.cli("db", "migrate", timeout_s=400)

    def start(self, *components: str) -> None:
        plain = [c for c in components or COMPONENTS if c not in WORKERS]
        super().start(*plain)
        log_ports = free_ports(len(WORKERS))
        for component in components or (*COMPONENTS, *WORKERS):
            if component not in WORKERS:
                continue
            n = WORKERS.index(component)
            env = {**self.env, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_ports[n])}
            with open(self.log_path(component), "ab") as out:
                self.procs[component] = subprocess.Popen(
                    [str(AIRFLOW), "celery", "worker", "--celery-hostname", f"weir-{component}@%h",
                     "--concurrency", "2"],
                    env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=str(self.airflow_home), start_new_session=True)

    def logs_tail(self, chars: int = 3000) -> str:
        parts = []
        for component in (*COMPONENTS, *WORKERS):
            path = self.log_path(component)
            if path.is_file():
                parts.append(f"--- {component} ---\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        import psycopg2
        import psycopg2.extras

        conn = psycopg2.connect(self.metadata_url)
        try:
            with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                cur.execute(sql.replace("?", "%s"), params)
                return [dict(r) for r in cur.fetchall()] if cur.description else []
        finally:
            conn.close()

    def wait_parsed(self, dag_ids: list[str], timeout_s: float) -> None:
        import psycopg2

        def parsed() -> bool:
            try:
                rows = self.query("SELECT dag_id FROM serialized_dag WHERE dag_id = ANY(?)", dag_ids)
            except psycopg2.Error:   # tables not there yet
                return False
            return {r["dag_id"] for r in rows} == set(dag_ids)

        self.wait_for(f"the DAGs {dag_ids} parsed", parsed, timeout_s)

    def worker_that_received(self, ti_id: str, try_number: int) -> str | None:
        """The worker whose log shows it received the task instance's `try_number`."""
        pattern = re.compile(rf"id=UUID\('{re.escape(ti_id)}'\).*?try_number={try_number}\b")
        for worker in WORKERS:
            path = self.log_path(worker)
            if path.is_file() and pattern.search(path.read_text(errors="replace")):
                return worker
        return None


@pytest.fixture(scope="module")
def airflow(cluster_services: ClusterServices, yarn_cluster: YarnCluster,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryAirflow]:
    root = tmp_path_factory.mktemp("celery-airflow")
    home = WeirHome(root / "weir")
    home.root.mkdir()
    services = CeleryAirflow(root / "airflow", home, cluster=cluster_services, yarn=yarn_cluster,
                             metadata_url=cluster_services.create_database("airflow"),
                             control_url=cluster_services.create_database("weir"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIR_HOME", str(home.root))
        patch.setenv("WEIR_CONTROL_STORE", services.control_url)
        try:
            services.migrate()
            services.start()
            yield services
        finally:
            services.stop_all()
            yarn_cluster.kill_all()


def test_the_metadata_db_is_postgresql_and_the_executor_celery(airflow: CeleryAirflow) -> None:
    """Asked of the running system: Airflow's own config says PostgreSQL and CeleryExecutor, the
    scheduler's job row and the parsed DAGs are in this PostgreSQL database, and the scheduler
    loaded the CeleryExecutor. (A task run on a worker, its result in PostgreSQL: next test.)"""
    [dialect] = airflow.query("SELECT current_setting('server_version') AS version, "
                              "current_database() AS db")
    assert dialect["db"] == airflow.metadata_url.rpartition("/")[2]
    checked = airflow.cli("config", "get-value", "database", "sql_alchemy_conn").strip()
    assert checked.startswith("postgresql"), checked
    assert airflow.cli("config", "get-value", "core", "executor").strip() == "CeleryExecutor"

    def scheduler_job() -> dict[str, Any] | None:
        try:
            rows = airflow.query("SELECT hostname FROM job WHERE job_type = 'SchedulerJob' "
                                 "AND state = 'running'")
        except Exception:
            return None
        return rows[0] if rows else None

    airflow.wait_for("the scheduler's job row in PostgreSQL", scheduler_job, 120)
    airflow.wait_parsed([f"{P}_stream"], 300)
    assert "Loaded executor: :CeleryExecutor:" in airflow.log_path("scheduler").read_text(
        errors="replace")


def test_deploy_adopt_after_a_worker_kill_restart_after_a_yarn_kill_stop_and_backfill(
        airflow: CeleryAirflow, yarn_cluster: YarnCluster, spark) -> None:
    from spark_jobs.control.deploy_gate import admit

    home, pipeline = airflow.home, catalog.load(P)
    assert isinstance(control_store(home), PostgresStore)
    tables = PipelineTables.of(home, pipeline)
    landed = Written()
    landed.add(generate(home.landing(P), files=2, sessions_per_file=4, seed=61, prefix="cl",
                        start=dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)))
    admit(home, pipeline, actor="test", spark=spark)
    airflow.ready([f"{P}_stream", f"{P}_stop", f"{P}_backfill"], unpause=f"^{P}_(stream|stop|backfill)$")
    stream_dag = f"{P}_stream"
    seen_apps: set[str] = set()
    seen_holders: set[tuple[int, int]] = set()

    def observe() -> None:
        running = [a["id"] for a in yarn_cluster.running() if a["name"] == f"weir-{P}"]
        assert len(running) <= 1, f"two drivers at once: {running}"
        seen_apps.update(running)
        record = leases.read(home, P)
        if record is not None:
            seen_holders.add((record.pid, record.fencing_token))

    def in_silver(expected: set[str]):
        def check() -> bool:
            observe()
            if delta_version(tables.silver) is None:
                return False
            return {r[0] for r in table(spark, tables.silver).select("event_id").collect()} >= expected
        return check

    times = RecoveryTimes("production profile (PostgreSQL, Celery, YARN cluster mode)", home, P)
    times.deployed()
    airflow.cli("dags", "trigger", stream_dag)

    def supervise_ti() -> dict[str, Any] | None:
        rows = airflow.query("SELECT CAST(id AS text) AS id, state, try_number, external_executor_id "
                             "FROM task_instance WHERE dag_id = ? AND task_id = 'supervise'", stream_dag)
        return rows[0] if rows else None

    ti = airflow.wait_for("the supervisor task instance", supervise_ti, 120, poll_s=0.5)
    first_worker = airflow.wait_for(
        "a worker to receive the supervisor task",
        lambda: airflow.worker_that_received(ti["id"], 1), STARTUP_S, poll_s=0.2)
    # The moment the supervisor submitted the driver (launch record written), its worker dies
    # with the task, before the task can defer: the application lives on in YARN.
    first = airflow.wait_for("the driver launched", lambda: read_launch(home, P), STARTUP_S, poll_s=0.05)
    assert first.driver.backend == "yarn" and "--deploy-mode cluster" in " ".join(first.command), first
    os.killpg(airflow.procs[first_worker].pid, signal.SIGKILL)
    airflow.procs.pop(first_worker).wait(30)   # dead on purpose: no longer a failure sign
    killed = supervise_ti()
    assert killed is not None and killed["state"] == "running", (
        f"the worker died after the task deferred: {killed}")
    other = WORKERS[1 - WORKERS.index(first_worker)]

    def retried_and_deferred() -> dict[str, Any] | None:
        observe()
        now = supervise_ti()
        return now if now and now["try_number"] >= 2 and now["state"] == "deferred" else None

    retried = airflow.wait_for("the supervisor retried and deferred again", retried_and_deferred,
                               STARTUP_S, poll_s=1)
    assert retried["try_number"] == 2, retried
    # Airflow 3 gives each try its own task instance id.
    assert airflow.worker_that_received(retried["id"], 2) == other, "the retry ran on the other worker"
    # Celery ran it: the task instance's Celery task id has its result in PostgreSQL.
    # (Its row says STARTED until the worker has reported the deferral back.)
    [celery] = airflow.wait_for("the retry's Celery result", lambda: [r for r in airflow.query(
        "SELECT status FROM celery_taskmeta WHERE task_id = ?", retried["external_executor_id"])
        if r["status"] != "STARTED"], 120)
    assert celery["status"] == "SUCCESS", celery

    airflow.wait_for("a first committed batch", times.first_batch, STARTUP_S, poll_s=0.2)
    airflow.wait_for("the landed files in silver", in_silver(landed.event_ids), STARTUP_S, poll_s=3)
    holder = leases.holder(home, P)
    assert holder is not None
    assert seen_apps == {first.driver.id}, f"one application throughout: {seen_apps} vs {first}"
    assert seen_holders == {(holder.pid, 1)}, f"one lease holder, never re-taken: {seen_holders}"
    assert read_launch(home, P) == first, "the retry adopted the application, it did not submit another"
    log = airflow.log_path(other).read_text(errors="replace")
    assert "adopted the live driver" in log or _task_log_mentions_adopt(airflow), airflow.logs_tail()

    # YARN kills the application: seen through the ResourceManager, restarted in a new one.
    def losses() -> int:
        return sum(e["action"] == "driver_lost" for e in eventlog.read(home, P))

    lost_before = losses()
    times.killed()
    assert yarn_cluster.backend.kill(first.driver)
    landed.add(generate(home.landing(P), files=1, sessions_per_file=4, seed=62, prefix="cm",
                        start=dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)))

    def detected() -> bool:
        lost = losses() > lost_before
        if lost and "detected" not in times.marks:
            times.detected()
        return lost

    airflow.wait_for("the supervisor to see the application gone", detected, STARTUP_S, poll_s=0.5)
    second = airflow.wait_for(
        "the driver restarted in a new application",
        lambda: (lambda r: r if r is not None and r.driver.id != first.driver.id else None)(
            read_launch(home, P)), STARTUP_S, poll_s=1)
    airflow.wait_for("the successor's first committed batch", times.successor_batch, STARTUP_S, poll_s=0.2)
    airflow.wait_for("every event in silver after the restart", in_silver(landed.event_ids), STARTUP_S,
                     poll_s=3)
    assert seen_apps == {first.driver.id, second.driver.id}, seen_apps
    actions = [(e["action"], e["outcome"]) for e in eventlog.read(home, P)]
    assert ("driver_lost", "dead") in actions and ("restart", "launched") in actions, actions

    airflow.cli("dags", "trigger", f"{P}_stop", "--conf",
                json.dumps({"reason": "cluster test done", "graceful_timeout_s": 90}))
    [stop_run] = airflow.wait_runs_done(f"{P}_stop", 1, 300)
    [stream_run] = airflow.wait_runs_done(stream_dag, 1, 180)
    assert (stop_run["state"], stream_run["state"]) == ("success", "success"), airflow.logs_tail()
    assert yarn_cluster.backend.wait_ended(second.driver, 60)
    time.sleep(5)   # stays stopped: nothing relaunches it
    assert [a for a in yarn_cluster.running() if a["name"] == f"weir-{P}"] == []
    assert leases.holder(home, P) is None
    assert pipeline_status(home, P)["state"] == "STOPPED"

    # A back-fill of the landed date, scheduled by Airflow: a YARN application too.
    airflow.cli("backfill", "create", "--dag-id", f"{P}_backfill", "--from-date", "2026-11-20",
                "--to-date", "2026-11-20")
    # two YARN applications in turn: the back-fill, then its data-quality check
    [run] = airflow.wait_runs_done(f"{P}_backfill", 1, 2 * STARTUP_S, run_type="backfill")
    assert run["state"] == "success", airflow.logs_tail()
    backfills = [a for a in yarn_cluster.apps() if a["name"] == f"weir-backfill-{P}"]
    assert [(a["state"], a["finalStatus"]) for a in backfills] == [("FINISHED", "SUCCEEDED")], backfills

    assert_exactly_once(table(spark, tables.silver), ["event_id"], landed.event_ids, "silver")
    bronze = table(spark, tables.bronze)
    assert bronze.count() == bronze.select("source", "position").distinct().count() == landed.lines
    control = home.control(P)
    files = sorted(p.name for p in control.glob("*.json")) if control.is_dir() else []
    assert not [f for f in files if f.removesuffix(".json") in (
        "lease", "fencing", "heartbeat", "stop-request", "supervisor", "stopped", "launch",
        "admitted_code")], files
    print(f"\n{times.report()}")


def _task_log_mentions_adopt(airflow: CeleryAirflow) -> bool:
    """The supervisor's own task log (under AIRFLOW_HOME/logs) says it adopted the driver."""
    logs = Path(airflow.airflow_home) / "logs"
    return any("adopted the live driver" in p.read_text(errors="replace")
               for p in logs.rglob("attempt=2*.log"))
