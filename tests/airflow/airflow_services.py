"""A real Airflow for tests: scheduler, dag-processor, triggerer and the execution API server as
separate processes on SQLite + LocalExecutor (the settings of infra/airflow/airflow.env), with a
throw-away AIRFLOW_HOME and WEIR_HOME. Each component runs in its own process group, so a test can
SIGKILL one of them as a crash would, start it again, and tear everything down without orphans.
Its metadata DB is read directly (sqlite3) to follow DAG runs, task instances and triggers."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from spark_jobs.control.processes import stat_fields
from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.ports import free_ports
from tests.airflow.supervision_harness import DRIVER_CONF, LOCAL_MASTER
from tests.support import jit
from tests.support.polling import WaitAborted, WaitTimeout, wait_for

VENV_BIN = Path(sys.executable).parent
AIRFLOW = VENV_BIN / "airflow"
AIRFLOW_ENV = REPO_ROOT / "infra" / "airflow" / "airflow.env"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
STREAM_ENTRY = str(REPO_ROOT / "spark_jobs" / "stream.py")


def airflow_env_file(airflow_home: Path) -> dict[str, str]:
    """The variables infra/airflow/airflow.env exports, for this AIRFLOW_HOME (sourced by bash, so
    the file stays the one place that says how the embedded Airflow is configured)."""
    script = 'set -a; source "$1"; env -0'
    out = subprocess.run(["bash", "-c", script, "bash", str(AIRFLOW_ENV)], capture_output=True, check=True,
                         env={"REPO": str(REPO_ROOT), "AIRFLOW_HOME": str(airflow_home),
                              "PATH": os.environ.get("PATH", "")})
    pairs = (item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    return {k: v for k, v in pairs if k.startswith("AIRFLOW__")}


@cache
def _migrated_template() -> Path:
    """A SQLite metadata DB migrated once in this test process, which each DB the tests need
    copies (`airflow db migrate` takes 8-15 s of both cores here; the suite ran it six times)."""
    folder = Path(tempfile.mkdtemp(prefix="weir-airflow-db-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(folder), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{folder / 'airflow.db'}")
    out = subprocess.run([str(AIRFLOW), "db", "migrate"], env=env, capture_output=True, text=True,
                         timeout=600, cwd=folder)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return folder / "airflow.db"


def migrated_db(path: Path) -> None:
    """A freshly migrated metadata DB at `path` (SQLite, in WAL mode: the components and the
    tests' own reads share it), copied from this process's migrated one, and the configuration
    the migration wrote beside it, for this folder, unless the folder has one: the components
    started next would each write one of their own at once, each with another Fernet key (a
    trigger's arguments, encrypted by the scheduler, then fail to decrypt in the triggerer)."""
    template = _migrated_template()
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    config = path.parent / "airflow.cfg"
    if not config.exists():
        text = (template.parent / "airflow.cfg").read_text()
        config.write_text(text.replace(str(template.parent), str(path.parent)))
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    finally:
        connection.close()


def small_spark_jobs() -> dict[str, str]:
    """The environment that keeps every Spark job Airflow starts small (spark-submit's driver and
    in-task sessions: client mode on this host; the connection `spark_default` sets the master).

    The settings go in as the driver JVM's system properties (`SPARK_SUBMIT_OPTS`, which Spark reads
    as defaults, as it reads spark-defaults.conf), not through a SPARK_CONF_DIR of their own: the
    conf folder leads the driver's class path, and a class path other than the one the class
    archive was recorded with keeps the JVM from mapping it (`spark_jobs.class_archive`): a
    session started in 5.7-6.4 s with such a folder, 3.6-3.8 s without (docs/performance.md).
    They end with C1 only, as every driver the tests start (`tests.support.jit`)."""
    conf = {k: v for k, v in DRIVER_CONF.items() if k != "spark.driver.memory"}
    options = [f"-D{k}={v}" for k, v in conf.items()]
    options.append(f"-Dlog4j2.configurationFile=file:{REPO_ROOT / 'infra' / 'spark' / 'log4j2.properties'}")
    return {"SPARK_SUBMIT_OPTS": jit.submit_options(*options),
            "SPARK_DRIVER_MEMORY": DRIVER_CONF.get("spark.driver.memory", "1g")}


@dataclass
class AirflowServices:
    airflow_home: Path
    home: WeirHome
    ports: tuple[int, ...] = field(default_factory=lambda: free_ports(3))  # API server, 2 log servers
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    unpaused: set[str] = field(default_factory=set)

    @cached_property
    def env(self) -> dict[str, str]:
        """The environment of every Airflow process and CLI call of these services."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(airflow_env_file(self.airflow_home))
        env.update({
            "AIRFLOW_HOME": str(self.airflow_home),
            "WEIR_HOME": str(self.home.root),
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "plugins"), str(REPO_ROOT)]),
            "PATH": os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]),
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            **small_spark_jobs(),
            "WEIR_SPARK_MASTER": "local[2]",
            "AIRFLOW_CONN_SPARK_DEFAULT": LOCAL_MASTER,
            "AIRFLOW__API__PORT": str(self.ports[0]),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.ports[0]}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.ports[0]}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "weir-airflow-services-test",
            # Log servers off the default ports, which another Airflow on this machine may hold.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.ports[1]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.ports[2]),
            # Only runs the tests ask for: no scheduled runs of the unpaused @daily/@hourly DAGs.
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            # A restarted triggerer takes over the triggers of a dead one after this many seconds.
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        })
        return env

    @property
    def db_path(self) -> Path:
        return self.airflow_home / "airflow.db"

    def log_path(self, component: str) -> Path:
        return self.airflow_home / "logs" / f"{component}.log"

    # -- processes --------------------------------------------------------------------------
    def migrate(self) -> None:
        migrated_db(self.db_path)

    def start(self, *components: str) -> None:
        env = self.env
        for component in components or COMPONENTS:
            args = [str(AIRFLOW), component]
            if component == "api-server":   # tasks report through the execution API only
                args += ["--apps", "execution", "--host", "127.0.0.1", "--port", str(self.ports[0]),
                         "--workers", "1"]
            self.log_path(component).parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path(component), "ab") as out:
                self.procs[component] = subprocess.Popen(
                    args, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=str(self.airflow_home), start_new_session=True)

    def kill(self, *components: str, sig: signal.Signals = signal.SIGKILL, wait_s: float = 30.0) -> None:
        """Signal each component's whole process group (its workers and runners too), all at once,
        then reap them within one deadline; a group still alive at it is SIGKILLed."""
        procs = [proc for c in components if (proc := self.procs.get(c)) is not None]
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def stop_all(self) -> None:
        """SIGTERM every component group, then SIGKILL whatever is left of any of them. The API
        server goes last: a task still running when its scheduler or worker is told to stop
        reports its end through it, and without it retried until the deadline (20 s)."""
        self.kill(*(c for c in self.procs if c != "api-server"), sig=signal.SIGTERM, wait_s=20.0)
        self.kill("api-server", sig=signal.SIGTERM, wait_s=20.0)
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def alive(self, component: str) -> bool:
        proc = self.procs.get(component)
        return proc is not None and proc.poll() is None

    def leftovers(self) -> list[str]:
        """Every process still running with this AIRFLOW_HOME in its environment (Airflow
        components, task runners, and the drivers they launched)."""
        marker = f"AIRFLOW_HOME={self.airflow_home}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:200]
                    found.append(f"{entry.name}: {command!r}")
            except OSError:
                continue
        return found

    def logs_tail(self, chars: int = 3000) -> str:
        parts = []
        for component in COMPONENTS:
            path = self.log_path(component)
            if path.is_file():
                parts.append(f"--- {component} ---\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    # -- the CLI and the metadata DB --------------------------------------------------------
    def cli(self, *args: str, timeout_s: float = 180, attempts: int = 4) -> str:
        """Run `airflow *args`; retried when SQLite refused it with `database is locked`.

        The busy timeout cannot help there: in WAL mode a transaction that read first and then
        writes fails at once (SQLITE_BUSY_SNAPSHOT) when a component committed in between. Airflow
        rolls such a call back (`backfill create` deletes its half-made back-fill, see
        `airflow.models.backfill._cleanup_partial_backfill`), so retrying is what its user does too."""
        for attempt in range(1, attempts + 1):
            out = subprocess.run([str(AIRFLOW), *args], env=self.env, capture_output=True, text=True,
                                 timeout=timeout_s, cwd=str(self.airflow_home))
            failed = f"airflow {' '.join(args)}: {out.stderr[-3000:]}{out.stdout[-2000:]}"
            if out.returncode == 0 or "database is locked" not in out.stderr or attempt == attempts:
                break
            print(f"{failed[:200]}… database is locked: attempt {attempt} of {attempts}, retrying")
            time.sleep(2 * attempt)
        assert out.returncode == 0, failed
        return out.stdout

    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        connection = sqlite3.connect(self.db_path, timeout=30)
        connection.row_factory = sqlite3.Row
        try:
            connection.execute("PRAGMA query_only = 1")
            return [dict(row) for row in connection.execute(sql, params)]
        finally:
            connection.close()

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self.query("SELECT id, run_id, run_type, state, logical_date, conf, triggering_user_name "
                          "FROM dag_run WHERE dag_id = ? ORDER BY id", dag_id)

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        rows = self.query("SELECT task_id, state, try_number, trigger_id, next_method FROM task_instance "
                          "WHERE dag_id = ? AND run_id = ?", dag_id, run_id)
        return {r["task_id"]: r for r in rows}

    def trigger(self, trigger_id: int) -> dict[str, Any] | None:
        rows = self.query("SELECT id, classpath, kwargs, triggerer_id FROM trigger WHERE id = ?", trigger_id)
        return rows[0] if rows else None

    def live_triggerer_ids(self, within_s: float = 10.0) -> set[int]:
        rows = self.query("SELECT id, latest_heartbeat FROM job WHERE job_type = 'TriggererJob' AND "
                          "state = 'running' AND end_date IS NULL")
        now = time.time()
        return {r["id"] for r in rows if now - _epoch(r["latest_heartbeat"]) < within_s}

    def wait_parsed(self, dag_ids: list[str], timeout_s: float) -> None:
        marks = ",".join("?" * len(dag_ids))

        def parsed() -> bool:
            if not self.db_path.is_file():
                return False
            try:
                rows = self.query(f"SELECT dag_id FROM serialized_dag WHERE dag_id IN ({marks})", *dag_ids)
            except sqlite3.OperationalError:   # tables not there yet
                return False
            return {r["dag_id"] for r in rows} == set(dag_ids)

        self.wait_for(f"the DAGs {dag_ids} parsed", parsed, timeout_s)

    def ready(self, dag_ids: list[str], unpause: str) -> None:
        """Wait until `dag_ids` are parsed, then unpause the DAGs matching the regex `unpause`
        (once)."""
        if unpause in self.unpaused:
            return
        self.wait_parsed(dag_ids, 300)
        self.cli("dags", "unpause", "--treat-dag-id-as-regex", "--yes", unpause)
        self.unpaused.add(unpause)

    def wait_for(self, what: str, predicate: Callable[[], Any], timeout_s: float, poll_s: float = 2.0) -> Any:
        """The one poll loop (`tests.support.polling.wait_for`), given up as soon as an Airflow
        component exits; a failure carries the components' log tails."""
        def exited() -> str | None:
            gone = [f"airflow {c} exited ({p.returncode})" for c, p in self.procs.items()
                    if p.poll() is not None]
            return "; ".join(gone) or None

        try:
            return wait_for(what, predicate, timeout_s, poll_s=poll_s, abort=exited)
        except (WaitTimeout, WaitAborted) as err:
            raise AssertionError(f"{err}\n{self.logs_tail()}") from err

    def wait_runs_done(self, dag_id: str, count: int, timeout_s: float,
                       run_type: str | None = None) -> list[dict[str, Any]]:
        def done() -> list[dict[str, Any]] | None:
            runs = [r for r in self.dag_runs(dag_id) if run_type is None or r["run_type"] == run_type]
            finished = [r for r in runs if r["state"] in ("success", "failed")]
            return runs if len(runs) >= count and len(finished) == len(runs) else None

        return self.wait_for(f"{count} finished run(s) of {dag_id}", done, timeout_s)


def _epoch(text: str) -> float:
    import datetime as dt

    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def driver_processes(home: WeirHome, pipeline: str) -> dict[str, list[int]]:
    """The pids of every running stream driver of `pipeline` on `home`, by kind: the Python
    driver and the spark-submit JVM that runs it.

    A process with its parent's command line is left out: between its fork and its exec, a child
    the JVM starts (a Python worker, a shell command of Hadoop's) still shows the JVM's command
    line. One was seen here as a second driver JVM, with the suite's two workers loading the
    machine. (The Python driver is the JVM's child too, under spark-submit, with its own.)"""
    marker = f"WEIR_HOME={home.root}".encode()
    found: dict[str, list[int]] = {"python": [], "jvm": []}
    seen: dict[int, tuple[int, list[str]]] = {}   # pid: (parent pid, command line)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if STREAM_ENTRY not in argv or pipeline not in argv[argv.index(STREAM_ENTRY) + 1:]:
                continue
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:
            continue
        fields = stat_fields(int(entry.name))
        if fields is None:
            continue
        seen[int(entry.name)] = int(fields[1]), argv   # its parent pid
        kind = "jvm" if any("SparkSubmit" in a for a in argv) else "python"
        found[kind].append(int(entry.name))

    def forked_unexecuted(pid: int) -> bool:
        parent, argv = seen[pid]
        return parent in seen and seen[parent][1] == argv

    return {kind: [pid for pid in pids if not forked_unexecuted(pid)] for kind, pids in found.items()}
