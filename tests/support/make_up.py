"""`make up` (infra/airflow/up.sh) run by a test on a WEIR_HOME of its own, as a person runs it in
a terminal: started in its own session with SIGINT at its default (so that Ctrl-C reaches it),
stopped with Ctrl-C, and whatever it started killed should it outlive the test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.home import REPO_ROOT, WeirHome

UP = REPO_ROOT / "infra" / "airflow" / "up.sh"
STOP_WITHIN_S = 240


def answers(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def processes_of(home: Path) -> dict[int, str]:
    """Live processes (of this user) whose environment has WEIR_HOME=`home`: everything up.sh
    started carries it, the detached driver and the broker included."""
    marker = f"WEIR_HOME={home}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
        except OSError:
            continue
    return found


@dataclass
class MakeUp:
    """A running `make up`: its process, its output and the environment it was started with."""

    process: subprocess.Popen
    log: Path
    env: dict[str, str]

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def ctrl_c(self, timeout_s: float = STOP_WITHIN_S) -> int:
        """Ctrl-C, as in the terminal: up.sh stops the stream, the feed and Airflow; its exit code."""
        os.kill(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=timeout_s)


@contextmanager
def make_up(home: WeirHome, log: Path, **settings: str) -> Iterator[MakeUp]:
    """up.sh on `home` with `settings` (WEIR_* variables) in its environment, output to `log`."""
    env = {**os.environ, "WEIR_HOME": str(home.root), **settings}
    env.pop("AIRFLOW_HOME", None)
    with open(log, "wb") as out:
        # SIGINT back to its default: a shell ignores it in background jobs, and up.sh could not trap it.
        process = subprocess.Popen(["bash", str(UP)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   cwd=REPO_ROOT, start_new_session=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        yield MakeUp(process, log, env)
    finally:
        _stop_leftovers(process, home.root)


def _stop_leftovers(process: subprocess.Popen, home: Path) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    for pid in processes_of(home):  # only what this up.sh started
        try:
            group = os.getpgid(pid)
            if group != os.getpgid(0):
                os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
