"""Driver backends: how a driver is launched, tracked, stopped and killed, one backend per cluster
manager behind one interface, chosen from the Spark master.

A launched driver is known by a `DriverHandle`: a process (pid and kernel start time) on this host
for `LocalProcessBackend`, the embedded default where spark-submit's own process is the driver
(client mode); a YARN application id for `YarnBackend`, where spark-submit only submits and the
driver runs in the cluster (cluster deploy mode). State and kill of a YARN application go through
the ResourceManager's REST API (stdlib HTTP, no JVM), so the supervisor needs no shared host with
its driver. Weir's own graceful stop (a stop request the driver honours at a batch boundary,
`spark_jobs.control.stop`) comes first whatever the backend; a backend's `kill` is the last resort.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ElementTree
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from spark_jobs.control.processes import ProcessRef, hostname, signal_group, start_ticks
from spark_jobs.errors import UserError

log = logging.getLogger(__name__)
# Until spark-submit has handed the application to the cluster manager (client JVM start, upload).
SUBMIT_TIMEOUT_S = 300.0
REST_TIMEOUT_S = 10.0


class DriverState(StrEnum):
    """What the cluster manager says of a driver."""

    RUNNING = "running"      # submitted, starting or running
    FINISHED = "finished"    # ended by itself, successfully
    FAILED = "failed"        # failed, or killed
    UNKNOWN = "unknown"      # the cluster manager cannot tell (unreachable, another host)

    @property
    def alive(self) -> bool | None:
        return None if self is DriverState.UNKNOWN else self is DriverState.RUNNING


class ClusterUnreachableError(UserError):
    """The cluster manager did not answer, or refused the submission."""


@dataclass(frozen=True)
class DriverHandle:
    """A launched driver as its backend knows it: `backend` names the backend, `id` is a pid or an
    application id, `where` the host of a process or the ResourceManager's web address."""

    backend: str
    id: str
    where: str
    start_ticks: int | None = None

    # The interface of `processes.ProcessRef`, so waiting and judging treat both alike.
    @property
    def local(self) -> bool:
        """Whether this host can see and end the driver (a cluster's driver: through the cluster
        manager)."""
        return backend_of(self).reaches(self)

    def alive(self) -> bool | None:
        return self.state().alive

    def state(self) -> DriverState:
        return backend_of(self).state(self)


@dataclass(frozen=True)
class Launched:
    """What a launch started: the spark-submit process, and the driver's handle."""

    launcher: ProcessRef
    handle: DriverHandle


def start_detached(command: list[str], *, env: dict[str, str], log_path: Path, cwd: Path,
                   log_mode: int) -> subprocess.Popen[bytes]:
    """Start `command` as its own session and process group, output appended to `log_path`."""
    with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, log_mode), "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=str(cwd), start_new_session=True, close_fds=True)


