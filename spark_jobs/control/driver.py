"""Launching and tearing down detached drivers.

A driver is started as its own session and process group (`spark-submit` and the Python driver
it runs), with its output in `WEIR_HOME/logs`, and the launch is recorded in
`control/<P>/launch.json`, so any later task — after an Airflow restart too — can find, adopt,
signal or kill it. The command itself is built by the caller (the Airflow hook follows the
apache-spark provider's conventions). Launch records and driver logs hold command lines: they are
their owner's only (0600 in 0700 folders), and secret settings never reach the command line.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from spark_jobs.control.lease import iso, now_utc, read_json, write_json_atomically
from spark_jobs.control.processes import ProcessRef, hostname, signal_group, start_ticks
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
    """A detached launch: the leader of its process group, and where its output goes."""

    pipeline: str
    pid: int
    host: str
    start_ticks: int | None
    launched_at: str
    log_path: str
    command: list[str]

    @property
    def process(self) -> ProcessRef:
        return ProcessRef(self.pid, self.host, self.start_ticks)


def launch_path(home: WeirHome, pipeline: str) -> Path:
    return home.control(pipeline) / "launch.json"


def read_launch(home: WeirHome, pipeline: str) -> LaunchRecord | None:
    data = read_json(launch_path(home, pipeline))
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


def spawn(home: WeirHome, pipeline: str, command: list[str],
          env: dict[str, str] | None = None) -> LaunchRecord:
    """Start `command` detached (new session, own process group, output to a log file under
    WEIR_HOME/logs) and record the launch."""
    private_folder(home.logs)
    private_folder(home.control(pipeline))
    command = move_secret_conf(command, home.control(pipeline) / "spark-secrets.properties")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    log_path = home.logs / f"{pipeline}-driver-{stamp}-{os.getpid()}.log"
    with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE), "ab") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env or driver_environment(), cwd=str(REPO_ROOT),
                                 start_new_session=True, close_fds=True)
    record = LaunchRecord(pipeline, child.pid, hostname(), start_ticks(child.pid), iso(now_utc()),
                          str(log_path), list(command))
    write_json_atomically(launch_path(home, pipeline), asdict(record))
    launch_path(home, pipeline).chmod(PRIVATE_FILE)
    log.info("%s driver launched detached: pid %d, log %s", pipeline, child.pid, log_path)
    return record


def kill_launch(home: WeirHome, pipeline: str, sig: signal.Signals = signal.SIGKILL) -> bool:
    """Signal the whole process group of the recorded launch, if any of it still runs (clean-up of
    a dead or hung driver: no orphaned spark-submit JVM is left behind). A group whose leader pid
    now belongs to another process (recycled) is left alone."""
    record = read_launch(home, pipeline)
    if record is None or not record.process.local:
        return False
    ticks = start_ticks(record.pid)
    if ticks is not None and record.start_ticks is not None and ticks != record.start_ticks:
        return False
    return signal_group(record.pid, sig)
