"""Gold and the session table in a second process of the driver, at a lower CPU priority.

On a local master every query of a driver shares the host's cores. Gold's and the sessions'
micro-batches (their state stores, MERGEs and commits) cost about the same whatever they hold,
and a line that lands while one of them runs waits for it: with them in the driver, silver's p99
latency was 5.25 s at half the sustained rate on two cores, and 2.14 s with them idle
(docs/performance.md). Spark's schedulers cannot help: a task that runs keeps its core, and a
query's driver-side work is no task at all. The operating system's scheduler can: a pipeline
whose entry sets `derived_in_own_process` runs those queries in a process of their own,
`nice`d by `NICENESS`, so the ingest's threads take the cores first and the derived queries take
what is left: while the ingest keeps both cores busy they fall behind, and catch up in bounded
batches once it leaves room.

The second process (`python -m spark_jobs.stream P --derived-of PID`):

- is started by the driver (`DerivedProcess.start`) once it holds the lease, has claimed and
  prepared the tables and rebuilt gold and the sessions where they start afresh, and before its
  ingest query starts (the second JVM then starts while the driver plans, not during its batches);
- shares the driver's lease (`lease.join`): it checks it before each of its batches and commits,
  and its commits carry the driver's fencing token, so a lost lease fences both processes; the
  driver alone renews it;
- dies with the driver: the kernel kills it when the driver's thread that started it ends
  (`PR_SET_PDEATHSIG`, `die_with_parent`), it also watches for a new parent, and its JVM exits
  when its Python does (PySpark's gateway watches its stdin);
- reports its queries' states to the driver through a pipe, a JSON line a second
  (`DerivedMonitor`); the driver's heartbeat carries them, and each query's stall is judged by the
  Spark tasks of its own process; its progress rows it writes itself;
- fails the driver when it exits on its own (`DerivedProcess.failure`: the driver stops, and its
  supervisor restarts both), and is stopped by the driver's stop (SIGTERM: at a batch boundary).

On any other master the tasks run on executors, not on the driver's cores, and every query stays
in the driver.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

from spark_jobs.control.heartbeat import DriverMonitor
from spark_jobs.control.lease import Lease, fence
from spark_jobs.home import REPO_ROOT, WeirHome

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)
# The lowest priority a process can take without a policy of its own: a thread of it weighs 15 against
# 1,024 for one of the driver's when both want a core (nice 10 weighs 110, and cost the ingest a third
# more per batch; SCHED_IDLE would starve the derived queries for as long as the ingest is busy).
NICENESS = 19
PR_SET_PDEATHSIG = 1   # <linux/prctl.h>
FENCED_EXIT = 4        # `spark_jobs.stream.main`'s exit code of a driver that lost its lease
# spark-submit's handle on its Python driver: a process that kept them would join the driver's JVM
# instead of starting its own
GATEWAY_ENV = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_SUBMIT_ARGS")


def runs_apart(pipeline: Pipeline, spark: SparkSession, queries: tuple[str, ...]) -> tuple[str, ...]:
    """Which of the driver's `queries` run in its second process: gold and the sessions when the
    entry asks for it and the master is local; none otherwise."""
    if not pipeline.derived_in_own_process:
        return ()
    master = spark.sparkContext.master
    if not master.startswith("local"):
        log.info("%s: every query in the driver (master %s: the tasks run on executors)",
                 pipeline.name, master)
        return ()
    return tuple(q for q in queries if q != "ingest")


class DerivedProcess:
    """The driver's handle on its second process: started, watched, stopped."""

    def __init__(self, pipeline: Pipeline, process: subprocess.Popen[bytes], states: int) -> None:
        self.pipeline = pipeline
        self.process = process
        self.stopping = False
        self._states: dict[str, dict[str, Any]] = {}
        self._reader = threading.Thread(target=self._read, args=(states,), daemon=True,
                                        name=f"weir-derived-{pipeline.name}")
        self._reader.start()

    @classmethod
    def start(cls, spark: SparkSession, pipeline: Pipeline, home: WeirHome) -> DerivedProcess:
        """Start the second process of this driver (which must hold the pipeline's lease). It gets
        the entry as this driver runs it (on stdin: a test's or an operator's variant, not the
        catalog's file), the driver's master and memory, and its environment, WEIR_HOME included."""
        read_end, write_end = os.pipe()
        env = {k: v for k, v in os.environ.items() if k not in GATEWAY_ENV}
        env["WEIR_HOME"] = str(home.root)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
        command = [sys.executable, "-m", "spark_jobs.stream", pipeline.name,
                   "--derived-of", str(os.getpid()), "--master", spark.sparkContext.master,
                   "--states-fd", str(write_end)]
        memory = spark.sparkContext.getConf().get("spark.driver.memory")
        if memory:
            command += ["--driver-memory", memory]
        try:
            process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, pass_fds=(write_end,))
        finally:
            os.close(write_end)
        assert process.stdin is not None
        try:
            process.stdin.write(pickle.dumps(pipeline))
            process.stdin.close()
        except BrokenPipeError:   # it exited at once: `failure` says so
            pass
        log.info("%s: gold and the sessions in process %d (nice %d)", pipeline.name, process.pid, NICENESS)
        return cls(pipeline, process, read_end)

    def _read(self, states: int) -> None:
        with os.fdopen(states, "r", encoding="utf-8") as lines:
            for line in lines:
                try:
                    self._states = json.loads(line)
                except ValueError:
                    log.warning("%s: unreadable query states from process %d: %.200r",
                                self.pipeline.name, self.process.pid, line)

    def query_states(self) -> dict[str, dict[str, Any]]:
        """Its queries' states, as it last reported them (none before its first report)."""
        return dict(self._states)

    def failure(self) -> str | None:
        """Why the driver must stop: the process ended without being asked to. When it ended
        fenced, the driver's own lease is lost as well: `LeaseLostError` says so (the driver then
        exits as a fenced one), whichever of the two noticed first."""
        code = self.process.poll()
        if code is None or self.stopping:
            return None
        if code == FENCED_EXIT:
            fence(self.pipeline.name)
        return f"the process of gold and the sessions (pid {self.process.pid}) exited with code {code}"

    def terminate(self) -> None:
        """Ask it to stop at a batch boundary (it needs no answer: `wait`)."""
        self.stopping = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> bool:
        """Wait until it has stopped, and kill it after `timeout_s`; whether it stopped cleanly."""
        self.terminate()
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s: process %d still running %.0fs after its stop: killed", self.pipeline.name,
                        self.process.pid, timeout_s)
            self.process.kill()
            code = self.process.wait()
        self._reader.join(5.0)
        return code == 0


def die_with_parent(parent: int) -> bool:
    """Have the kernel SIGKILL this process when `parent`'s thread that started it ends; whether
    `parent` is still this process's parent (once the signal is armed, so none can slip between)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    return os.getppid() == parent


def parent_gone(parent: int) -> str | None:
    """Why this second process must stop at once: its driver is gone (a new parent adopted it)."""
    return None if os.getppid() == parent else f"the driver (pid {parent}) is gone"


class DerivedMonitor(DriverMonitor):
    """The second process's monitor: its progress rows and its lease checks as a driver's, its
    queries' states to the driver through `out` instead of a heartbeat, and no stop requests of
    its own (the driver's stop is its stop)."""

    def __init__(self, spark: SparkSession, home: WeirHome, lease: Lease, stop: threading.Event,
                 out: IO[str]) -> None:
        super().__init__(spark, home, lease, stop)
        self.out = out

    def beat(self) -> None:
        try:
            self.out.write(json.dumps(self.query_states(), default=str) + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):   # the driver is gone, or this monitor closed
            if self.stop is not None:
                self.stop.set()

    def stop_request(self) -> dict[str, Any] | None:
        return None