class DriverBackend(ABC):
    """Launch → handle; state, kill and adoption by handle."""

    name: ClassVar[str]

    @abstractmethod
    def launch(self, command: list[str], *, env: dict[str, str], log_path: Path, cwd: Path,
               log_mode: int) -> Launched:
        """Run the spark-submit `command` detached; return once the driver has a handle."""

    @abstractmethod
    def state(self, handle: DriverHandle) -> DriverState: ...

    @abstractmethod
    def kill(self, handle: DriverHandle, sig: signal.Signals = signal.SIGKILL) -> bool:
        """End the driver by force (`sig` for a process; a cluster's driver is killed by its
        manager). Whether there was anything to end."""

    @abstractmethod
    def reaches(self, handle: DriverHandle) -> bool:
        """Whether this host can tell the driver's state and end it."""

    def describe(self, handle: DriverHandle) -> str:
        """The driver and its state, in words, for verdicts and the event log."""
        return f"{self.name} driver {handle.id} {self.state(handle)}"

    def adopt(self, handle: DriverHandle) -> DriverHandle | None:
        """The handle of a driver still running, to watch instead of launching another; None when
        it has ended (or its state cannot be told)."""
        return handle if self.state(handle) is DriverState.RUNNING else None

    def wait_ended(self, handle: DriverHandle, timeout_s: float, poll_s: float = 0.5) -> bool:
        """Whether the driver was seen to end within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.state(handle).alive is not False:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
        return True


class LocalProcessBackend(DriverBackend):
    """The embedded default: the driver is spark-submit's process group on this host (client mode),
    known by its pid and kernel start time, so a recycled pid is never taken for it."""

    name = "local"

    def launch(self, command: list[str], *, env: dict[str, str], log_path: Path, cwd: Path,
               log_mode: int) -> Launched:
        child = start_detached(command, env=env, log_path=log_path, cwd=cwd, log_mode=log_mode)
        launcher = ProcessRef(child.pid, hostname(), start_ticks(child.pid))
        return Launched(launcher, self.handle_of(launcher))

    @staticmethod
    def handle_of(process: ProcessRef) -> DriverHandle:
        return DriverHandle(LocalProcessBackend.name, str(process.pid), process.host, process.start_ticks)

    @staticmethod
    def process(handle: DriverHandle) -> ProcessRef:
        return ProcessRef(int(handle.id), handle.where, handle.start_ticks)

    def state(self, handle: DriverHandle) -> DriverState:
        alive = self.process(handle).alive()
        if alive is None:
            return DriverState.UNKNOWN
        return DriverState.RUNNING if alive else DriverState.FAILED

    def reaches(self, handle: DriverHandle) -> bool:
        return self.process(handle).local

    def kill(self, handle: DriverHandle, sig: signal.Signals = signal.SIGKILL) -> bool:
        """Signal the whole process group (spark-submit's JVM and the Python driver), unless its
        leader's pid now belongs to another process (recycled)."""
        process = self.process(handle)
        if not process.local:
            return False
        ticks = start_ticks(process.pid)
        if ticks is not None and process.start_ticks is not None and ticks != process.start_ticks:
            return False
        return signal_group(process.pid, sig)


# YARN application states (the ResourceManager's `YarnApplicationState`).
YARN_RUNNING = frozenset({"NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING"})
YARN_ENDING = frozenset({"FINISHING", "KILLING"})   # not final yet; REST-only transient names


class YarnBackend(DriverBackend):
    """Cluster deploy mode on YARN: the driver runs in the application master's container; its
    handle is the application id, found by a tag unique to the launch."""

    name = "yarn"

    def __init__(self, rm_url: str) -> None:
        self.rm_url = rm_url.rstrip("/")

    @classmethod
    def from_hadoop_conf(cls, conf_dir: str | None = None) -> YarnBackend:
        """The ResourceManager named by `HADOOP_CONF_DIR`'s yarn-site.xml (as spark-submit finds it)."""
        folder = conf_dir or os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")
        if not folder:
            raise ClusterUnreachableError("master yarn needs HADOOP_CONF_DIR (the folder of yarn-site.xml)")
        site = Path(folder) / "yarn-site.xml"
        try:
            properties = {p.findtext("name"): p.findtext("value")
                          for p in ElementTree.parse(site).getroot().iter("property")}
        except (OSError, ElementTree.ParseError) as err:
            raise ClusterUnreachableError(f"cannot read {site}: {err}") from err
        web = properties.get("yarn.resourcemanager.webapp.address") or \
            f"{properties.get('yarn.resourcemanager.hostname') or '127.0.0.1'}:8088"
        return cls(f"http://{web}")

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.rm_url}{path}", timeout=REST_TIMEOUT_S) as response:
            return json.loads(response.read().decode())

    def application(self, app_id: str) -> dict | None:
        """The ResourceManager's report of `app_id`; None when it does not know it."""
        try:
            return self._get(f"/ws/v1/cluster/apps/{app_id}").get("app")
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def launch(self, command: list[str], *, env: dict[str, str], log_path: Path, cwd: Path,
               log_mode: int) -> Launched:
        """Submit with a tag unique to this launch and without waiting for the application to end;
        the handle is the application the ResourceManager files under that tag."""
        tag = f"weir-launch-{uuid.uuid4().hex[:16]}"
        command = submit_command_with(command, {"spark.yarn.tags": tag,
                                                "spark.yarn.submit.waitAppCompletion": "false"})
        child = start_detached(command, env=env, log_path=log_path, cwd=cwd, log_mode=log_mode)
        launcher = ProcessRef(child.pid, hostname(), start_ticks(child.pid))
        try:
            returncode = child.wait(timeout=SUBMIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            signal_group(child.pid, signal.SIGKILL)
            raise ClusterUnreachableError(f"spark-submit did not hand the driver to YARN within "
                                          f"{SUBMIT_TIMEOUT_S:.0f}s; see {log_path}") from None
        app_id = self.find(tag)
        if app_id is None:
            raise ClusterUnreachableError(f"spark-submit exited {returncode} and YARN at {self.rm_url} "
                                          f"has no application tagged {tag}; see {log_path}")
        log.info("driver submitted to YARN as %s (tag %s)", app_id, tag)
        return Launched(launcher, DriverHandle(self.name, app_id, self.rm_url))

    def find(self, tag: str) -> str | None:
        """The id of the newest application carrying `tag`."""
        apps = (self._get(f"/ws/v1/cluster/apps?applicationTags={tag}").get("apps") or {}).get("app") or []
        return max(apps, key=lambda app: app.get("startedTime", 0))["id"] if apps else None

    def state(self, handle: DriverHandle) -> DriverState:
        try:
            app = YarnBackend(handle.where).application(handle.id)
        except (OSError, ValueError) as err:
            log.warning("YARN at %s did not answer about %s: %s", handle.where, handle.id, err)
            return DriverState.UNKNOWN
        if app is None:
            return DriverState.UNKNOWN
        state = app.get("state")
        if state in YARN_RUNNING or state in YARN_ENDING:
            return DriverState.RUNNING
        if state == "FINISHED" and app.get("finalStatus") == "SUCCEEDED":
            return DriverState.FINISHED
        return DriverState.FAILED

    def describe(self, handle: DriverHandle) -> str:
        """`<id> <state>/<finalStatus>` as YARN reports it, for verdicts and the event log."""
        try:
            app = YarnBackend(handle.where).application(handle.id) or {}
        except (OSError, ValueError):
            app = {}
        return f"YARN application {handle.id} {app.get('state', '?')}/{app.get('finalStatus', '?')}"

    def reaches(self, handle: DriverHandle) -> bool:
        return True

    def kill(self, handle: DriverHandle, sig: signal.Signals = signal.SIGKILL) -> bool:
        """Ask the ResourceManager to kill the application (it kills the driver's container and
        its executors)."""
        if self.state(handle) is not DriverState.RUNNING:
            return False
        request = urllib.request.Request(
            f"{handle.where}/ws/v1/cluster/apps/{handle.id}/state", method="PUT",
            data=json.dumps({"state": "KILLED"}).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=REST_TIMEOUT_S):
                pass
        except (OSError, urllib.error.HTTPError) as err:
            log.warning("YARN at %s refused to kill %s: %s", handle.where, handle.id, err)
            return False
        log.info("asked YARN to kill %s", handle.id)
        return True


def submit_command_with(command: list[str], conf: dict[str, str]) -> list[str]:
    """`command` (spark-submit binary first) with `--conf` pairs added right after the binary."""
    extra = [part for key, value in conf.items() for part in ("--conf", f"{key}={value}")]
    return [command[0], *extra, *command[1:]]


def backend_for(master: str) -> DriverBackend:
    """The backend of a Spark master: `yarn` → YARN, anything else runs the driver in spark-submit's
    own process on this host (local, standalone client mode)."""
    if master.split("://", 1)[0] == "yarn":
        return YarnBackend.from_hadoop_conf()
    return LocalProcessBackend()


def backend_of(handle: DriverHandle) -> DriverBackend:
    """The backend a recorded handle belongs to (all it needs is in the handle)."""
    if handle.backend == YarnBackend.name:
        return YarnBackend(handle.where)
    return LocalProcessBackend()
