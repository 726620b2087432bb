"""Launching and tearing down detached drivers.

spark-submit is started as its own session and process group, with its output in
`WEIR_HOME/logs`, through the driver backend of the master (`spark_jobs.control.backends`: the
process itself on this host, or a YARN application in cluster deploy mode), and the launch and the
driver's handle are recorded in the control store (`launch`: `control/<P>/launch.json`, or a row in
PostgreSQL), so any later task — after an Airflow restart too, on any worker — can find, adopt,
stop or kill it through the same backend. The command itself is
built by the caller (the Airflow hook follows the apache-spark provider's conventions). Launch
records and driver logs hold command lines: they are their owner's only (0600 in 0700 folders),
and secret settings never reach the command line.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
import os
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from spark_jobs.control.backends import DriverBackend, DriverHandle, LocalProcessBackend, backend_of
from spark_jobs.control.lease import iso, now_utc
from spark_jobs.control.processes import ProcessRef
from spark_jobs.control.store import LAUNCH, control_store
from spark_jobs.control.submit_secrets import PRIVATE_FILE, move_secret_conf, private_folder
from spark_jobs.home import REPO_ROOT, WeirHome

log = logging.getLogger(__name__)
VENV_PYTHON = Path(sys.executable)


def entry_point(module: str) -> str:
    """The file of `module` in the installed package, which spark-submit runs (a Python
    application is a file); found without importing the module."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"no module {module} in the installed weir package")
    return spec.origin


STREAM_ENTRY = entry_point("spark_jobs.stream")


@dataclass(frozen=True)
class LaunchRecord:
    """A detached launch: the leader of spark-submit's process group, where its output goes, and
    the driver's handle with its backend (none recorded: the process itself, as before backends)."""

    pipeline: str
    pid: int
    host: str
    start_ticks: int | None
    launched_at: str
    log_path: str
    command: list[str]
    handle: dict[str, object] | None = None

    @property
    def driver(self) -> DriverHandle:
        if self.handle:
            return DriverHandle(**self.handle)  # type: ignore[arg-type]
        return LocalProcessBackend.handle_of(ProcessRef(self.pid, self.host, self.start_ticks))

    @property
    def backend(self) -> DriverBackend:
        return backend_of(self.driver)

    @property
    def process(self) -> DriverHandle:
        """The driver as a process is tracked (`alive()`, `local`): the launch's own process group
        on this host, or the cluster's application."""
        return self.driver


def read_launch(home: WeirHome, pipeline: str) -> LaunchRecord | None:
    data = control_store(home).get(pipeline, LAUNCH)
    return LaunchRecord(**data) if data else None


def driver_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The driver's environment: the venv's Python for driver and workers, the same WEIR_HOME."""
    env = dict(os.environ)
    python = str(VENV_PYTHON)
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python,
               WEIR_HOME=str(WeirHome.from_env().root))
    bin_dir = str(VENV_PYTHON.parent)
    if bin_dir not in env.get("PATH", "").split(os.pathsep):
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env.update(extra or {})
    return env


def cluster_driver_env() -> dict[str, str]:
    """What a driver started by a cluster manager (not from this process) needs of this
    environment: Weir's settings (WEIR_*), and this checkout on the Python path, as a driver on
    this host inherits them. Secret ones travel in the submit's private properties file."""
    env = {k: v for k, v in os.environ.items() if k.startswith("WEIR_")}
    env.update(WEIR_HOME=str(WeirHome.from_env().root), PYSPARK_PYTHON=str(VENV_PYTHON),
               PYTHONPATH=str(REPO_ROOT))
    return env


def spawn(home: WeirHome, pipeline: str, command: list[str],
          env: dict[str, str] | None = None, backend: DriverBackend | None = None) -> LaunchRecord:
    """Start `command` detached through `backend` (default: a local process; new session, own
    process group, output to a log file under WEIR_HOME/logs) and record the launch and handle."""
    private_folder(home.logs)
    private_folder(home.control(pipeline))
    command = move_secret_conf(command, home.control(pipeline) / "spark-secrets.properties")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    log_path = home.logs / f"{pipeline}-driver-{stamp}-{os.getpid()}.log"
    launched = (backend or LocalProcessBackend()).launch(
        command, env=env or driver_environment(), log_path=log_path, cwd=REPO_ROOT, log_mode=PRIVATE_FILE)
    launcher = launched.launcher
    record = LaunchRecord(pipeline, launcher.pid, launcher.host, launcher.start_ticks, iso(now_utc()),
                          str(log_path), list(command), asdict(launched.handle))
    control_store(home).put(pipeline, LAUNCH, asdict(record))
    log.info("%s driver launched detached: %s %s, log %s", pipeline, launched.handle.backend,
             launched.handle.id, log_path)
    return record


def kill_launch(home: WeirHome, pipeline: str, sig: signal.Signals = signal.SIGKILL) -> bool:
    """End the recorded launch by force through its backend, if it still runs (clean-up of a dead
    or hung driver: no orphaned spark-submit JVM, no YARN application is left behind). A process
    group whose leader pid now belongs to another process (recycled) is left alone."""
    record = read_launch(home, pipeline)
    if record is None or not record.process.local:
        return False
    return record.backend.kill(record.driver, sig)
